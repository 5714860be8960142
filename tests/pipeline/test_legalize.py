"""The whole legalization pipeline on small models: what it rewrites, what it refuses, what it
writes, and that the result computes what the original did (checked here on ORT, independently
of the pipeline's own verification)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from deploycc import api
from deploycc.analysis.check import check_model
from deploycc.api import get_target
from deploycc.errors import OptionError
from deploycc.options import LegalizeOptions
from deploycc.passes.base import Pass, PassOutcome, PipelineState
from deploycc.pipeline.manager import InvariantError, run_passes
from tests.pipeline.conftest import digest


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)





def test_encoder_down_to_jetson_nano_is_legal_and_equal(encoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "nano.onnx"
    before = digest(encoder)
    report = api.legalize(encoder, "jetson-nano", out)
    assert report.success, report.summary
    assert report.opset == {"before": 20, "after": 13}
    fired = sorted({r.rule for r in report.rewrites})
    assert fired == ["gelu", "layer-normalization"]
    assert all(r.certificate is not None and r.certificate.status == "proven" for r in report.rewrites)
    assert digest(encoder) == before  # the input is never modified
    assert check_model(out, [get_target("jetson-nano")]).targets[0].legal
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 7, 64)).astype(np.float32)}
    np.testing.assert_allclose(_run(out, feeds)[0], _run(encoder, feeds)[0], atol=1e-4, rtol=1e-3)
    assert report.verification is not None and report.verification.passed


def test_cnn_fuses_batchnorm_and_prunes_identity(cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "cnn.legal.onnx"
    report = api.legalize(cnn, "jetson-xavier", out)
    assert report.success, report.summary
    ops = [n.op_type for n in onnx.load(out).graph.node]
    assert "BatchNormalization" not in ops and "Identity" not in ops and "Gelu" not in ops
    fuse = next(p for p in report.passes if p.name == "fuse")
    assert fuse.ops_removed.get("BatchNormalization") == 1


def test_ort_target_leaves_a_legal_model_alone(cnn: Path, tmp_path: Path) -> None:
    report = api.legalize(cnn, "ort-cpu", tmp_path / "o.onnx")
    assert report.success and report.rewrites == []
    assert report.opset["after"] == 20


def test_every_node_written_has_a_name_after_its_output(tmp_path: Path, write_model) -> None:
    """Legalization names what it writes (an engine's layer names; the layers a half build keeps in
    fp32 are found by them, which the fp16 analysis wrote into the legalized file in place before):
    after the node's first output, where no other node has that name, else after its op."""
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,4] x) => (float[2,4] y, float[2,4] z) {
            y = Relu(x)
            z = Sigmoid(y)
        }
    """)
    proto = onnx.load(model)
    proto.graph.node[1].name = "y"  # the Sigmoid is called what the Relu's output is
    onnx.save(proto, model)
    out = tmp_path / "named.onnx"
    assert api.legalize(model, "ort-cpu", out).success
    assert [(n.op_type, n.name) for n in onnx.load(out).graph.node] == [("Relu", "Relu_0"), ("Sigmoid", "y")]


def test_full_mode_refuses_and_writes_nothing(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 13, "custom.ops" : 1]>
        g (float[2,4] x) => (float[2,4] y) { y = custom.ops.Mystery(x) }
    """)
    out = tmp_path / "never.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert not report.success and report.exit_code == 1
    assert not out.exists()
    assert report.unresolved and report.unresolved[0].op == "Mystery"
    assert "no rule" in report.unresolved[0].rules_tried[0]
    assert not list(tmp_path.glob(".*")), "staging folder or lock file left behind"


def test_final_report_names_the_declining_rule(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,3,4] x, float[2,4,5] w) => (float[2,3,5] y) {
            y = Einsum<equation="...ij,...jk->...ik">(x, w)
        }
    """)
    report = api.legalize(model, "jetson-nano", tmp_path / "e.onnx")  # TensorRT 8.2: no ellipsis
    assert report.opset["after"] == 13 and not report.success
    assert report.unresolved[0].op == "Einsum"
    assert "einsum: Einsum equation '...ij,...jk->...ik' not in supported forms: ellipsis" in \
        report.unresolved[0].rules_tried


def test_static_target_names_the_dynamic_dims(encoder: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    static = get_target("jetson-xavier")
    static = replace(static, shapes=replace(static.shapes, policy="static"))
    with pytest.raises(OptionError, match=r"x\[0:batch, 1:seq\]"):
        api.legalize(encoder, static, tmp_path / "s.onnx")
    report = api.legalize(encoder, static, tmp_path / "s.onnx", LegalizeOptions(shapes={"x": [1, 16, 64]}))
    assert report.success, report.summary
    dims = [d.dim_value for d in onnx.load(tmp_path / "s.onnx").graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 16, 64]


def test_dynamic_batch_keeps_dim_zero(encoder: Path, tmp_path: Path) -> None:
    options = LegalizeOptions(dynamic_batch=True, shapes={"x": ["batch", 8, 64]})
    report = api.legalize(encoder, "jetson-orin", tmp_path / "d.onnx", options)
    assert report.success, report.summary
    dim0, dim1 = onnx.load(tmp_path / "d.onnx").graph.input[0].type.tensor_type.shape.dim[:2]
    assert dim0.dim_param == "batch" and dim1.dim_value == 8
    with pytest.raises(OptionError, match="--dynamic-batch keeps only dim 0"):
        api.legalize(encoder, "jetson-orin", tmp_path / "d2.onnx", LegalizeOptions(dynamic_batch=True))


def test_input_layout_nhwc_inserts_the_transpose(cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "nhwc.onnx"
    report = api.legalize(cnn, "ort-cpu", out, LegalizeOptions(input_layout={"*": "NHWC"}, batch=1))
    assert report.success, report.summary
    proto = onnx.load(out)
    name = proto.graph.input[0].name
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    original = onnx.load(cnn).graph.input[0]
    assert name == original.name
    nchw = np.random.default_rng(2).standard_normal((1, *dims[3:], *dims[1:3])).astype(np.float32)
    assert dims[3] == 3
    expected = _run(cnn, {name: nchw})[0]
    actual = _run(out, {name: np.transpose(nchw, (0, 2, 3, 1))})[0]
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-4)


def test_keep_outputs_drops_the_rest(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,4] x) => (float[2,4] a, float[2,4] b) { a = Relu(x) b = Sigmoid(x) }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "k.onnx", LegalizeOptions(keep_outputs=["b"]))
    assert report.success
    graph = onnx.load(tmp_path / "k.onnx").graph
    assert [o.name for o in graph.output] == ["b"] and [n.op_type for n in graph.node] == ["Sigmoid"]
    with pytest.raises(OptionError, match="no output 'c'"):
        api.legalize(model, "ort-cpu", tmp_path / "k2.onnx", LegalizeOptions(keep_outputs=["c"]))


def test_shape_chain_folds_once_axes_are_fixed(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[N,3,4] x) => (float[N,12] y) <int64[1] zero = {0}, int64[1] minus = {-1}> {
            s = Shape(x)
            n = Gather<axis=0>(s, zero)
            shape = Concat<axis=0>(n, minus)
            y = Reshape(x, shape)
        }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "f.onnx", LegalizeOptions(batch=2))
    assert report.success
    assert [n.op_type for n in onnx.load(tmp_path / "f.onnx").graph.node] == ["Reshape"]


def test_folding_is_bounded_before_allocating(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) <int64[2] shape = {1000000, 1000000}> {
            big = ConstantOfShape(shape)
            total = ReduceSum<keepdims=0>(big)
            y = Add(x, total)
        }
    """)
    started = time.perf_counter()
    report = api.legalize(model, "ort-cpu", None, LegalizeOptions(verify=False))
    assert time.perf_counter() - started < 60  # it did not try to build 10^12 floats
    assert report.nodes["after"] == 3


def test_prune_removes_no_ops_and_keeps_lossy_casts(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float16[2,3] h, float[2,3] x) => (float16[2,3] y, float[2,3] z) <int64[2] same = {2, 3}> {
            a = Cast<to=1>(h)
            b = Cast<to=10>(a)
            c = Reshape(b, same)
            d = Transpose<perm=[0, 1]>(c)
            e = Dropout(d)
            y = Identity(e)
            f = Cast<to=10>(x)
            g2 = Cast<to=1>(f)
            z = Relu(g2)
        }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "p.onnx")
    assert report.success, report.summary
    ops = sorted(n.op_type for n in onnx.load(tmp_path / "p.onnx").graph.node)
    # float16 -> float32 -> float16 is exact and goes (y = h needs one Identity: both are graph
    # inputs/outputs); float32 -> float16 -> float32 rounds, so both of those Casts stay
    assert ops == ["Cast", "Cast", "Identity", "Relu"]


def test_disable_and_only_pass(cnn: Path, tmp_path: Path) -> None:
    report = api.legalize(cnn, "jetson-xavier", None, LegalizeOptions(disable_passes=("fuse",), verify=False))
    assert not next(p for p in report.passes if p.name == "fuse").ran
    report = api.legalize(cnn, "ort-cpu", None, LegalizeOptions(only_passes=("prune",), verify=False))
    assert [p.name for p in report.passes if p.ran] == ["prune"]
    with pytest.raises(OptionError, match="no pass named 'nope'"):
        api.legalize(cnn, "ort-cpu", None, LegalizeOptions(disable_passes=("nope",)))


class _RenamesTheOutput(Pass):
    name = "broken"
    summary = "a deliberately wrong pass: it renames a graph output"

    def run(self, state: PipelineState) -> PassOutcome:
        state.model.graph.outputs[0].name = "renamed"
        return PassOutcome(True)


def test_a_pass_that_changes_the_signature_is_caught(cnn: Path) -> None:
    from deploycc import io

    loaded = io.load(cnn)
    state = PipelineState(loaded.model, get_target("ort-cpu"), LegalizeOptions(), loaded.path)
    with pytest.raises(InvariantError, match="changed the graph's inputs or outputs"):
        run_passes([_RenamesTheOutput()], state)


def test_output_over_the_input_is_refused(cnn: Path) -> None:
    from deploycc.errors import ModelInputError

    with pytest.raises(ModelInputError, match="refusing to overwrite the input"):
        api.legalize(cnn, "ort-cpu", cnn)


def test_a_three_thousand_node_chain_is_rewritten_whole(tmp_path: Path) -> None:
    """A generated 3,000-node graph with 1,000 rewrites to do, every one done (how the time grows
    with size is measured in benchmarks/, never asserted here)."""
    from onnx import TensorProto, helper

    nodes, previous = [], "x"
    for i in range(1000):
        nodes.append(helper.make_node("Relu", [previous], [f"r{i}"]))
        nodes.append(helper.make_node("Identity", [f"r{i}"], [f"i{i}"]))
        nodes.append(helper.make_node("HardSwish", [f"i{i}"], [f"h{i}"]))
        previous = f"h{i}"
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    report = api.legalize(path, "jetson-nano", None, LegalizeOptions(prove=False, verify=False))
    assert report.success, report.summary
    assert sum(1 for r in report.rewrites if r.rule == "hard-swish") == 1000


def test_onnxsim_runs_as_an_extra_pass_in_a_child_process(cnn: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxsim", reason="the optional simplifier needs deploycc[onnxsim]")
    report = api.legalize(cnn, "ort-cpu", tmp_path / "s.onnx", LegalizeOptions(simplifier="onnxsim"))
    simplify = next(p for p in report.passes if p.name == "simplify")
    assert simplify.ran and "onnxsim" in simplify.notes[0]
    assert report.success and report.verification is not None and report.verification.passed


def test_prune_removes_neutral_arithmetic_but_not_broadcasting(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,3] x) => (float[2,3] y, float[4,2,3] z)
          <float[1] one = {1.0}, float[3] zeros = {0.0, 0.0, 0.0}, float[4,1,1] wide = {1.0, 1.0, 1.0, 1.0}> {
            a = Mul(x, one)
            b = Add(zeros, a)
            y = Relu(b)
            z = Mul(x, wide)
        }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "n.onnx")
    assert report.success, report.summary
    assert sorted(n.op_type for n in onnx.load(tmp_path / "n.onnx").graph.node) == ["Mul", "Relu"]


def test_a_zero_bias_wider_than_the_small_constants_read_is_pruned(tmp_path: Path) -> None:
    """A language model head's zero bias over its vocabulary (5,000 here, RoBERTa's 50,265): prune
    reads a neutral operand whole, past the 4,096 elements its shape checks read, and the Add goes."""
    from onnx import TensorProto, helper, numpy_helper

    vocabulary = 5000
    weights = np.random.default_rng(0).standard_normal((8, vocabulary)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("Add", ["logits", "b"], ["y"])],
        "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", vocabulary])],
        [numpy_helper.from_array(weights, "w"),
         numpy_helper.from_array(np.zeros(vocabulary, np.float32), "b")])
    model = tmp_path / "head.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    report = api.legalize(model, "ort-cpu", tmp_path / "pruned.onnx")
    assert report.success, report.summary
    assert [n.op_type for n in onnx.load(tmp_path / "pruned.onnx").graph.node] == ["MatMul"]


def test_a_fresh_layernorms_neutral_scale_and_bias_stay_for_the_runtimes_fusion(tmp_path: Path,
                                                                                  write_model) -> None:
    """A LayerNorm written out, as TorchScript exports it, with a freshly initialized scale (ones)
    and bias (zeros): prune keeps both, since ONNX Runtime fuses the pattern into one
    LayerNormalization kernel only with them (without, it ran 7 kernels); the exporter's scalar 1
    beside it still goes. Equal on ORT, and ORT's optimized model holds the fused LayerNorm."""
    model = write_model("""
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[2,5,8] x) => (float[2,5,8] y)
          <float two = {2.0}, float eps = {1e-5}, float[8] gamma = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0},
           float[8] beta = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, float[1] one = {1.0}> {
            mean = ReduceMean<axes=[-1]>(x)
            d = Sub(x, mean)
            p = Pow(d, two)
            var = ReduceMean<axes=[-1]>(p)
            ve = Add(var, eps)
            sd = Sqrt(ve)
            n = Div(d, sd)
            scaled = Mul(n, gamma)
            shifted = Add(scaled, beta)
            r = Relu(shifted)
            y = Mul(r, one)
        }
    """)
    out = tmp_path / "ln.onnx"
    report = api.legalize(model, "ort-cpu", out)
    assert report.success, report.summary
    ops = [n.op_type for n in onnx.load(out).graph.node]
    assert ops.count("Mul") == 1 and ops.count("Add") == 2 and ops[-1] == "Relu"  # the scalar 1 went
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32) * 3 + 1}
    np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    assert "LayerNormalization" in [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]


def test_opset_converts_up_with_attribute_to_input_adapters(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 7, opset_import: ["" : 11]>
        g (float[2,1,6] x) => (float[2,3] y, float[2,1] m) {
            s = Squeeze<axes=[1]>(x)
            a, b = Split<axis=1, split=[3, 3]>(s)
            y = Clip(a, , )
            m = ReduceMean<axes=[1], keepdims=1>(b)
        }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "u.onnx", LegalizeOptions(opset=18))
    assert report.success, report.summary
    assert report.opset == {"before": 11, "after": 18}
    nodes = {n.op_type: n for n in onnx.load(tmp_path / "u.onnx").graph.node}
    assert len(nodes["ReduceMean"].input) == 2 and len(nodes["Squeeze"].input) == 2  # axes became inputs


def test_float64_is_narrowed_for_tensorrt(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,4] x) => (float[2,4] y) <double[4] w = {0.5, -1.5, 2.0, 3.25}> {
            d = Cast<to=11>(x)
            p = Mul(d, w)
            y = Cast<to=1>(p)
        }
    """)
    report = api.legalize(model, "jetson-xavier", tmp_path / "f.onnx")
    assert report.success, report.summary
    rewrite = next(r for r in report.rewrites if r.rule == "float64-to-float32")
    assert rewrite.certificate is not None and rewrite.certificate.status == "proven"
    proto = onnx.load(tmp_path / "f.onnx")
    assert all(t.data_type != onnx.TensorProto.DOUBLE for t in proto.graph.initializer)
    assert check_model(tmp_path / "f.onnx", [get_target("jetson-xavier")]).targets[0].legal


def test_int64_slice_sentinels_fit_tensorrt_8(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[3,6] x) => (float[3,5] y)
          <int64[1] starts = {1}, int64[1] ends = {9223372036854775807}, int64[1] axes = {1}> {
            y = Slice(x, starts, ends, axes)
        }
    """)
    # INT64_MAX read only as a Slice end means "to the end" clamped or not (onnx-tensorrt clamps
    # at import): legal as exported; the bounds are still written as int32 values.
    before = check_model(model, [get_target("jetson-xavier")]).targets[0]
    assert before.legal and not any("outside int32" in f.message for f in before.graph_findings)
    report = api.legalize(model, "jetson-xavier", tmp_path / "s.onnx")
    assert report.success, report.summary
    assert [r.rule for r in report.rewrites] == ["slice-bounds-int32"]


def test_a_wrong_rewrite_is_caught_by_its_proof_and_by_verification(
        encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inject a real bug (Gelu decomposed as Relu) and watch the proof and verification catch it."""
    from deploycc.rules import activations

    monkeypatch.setattr(activations, "gelu_erf", lambda b, x, dtype: b.op("Relu", x))
    # the proof refuses the buggy rewrite; Gelu's own ONNX body (the next rule) replaces it instead
    proven = api.legalize(encoder, "jetson-nano", tmp_path / "a.onnx")
    assert proven.success, proven.summary
    gelu = [r for r in proven.rewrites if r.op == "Gelu"]
    assert gelu and {r.rule for r in gelu} == {"function-body"}
    assert proven.verification is not None and proven.verification.passed
    # unproven, verification catches it, blame bisects to the opset pass and the gelu rule, and
    # legalize runs again without that rule: Gelu's function body, the layer norm's rule kept
    unproven = api.legalize(encoder, "jetson-nano", tmp_path / "b.onnx", LegalizeOptions(prove=False))
    assert [(b.pass_name, b.rule, b.output, b.set_aside) for b in unproven.blame] == [
        ("opset", "gelu", "y", True)]
    assert "elements differ" in unproven.blame[0].problem
    assert unproven.success and unproven.verification is not None and unproven.verification.passed
    assert {r.rule for r in unproven.rewrites if r.op == "Gelu"} == {"function-body"}
    assert "layer-normalization" in {r.rule for r in unproven.rewrites}


def test_user_inputs_from_npz(encoder: Path, tmp_path: Path) -> None:
    archive = tmp_path / "inputs.npz"
    np.savez(archive, x=np.random.default_rng(9).standard_normal((3, 5, 64)).astype(np.float32))
    report = api.legalize(encoder, "jetson-nano", tmp_path / "n.onnx", LegalizeOptions(inputs=archive))
    assert report.verification is not None and report.verification.inputs == str(archive)
    assert report.verification.outputs[0].shape == [3, 5, 64]
    np.savez(archive, wrong=np.zeros(3, np.float32))
    with pytest.raises(OptionError, match="no array for input"):
        api.legalize(encoder, "jetson-nano", tmp_path / "m.onnx", LegalizeOptions(inputs=archive))


def test_rules_reach_into_subgraphs(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 20]>
        g (bool c, float[2,4] x) => (float[2,4] y) {
            y = If(c) <
                then_branch = t () => (float[2,4] a) { a = Gelu(x) },
                else_branch = e () => (float[2,4] b) { b = Relu(x) }
            >
        }
    """)
    out = tmp_path / "sub.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert [r.rule for r in report.rewrites] == ["gelu"] and report.opset["after"] == 17
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    for branch in (True, False):
        feeds = {"c": np.array(branch), "x": x}
        np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], atol=1e-5, rtol=1e-4)


def test_a_folder_failure_stops_folding_not_the_pipeline(tmp_path: Path, write_model) -> None:
    """onnxscript's folder raises on SplitToSequence with a scalar split (found by deploycc probe)."""
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 24]>
        g (float[3,6] data, int64 split) => (seq(float[]) pieces) {
            pieces = SplitToSequence<axis=1>(data, split)
        }
    """)
    report = api.legalize(model, "ort-cpu", tmp_path / "s.onnx", LegalizeOptions(verify=False))
    assert report.success, report.summary
    fold = next(p for p in report.passes if p.name == "fold")
    assert any("constant folding stopped early" in note for note in fold.notes)


def test_output_over_the_inputs_external_data_is_refused(tmp_path: Path) -> None:
    """-o out.onnx would write out.onnx.data: refused when that is the input's own weights file."""
    from onnx import TensorProto, helper, numpy_helper

    from deploycc.errors import ModelInputError

    weights = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [weights])
    model = tmp_path / "in.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model,
              save_as_external_data=True, location="out.onnx.data")
    before = digest(tmp_path / "out.onnx.data")
    with pytest.raises(ModelInputError, match="refusing to overwrite the input"):
        api.legalize(model, "ort-cpu", tmp_path / "out.onnx")
    assert digest(tmp_path / "out.onnx.data") == before and not (tmp_path / "out.onnx").exists()


def test_folding_keeps_castlike_saturate(tmp_path: Path, write_model) -> None:
    """onnxscript's folder turns CastLike into a Cast without `saturate` (found by deploycc probe):
    a float8 cast with saturate=0 must still give NaN, not 448, for a value beyond the range."""
    import ml_dtypes

    from deploycc.backends.onnxruntime import run_conformance_case

    model = write_model("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[3] x, float8e4m3fn[1] like) => (float8e4m3fn[3] y) {
            y = CastLike <saturate: int = 0> (x, like)
        }
    """)
    out = tmp_path / "c.onnx"
    assert api.legalize(model, "ort-cpu", out, LegalizeOptions(verify=False)).success
    saturate = [a.i for n in onnx.load(out).graph.node for a in n.attribute if a.name == "saturate"]
    assert saturate == [0]
    feeds = {"x": np.array([1.0, 1e6, -2.5], dtype=np.float32),
             "like": np.zeros(1, dtype=ml_dtypes.float8_e4m3fn)}
    (y,) = run_conformance_case(out.read_bytes(), feeds)
    assert np.isnan(float(y[1])) and float(y[0]) == 1.0 and float(y[2]) == -2.5


def test_opset_goes_down_to_a_version_the_target_implements(tmp_path: Path, write_model) -> None:
    """A node whose op version at the model's opset has no ORT kernel, while an older one has:
    the model is converted down to the newest opset where it runs, and still computes the same."""
    from deploycc.verify.runner import run_model_bytes

    newest = onnx.defs.onnx_opset_version()
    model = write_model(f"""
        <ir_version: 10, opset_import: ["" : {newest}]>
        g (float[2,4] x) => (uint8[2,4] y) {{
            scale = Constant <value = float {{0.05}}> ()
            zero = Constant <value = uint8 {{128}}> ()
            y = QuantizeLinear (x, scale, zero)
        }}
    """)
    target = get_target("ort-cpu")
    before = check_model(model, [target]).targets[0]
    if before.legal:
        pytest.skip(f"ORT {target.backend.version} implements QuantizeLinear at opset {newest}")
    out = tmp_path / "q.onnx"
    report = api.legalize(model, "ort-cpu", out)
    assert report.success, report.summary
    assert report.opset["before"] == newest and report.opset["after"] < newest
    assert check_model(out, [target]).targets[0].legal
    feeds = {"x": np.array([[-7.0, -0.01, 0.0, 0.024], [0.026, 1.0, 6.3, 9.0]], dtype=np.float32)}
    expected = run_model_bytes(model.read_bytes(), feeds).outputs["y"]
    np.testing.assert_array_equal(_run(out, feeds)[0], expected)


def test_opset_conversion_reaches_into_if_branches(tmp_path: Path, write_model) -> None:
    """onnx's converter converts the main graph's nodes only: a ReduceMean-18 in an If branch kept
    its axes input under the ReduceMean-13 schema (silero VAD, an invalid model). Both the outer
    initializer and a branch's own Constant must become the axes attribute."""
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (bool c, float[2,4] x) => (float[2,1] y, float[2,2] z) <int64[1] axes = {1}> {
            y, z = If(c) <
                then_branch = t () => (float[2,1] m, float[2,2] h) {
                    m = ReduceMean<keepdims=1>(x, axes)
                    sizes = Constant<value = int64[2] {2, 2}>()
                    h, rest = Split<axis=1>(x, sizes)
                },
                else_branch = e () => (float[2,1] s, float[2,2] l) {
                    inner = Constant<value = int64[1] {1}>()
                    s = ReduceMax<keepdims=1>(x, inner)
                    l, r = Split<axis=1, num_outputs=2>(x)
                }
            >
        }
    """)
    out = tmp_path / "branches.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert report.opset == {"before": 18, "after": 17}
    converted = onnx.load(out)
    onnx.checker.check_model(converted, full_check=True)
    reduces = [n for n in converted.graph.node[0].attribute[0].g.node if n.op_type.startswith("Reduce")]
    reduces += [n for n in converted.graph.node[0].attribute[1].g.node if n.op_type.startswith("Reduce")]
    assert [(len(n.input), [a.name for a in n.attribute if a.name == "axes"]) for n in reduces] == \
        [(1, ["axes"]), (1, ["axes"])]
    x = np.random.default_rng(24).standard_normal((2, 4)).astype(np.float32)
    for branch in (True, False):
        feeds = {"c": np.array(branch), "x": x}
        for got, want in zip(_run(out, feeds), _run(model, feeds), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)


def test_an_opset_outside_the_range_is_never_legal(tmp_path: Path, write_model) -> None:
    """Split-18's num_outputs over a dynamic axis has no rule and no adapter down to 17. The
    fallback to the model as exported is judged as a result: still at opset 18, it is refused,
    not "legal on jetson-xavier", in either mode."""
    from deploycc.passes.opset import OpsetConversionError

    model = write_model("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,N] x) => (float[2,?] a, float[2,?] b) { a, b = Split<axis=1, num_outputs=2>(x) }
    """)
    out = tmp_path / "never.onnx"
    for mode in ("full", "partial"):
        with pytest.raises(OpsetConversionError, match="no adapter for Split"):
            api.legalize(model, "jetson-xavier", out, LegalizeOptions(mode=mode))
        assert not out.exists()
    report = api.legalize(model, "jetson-xavier", out, LegalizeOptions(opset=18))  # as asked, refused
    assert not report.success and report.exit_code == 1 and not out.exists()
    assert "model opset 18 is outside jetson-xavier's range 7..17" in report.summary


def test_a_broken_rule_is_blamed_and_set_aside_while_the_other_passes_work_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break one of tidy's steps on purpose (the spliced Concat's inputs swapped): verification
    fails, blame bisects to that pass and that step, and legalize keeps everything else's work."""
    from onnx import TensorProto, helper, numpy_helper

    from deploycc.passes import merge, tidy

    def swapped(graph) -> int:
        spliced = merge.inline_concat_of_concat(graph)
        for node in graph:
            if spliced and node.op_type == "Concat" and len(node.inputs) > 2:
                first, second = node.inputs[0], node.inputs[1]
                node.replace_input_with(0, second)
                node.replace_input_with(1, first)
        return spliced

    monkeypatch.setattr(tidy, "inline_concat_of_concat", swapped)
    two = numpy_helper.from_array(np.full((2, 3), 2.0, np.float32), "two")
    nodes = [helper.make_node("Add", ["two", "two"], ["four"]),  # folded: the fold pass's work
             helper.make_node("Mul", ["x", "four"], ["x4"]),
             helper.make_node("Concat", ["x4", "b"], ["xb"], axis=1),
             helper.make_node("Concat", ["xb", "c"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
                                           for n in ("x", "b", "c")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 9])], [two])
    source = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    report = api.legalize(source, "ort-cpu", tmp_path / "out.onnx")
    assert report.success and report.verification is not None and report.verification.passed
    assert [(b.pass_name, b.rule, b.output, b.set_aside) for b in report.blame] == [
        ("tidy", "concat-of-concat", "y", True)]
    assert "elements differ" in report.blame[0].problem
    ops = [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node]
    assert "Add" not in ops and ops.count("Concat") == 2  # folded; the broken splice set aside
    assert any("set aside what failed verification" in note for note in report.notes)


def test_a_pass_that_raises_is_set_aside_and_the_other_passes_run(
        encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploycc.passes.tidy import TidyPass

    def broken(self, state):
        raise RuntimeError("a case the pass did not foresee")

    monkeypatch.setattr(TidyPass, "run", broken)
    report = api.legalize(encoder, "jetson-nano", tmp_path / "out.onnx")
    assert report.success, report.summary
    assert [(b.pass_name, b.rule, b.set_aside) for b in report.blame] == [("tidy", None, True)]
    assert "RuntimeError: a case the pass did not foresee" in report.blame[0].problem
    ran = {r.name for r in report.passes if r.ran}
    assert "tidy" not in ran and {"opset", "fold", "legalize"} <= ran and report.rewrites
