"""One small graph per failure class found on real exports (benchmarks/corpus.py makes the
corpus itself; benchmarks/corpus_audit.py audits it): each graph has the shape of the real
models that broke, and each test runs the real pipeline and, where a model is written, runs the
result on ONNX Runtime against the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.io import load
from deploycc.options import BuildOptions, LegalizeOptions

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
_vi = helper.make_tensor_value_info


def _save(tmp_path: Path, model: onnx.ModelProto, name: str) -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _same_outputs(original: Path, rewritten: Path, feeds: dict[str, np.ndarray]) -> None:
    expected = ort.InferenceSession(str(original)).run(None, feeds)
    actual = ort.InferenceSession(str(rewritten)).run(None, feeds)
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# 1. --batch/--shape and output shapes computed through Shape -> Gather -> Concat -> Reshape


def flatten_head() -> onnx.ModelProto:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    graph = helper.make_graph(
        nodes, "flatten_head", [_vi("x", FLOAT, ["N", 3, 4])],
        [_vi("y", FLOAT, ["N", 12])],
        [_const("zero", 0), _const("axis0", [0]), _const("minus_one", [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_fixed_batch_keeps_the_declared_output_rank(tmp_path: Path) -> None:
    model = _save(tmp_path, flatten_head(), "flatten.onnx")
    out = tmp_path / "flatten.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out, LegalizeOptions(batch=1))
    assert report.success, report.summary
    written = onnx.load(out)
    dims = [d.dim_value for d in written.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 12]
    _same_outputs(model, out, {"x": np.random.default_rng(0).standard_normal((1, 3, 4)).astype(np.float32)})


# 2. models ONNX Runtime loads that onnx-ir or the checker refused


def zipmap_classifier() -> onnx.ModelProto:
    """A scikit-learn-style classifier: label plus ZipMap probabilities (a sequence of maps)."""
    classifier = helper.make_node(
        "LinearClassifier", ["x"], ["label", "probabilities"], domain="ai.onnx.ml",
        classlabels_ints=[0, 1, 2], coefficients=[float(v) / 10 for v in range(12)],
        intercepts=[0.1, 0.2, 0.3], post_transform="SOFTMAX")
    zipmap = helper.make_node("ZipMap", ["probabilities"], ["probs"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])
    sequence_of_maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(INT64, helper.make_tensor_type_proto(FLOAT, [])))
    graph = helper.make_graph(
        [classifier, zipmap], "pipeline", [_vi("x", FLOAT, ["N", 4])],
        [_vi("label", INT64, ["N"]),
         helper.make_value_info("probs", sequence_of_maps)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("ai.onnx.ml", 1)])


def test_sequence_of_maps_output_builds_and_verifies(tmp_path: Path) -> None:
    model = _save(tmp_path, zipmap_classifier(), "zipmap.onnx")
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    names = [o.name for o in report.verification.outputs]
    assert names == ["label", "probs"]
    written = onnx.load(tmp_path / "out" / "model.legalized.onnx")
    assert written.graph.output[1].type.WhichOneof("value") == "sequence_type"


def test_minus_one_dims_are_dynamic(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "paddle",
                              [_vi("x", FLOAT, [-1, 3, -1, -1])],
                              [_vi("y", FLOAT, [-1, 3, -1, -1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), "p.onnx")
    loaded = load(model)
    dims = [d if isinstance(d, int) else None for d in loaded.model.graph.inputs[0].shape]
    assert dims == [None, 3, None, None]
    assert any("negative dims" in note for note in loaded.notes)
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary


def test_unsorted_graph_is_sorted_not_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
    graph = helper.make_graph(nodes, "unsorted", [_vi("x", FLOAT, [2, 3])],
                              [_vi("y", FLOAT, [2, 3])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "u.onnx")
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(onnx.load(model))
    out = tmp_path / "sorted.onnx"
    report = api.legalize(model, "ort-cpu", out)
    assert report.success, report.summary
    onnx.checker.check_model(onnx.load(out))
    _same_outputs(model, out, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3})


# 3. opset down-conversion of dynamo and TorchScript exports


def test_reduce_mean_18_to_17_drops_noop_with_empty_axes(tmp_path: Path) -> None:
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1, noop_with_empty_axes=0),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "mean", [_vi("x", FLOAT, ["N", 4, 8])],
                              [_vi("y", FLOAT, ["N", 4, 8])],
                              [_const("axes", [-1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "m.onnx")
    out = tmp_path / "m17.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert report.opset == {"before": 18, "after": 17}
    mean = next(n for n in onnx.load(out).graph.node if n.op_type == "ReduceMean")
    assert [a.name for a in mean.attribute if a.name == "noop_with_empty_axes"] == []
    _same_outputs(model, out, {"x": np.random.default_rng(1).standard_normal((2, 4, 8)).astype(np.float32)})


def test_shape_with_start_goes_below_opset_15(tmp_path: Path) -> None:
    nodes = [helper.make_node("Shape", ["x"], ["tail"], start=1),
             helper.make_node("Concat", ["minus_one", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"], allowzero=0),
             helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "shape15", [_vi("x", FLOAT, ["N", 4, 8])],
                              [_vi("y", FLOAT, ["N", 4, 8])],
                              [_const("minus_one", [-1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "s.onnx")
    out = tmp_path / "s13.onnx"
    report = api.legalize(model, "jetson-nano", out)
    assert report.success, report.summary
    assert report.opset["after"] == 13
    assert "shape-start-end" in {r.rule for r in report.rewrites}
    _same_outputs(model, out, {"x": np.random.default_rng(2).standard_normal((3, 4, 8)).astype(np.float32)})


# 4. IR-3 model-zoo graphs: every initializer is also a graph input


def zoo_ir3() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")]
    weights += [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), name)
                for name in ("g", "b", "mu")]
    weights += [numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "var")]
    nodes = [helper.make_node("Conv", ["data", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["n"]),
             helper.make_node("Dropout", ["n"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    inputs = [_vi("data", FLOAT, [1, 3, 8, 8])]
    inputs += [_vi(t.name, t.data_type, list(t.dims)) for t in weights]
    graph = helper.make_graph(nodes, "zoo", inputs, [_vi("y", FLOAT,
                                                                                    [1, 4, 8, 8])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 3
    return model


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu"])
def test_ir3_initializer_inputs_verify(tmp_path: Path, target: str) -> None:
    model = _save(tmp_path, zoo_ir3(), "zoo.onnx")
    report = api.build(model, target, tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    assert report.verification.inputs.startswith("generated")


# 5. inputs deploycc draws must be inputs the model can take


def test_token_ids_stay_below_the_vocabulary(tmp_path: Path) -> None:
    vectors = np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32)
    table = numpy_helper.from_array(vectors, "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["embedded"]),
             helper.make_node("ReduceSum", ["embedded", "axis"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "embed", [_vi("ids", INT64, ["B", 7])],
                              [_vi("y", FLOAT, ["B", 4])],
                              [table, _const("axis", [1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "e.onnx")
    from deploycc.verify.inputs import generate

    feeds = generate(list(load(model).model.graph.inputs), seed=0)
    assert feeds["ids"].max() < 10 and feeds["ids"].min() >= 0
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary


def test_scalar_size_input_is_small_and_positive(tmp_path: Path) -> None:
    nodes = [helper.make_node("Range", ["zero", "count", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=FLOAT)]
    graph = helper.make_graph(nodes, "range", [_vi("count", INT64, [])],
                              [_vi("y", FLOAT, ["n"])],
                              [_const("zero", 0), _const("one", 1)])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "r.onnx")
    from deploycc.verify.inputs import generate

    count = int(generate(list(load(model).model.graph.inputs), seed=0)["count"])
    assert 1 <= count <= 3
    report = api.legalize(model, "ort-cpu", tmp_path / "r.out.onnx")
    assert report.success, report.summary


def test_an_audio_input_is_drawn_at_one_second(tmp_path: Path) -> None:
    """An audio front end: a kernel of 10 samples cannot run on a toy size; its `samples` dim is
    drawn at a second of 16 kHz audio, verified and timed there, and the report says so."""
    kernel = numpy_helper.from_array(np.ones((4, 1, 10), np.float32), "k")
    nodes = [helper.make_node("Unsqueeze", ["audio", "axis1"], ["wave"]),
             helper.make_node("Conv", ["wave", "k"], ["y"], strides=[5])]
    graph = helper.make_graph(nodes, "audio", [_vi("audio", FLOAT, ["batch", "samples"])],
                              [_vi("y", FLOAT, ["batch", 4, "frames"])], [kernel, _const("axis1", [1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "a.onnx")
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench_iterations=3))
    assert report.status == "verified", report.summary
    assert report.verification.inputs == "generated (seed 0, audio 2x16000)"
    assert report.benchmark is not None and report.benchmark.input_shapes == {"audio": [2, 16000]}
    assert "Timed on `audio` 2x16000" in (tmp_path / "out" / "report.md").read_text()


def test_sizes_fall_back_until_the_model_takes_them(tmp_path: Path) -> None:
    """A streaming VAD takes chunks of 512 samples only: a second of audio fails, the next of the
    role's sizes runs, and both verification and the report say which."""
    nodes = [helper.make_node("Reshape", ["audio", "chunk"], ["y"])]
    graph = helper.make_graph(nodes, "vad", [_vi("audio", FLOAT, ["batch", "samples"])],
                              [_vi("y", FLOAT, ["batch", 512])], [_const("chunk", [-1, 512])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "v.onnx")
    report = api.legalize(model, "ort-cpu", tmp_path / "v.out.onnx")
    assert report.success and report.verification is not None, report.summary
    assert report.verification.shapes == {"audio": [2, 512]} and report.verification.attempt == 1


def test_a_model_that_fails_on_drawn_inputs_needs_inputs(tmp_path: Path) -> None:
    """The original itself rejects what deploycc drew (here a Reshape to a size the data cannot
    take): its own outcome, not 'illegal' or 'differs', and given inputs make it verify."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "reshape", [_vi("x", FLOAT, [5, 7]),
                                                 _vi("shape", INT64, [2])],
                              [_vi("y", FLOAT, ["a", "b"])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "n.onnx")
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "needs-inputs", report.summary
    assert report.exit_code == 1 and "--inputs" in report.next_step
    data = tmp_path / "inputs.npz"
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    np.savez(data, x=x, shape=np.array([7, 5], np.int64))
    options = BuildOptions(legalize=LegalizeOptions(inputs=data), bench=False)
    report = api.build(model, "ort-cpu", tmp_path / "out2", options)
    assert report.status == "verified", report.summary


# 6. int64 shape arithmetic on TensorRT 8.x: carried as int32 by the parser, so legal


def test_int64_shape_arithmetic_is_legal_on_tensorrt_8(tmp_path: Path) -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["count"], keepdims=1),
             helper.make_node("ConstantOfShape", ["s"], ["ones"], value=_const("v", [1])),
             helper.make_node("Cast", ["ones"], ["ones_f"], to=FLOAT),
             helper.make_node("Mul", ["x", "ones_f"], ["scaled"]),
             helper.make_node("Reshape", ["scaled", "count"], ["y"])]
    graph = helper.make_graph(nodes, "int64", [_vi("x", FLOAT, ["N", 4, 8])],
                              [_vi("y", FLOAT, ["M"])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "i.onnx")
    report = api.check(model, ["jetson-nano", "jetson-xavier"])
    assert all(verdict.legal for verdict in report.targets), [v.illegal for v in report.targets]


# Never worse than doing nothing: a pass that breaks is set aside, the others' work kept


def test_a_broken_pass_is_set_aside_and_the_others_work_is_kept(tmp_path: Path, monkeypatch) -> None:
    from deploycc.passes.fold import FoldPass

    def broken(self, state):
        raise RuntimeError("folding exploded")

    monkeypatch.setattr(FoldPass, "run", broken)
    model = _save(tmp_path, flatten_head(), "flatten.onnx")
    out = tmp_path / "kept.onnx"
    report = api.legalize(model, "ort-cpu", out)
    assert report.success, report.summary
    assert any("set aside" in note and "folding exploded" in note for note in report.notes)
    # RefoldPass is a FoldPass too: found broken in turn, and set aside as well
    assert [(b.pass_name, b.set_aside) for b in report.blame] == [("fold", True), ("refold", True)]
    assert [r.name for r in report.passes if r.ran and r.name in ("fold", "tidy")] == ["tidy"]
    _same_outputs(model, out, {"x": np.ones((2, 3, 4), np.float32)})


def test_int64_max_slice_ends_are_legal_but_other_overflow_is_not(tmp_path: Path) -> None:
    """INT64_MAX as a Slice end means "to the end", clamped to INT32_MAX or not; the same value
    added to something would change."""
    end = _const("end", [np.iinfo(np.int64).max])
    nodes = [helper.make_node("Slice", ["x", "start", "end", "axis"], ["y"])]
    graph = helper.make_graph(nodes, "slice", [_vi("x", FLOAT, [2, 8])], [_vi("y", FLOAT, [2, 7])],
                              [_const("start", [1]), end, _const("axis", [1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "s.onnx")
    assert api.check(model, ["jetson-nano"]).targets[0].legal
    nodes = [helper.make_node("Add", ["i", "end"], ["y"])]
    graph = helper.make_graph(nodes, "add", [_vi("i", INT64, [1])], [_vi("y", INT64, [1])], [end])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "a.onnx")
    assert not api.check(model, ["jetson-nano"]).targets[0].legal


# 8. quantized models on OpenVINO: real int8 kernels, judged with int8 tolerances


def qdq_conv() -> onnx.ModelProto:
    """ORT's static quantization of a Conv: uint8 activations with a zero point, int8 weights."""
    rng = np.random.default_rng(6)
    weights = numpy_helper.from_array(rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8), "w_q")
    tensors = [weights, numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
               numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
               numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
               numpy_helper.from_array(np.array(0, np.int8), "w_zero")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"]),
             helper.make_node("Conv", ["x_dq", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "qdq", [_vi("x", FLOAT, [1, 3, 16, 16])],
                              [_vi("y", FLOAT, [1, 8, 16, 16])], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_quantized_model_is_verified_with_int8_tolerances(tmp_path: Path) -> None:
    model = _save(tmp_path, qdq_conv(), "qdq.onnx")
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    assert report.verification.precision == "int8"


def test_an_output_within_atol_of_zero_has_no_direction_to_judge() -> None:
    from deploycc.verify.compare import compare

    tiny = np.array([1e-14, -2e-14, 3e-14])
    assert compare("y", tiny, -tiny, atol=1e-4, rtol=1e-3, min_cosine=0.9999).passed
    assert not compare("y", tiny * 1e12, -tiny * 1e12, atol=1e-4, rtol=1e-3, min_cosine=0.9999).passed


# 7. ORT's asymmetric uint8 Q/DQ on TensorRT: the float arithmetic it stands for


def test_asymmetric_qdq_becomes_float_on_tensorrt(tmp_path: Path) -> None:
    model = _save(tmp_path, qdq_conv(), "qdq.onnx")
    before = api.check(model, ["jetson-xavier"]).targets[0]
    assert not before.legal and {g.op for g in before.illegal} >= {"QuantizeLinear", "DequantizeLinear"}
    out = tmp_path / "qdq.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    rewrite = next(r for r in report.rewrites if r.rule == "dequantize-to-float")
    assert rewrite.certificate is not None and rewrite.certificate.status == "proven"
    nodes = onnx.load(out).graph.node
    ops = [node.op_type for node in nodes]
    assert "QuantizeLinear" not in ops and "Round" in ops
    # the symmetric int8 weights TensorRT takes as they are stay quantized
    assert [node.input[0] for node in nodes if node.op_type == "DequantizeLinear"] == ["w_q"]
    x = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(str(model), _unoptimized()).run(None, {"x": x})[0]
    np.testing.assert_allclose(ort.InferenceSession(str(out)).run(None, {"x": x})[0], expected,
                               rtol=1e-5, atol=1e-5)


def _unoptimized() -> ort.SessionOptions:
    """The Q/DQ ops as written (ORT's optimizer would fuse them into integer kernels)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def test_ort_dynamic_quantization_becomes_float_on_tensorrt(tmp_path: Path) -> None:
    """ORT's quantize_dynamic on an embedding and a projection: DynamicQuantizeLinear, MatMulInteger
    and a uint8 embedding table, none of which TensorRT takes."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(8)
    table = numpy_helper.from_array(rng.standard_normal((50, 32)).astype(np.float32), "table")
    weights = numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["embedded"]),
             helper.make_node("Tanh", ["embedded"], ["hidden"]),
             helper.make_node("MatMul", ["hidden", "w"], ["y"])]
    graph = helper.make_graph(nodes, "embed", [_vi("ids", INT64, [1, 6])], [_vi("y", FLOAT, [1, 6, 16])],
                              [table, weights])
    float_model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                        "f.onnx")
    model = tmp_path / "q.onnx"
    quantize_dynamic(str(float_model), str(model), weight_type=QuantType.QUInt8,
                     op_types_to_quantize=["Gather", "MatMul"])
    ops = {node.op_type for node in onnx.load(model).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    out = tmp_path / "q.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert {"dynamic-quantization-to-float", "dequantize-to-float"} <= {r.rule for r in report.rewrites}
    left = {node.op_type for node in onnx.load(out).graph.node}
    assert not left & {"DynamicQuantizeLinear", "MatMulInteger", "DequantizeLinear"}
    ids = {"ids": rng.integers(0, 50, (1, 6)).astype(np.int64)}
    expected = ort.InferenceSession(str(model), _unoptimized()).run(None, ids)[0]
    actual = ort.InferenceSession(str(out)).run(None, ids)[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_a_dynamically_quantized_conv_with_a_run_time_bias_becomes_float_on_tensorrt(tmp_path: Path) -> None:
    """An older ORT's dynamic quantization of a Conv with a bias (ddddocr's OCR model, a PyPI
    wheel): the bias quantized at run time with the activation's scale, added to ConvInteger's
    int32 result, then Cast and scaled. The bias is added in float, and the graph deploys."""
    rng = np.random.default_rng(6)
    w = rng.integers(0, 256, (4, 3, 3, 3), dtype=np.uint8)
    constants = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(128), "wz"),
                 numpy_helper.from_array(np.float32(0.01), "ws"),
                 numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
                 numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "bias_shape")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"]),
             helper.make_node("Div", ["bias", "scale"], ["bias_levels"]),
             helper.make_node("Cast", ["bias_levels"], ["bias_int"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["bias_int", "bias_shape"], ["bias_4d"]),
             helper.make_node("Add", ["acc", "bias_4d"], ["biased"]),
             helper.make_node("Cast", ["biased"], ["biased_f"], to=FLOAT),
             helper.make_node("Mul", ["biased_f", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [_vi("x", FLOAT, [1, 3, 8, 8])], [_vi("y", FLOAT, [1, 4, 8, 8])],
                              constants)
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "q.onnx")
    out = tmp_path / "q.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    left = {node.op_type for node in onnx.load(out).graph.node}
    assert not left & {"ConvInteger", "DynamicQuantizeLinear"}
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    expected = ort.InferenceSession(str(model), _unoptimized()).run(None, x)[0]
    np.testing.assert_allclose(ort.InferenceSession(str(out)).run(None, x)[0], expected, rtol=1e-5, atol=1e-5)


def test_a_quantized_embedding_read_through_a_transpose_becomes_float_on_tensorrt(tmp_path: Path) -> None:
    """ORT's quantizer on an embedding feeding an LSTM (text2tashkeel, a PyPI wheel): the uint8 rows
    gathered, then dequantized both directly and after the LSTM's Transpose; TensorRT takes neither
    a uint8 Gather nor an asymmetric DequantizeLinear. The table is dequantized once and the
    Transpose runs on the floats: the same values."""
    rng = np.random.default_rng(5)
    table = numpy_helper.from_array(rng.integers(0, 256, (30, 8), dtype=np.uint8), "table")
    scale, zero = numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(131), "z")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["direct"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[1, 0, 2]),
             helper.make_node("DequantizeLinear", ["qt", "s", "z"], ["transposed"])]
    graph = helper.make_graph(nodes, "embed", [_vi("ids", INT64, [2, 5])],
                              [_vi("direct", FLOAT, [2, 5, 8]), _vi("transposed", FLOAT, [5, 2, 8])],
                              [table, scale, zero])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "q.onnx")
    out = tmp_path / "q.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert not {node.op_type for node in onnx.load(out).graph.node} & {"DequantizeLinear"}
    ids = {"ids": rng.integers(0, 30, (2, 5)).astype(np.int64)}
    for expected, actual in zip(ort.InferenceSession(str(model), _unoptimized()).run(None, ids),
                                ort.InferenceSession(str(out)).run(None, ids), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_sample_shape_sets_drawn_sizes_without_fixing_axes(tmp_path: Path) -> None:
    """A text recognizer declares its height dynamic but takes only 48: --sample-shape draws at the
    size the model takes, and the written model keeps its dynamic axes."""
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["y"])]
    graph = helper.make_graph(nodes, "rec", [_vi("x", FLOAT, ["N", "height", "width"])],
                              [_vi("y", FLOAT, ["N", 48, "w"])], [_const("rows", [0, 48, -1])])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "r.onnx")
    # height and width by name: 224x224, 640x640, then a text line's 48x320, which it takes
    found = api.legalize(model, "ort-cpu", tmp_path / "a.onnx").verification
    assert found is not None and found.passed and found.shapes == {"x": [2, 48, 320]}
    from deploycc.cli.legalize_cmd import options_from_flags

    options = options_from_flags(shape=(), batch=None, dynamic_batch=False, input_layout=(), keep_outputs=(),
                                 mode=None, disable_pass=(), only_pass=(), simplifier=None, opset=None,
                                 inputs=None, prove=True, verify=True, fold_limit_mb=16,
                                 sample_shape=("x:1x48x320",))
    out = tmp_path / "b.onnx"
    report = api.legalize(model, "ort-cpu", out, options)
    assert report.success, report.summary
    assert report.verification is not None and report.verification.shapes == {"x": [1, 48, 320]}
    dims = [d.dim_param or d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["N", "height", "width"]


# 9. Silero VAD: `state` names its dim 1 `batch` like `input`'s dim 0, and the TorchScript
# export of `x.squeeze(0)` (an If on Shape(x)[0] == 1 whose branches differ in rank) leaves
# OpenVINO unable to type the graph while the batch is dynamic.


def squeeze_if_batch_one() -> onnx.ModelProto:
    squeeze = helper.make_graph([helper.make_node("Squeeze", ["x", "axis0"], ["squeezed"])], "then", [],
                                [_vi("squeezed", FLOAT, None)])
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["kept"])], "else", [],
                             [_vi("kept", FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Equal", ["n", "one"], ["is_one"]),
             helper.make_node("If", ["is_one"], ["maybe_squeezed"], then_branch=squeeze, else_branch=keep),
             helper.make_node("Unsqueeze", ["maybe_squeezed", "axis0"], ["x3"]),
             helper.make_node("Conv", ["x3", "w"], ["conv"]),
             helper.make_node("Add", ["state", "state"], ["state_out"])]
    graph = helper.make_graph(
        nodes, "squeeze_if_one", [_vi("x", FLOAT, ["batch", 2, 8]), _vi("state", FLOAT, [2, "batch", 4])],
        [_vi("conv", FLOAT, None), _vi("state_out", FLOAT, [2, "batch", 4])],
        [_const("zero", 0), _const("one", 1), _const("axis0", [0]),
         _const("w", np.full((3, 2, 3), 0.5), np.float32)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_batch_fixes_every_dim_named_like_the_batch(tmp_path: Path) -> None:
    model = _save(tmp_path, squeeze_if_batch_one(), "vad.onnx")
    out = tmp_path / "vad.b1.onnx"
    report = api.legalize(model, "ort-cpu", out, LegalizeOptions(batch=1))
    assert report.success, report.summary
    state = onnx.load(out).graph.input[1]
    assert [d.dim_value for d in state.type.tensor_type.shape.dim] == [2, 1, 4]


def test_openvino_dynamic_rank_is_built_with_the_verified_sizes_fixed(tmp_path: Path) -> None:
    """OpenVINO cannot type the graph while the batch is dynamic: the build says so and builds
    again with the dims fixed at the sizes verification drew, as its error's hint says."""
    model = _save(tmp_path, squeeze_if_batch_one(), "vad.onnx")
    batch_one = {"x": [1, 2, 8], "state": [2, 1, 4]}  # the graph runs at batch 1 only, like Silero
    report = api.build(model, "openvino-cpu", tmp_path / "dyn",
                       BuildOptions(legalize=LegalizeOptions(sample_shapes=batch_one), bench=False))
    assert report.status == "verified", report.summary
    assert any("could not build with dynamic dims" in note for note in report.notes)
    assert report.legalize is not None and "input x dims ['batch', 2, 8] -> [1, 2, 8]" in \
        report.legalize.signature_changes
    (tmp_path / "vad.hints.json").write_text('{"shapes": {"x": [1, 2, 8], "state": [2, 1, 4]}}')
    from deploycc.audit.run import AuditOptions

    audited = api.audit([model], ["openvino-cpu"], tmp_path / "audit", AuditOptions(jobs=1))
    cell = audited.cells[0]
    assert cell.status == "verified", cell.message


# 10. ORT's static quantization in the QOperator form (QLinearConv and com.microsoft QLinear*):
# OpenVINO lacks the com.microsoft ops, TensorRT every one of them.


def qoperator_model(tmp_path: Path) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(9)
    tensors = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b"),
               numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32), "fc"),
               numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc_b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["r", "c2"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1)]
    tensors.append(numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1, "w2"))
    graph = helper.make_graph(nodes, "qop", [_vi("x", FLOAT, [1, 3, 16, 16])], [_vi("y", FLOAT, [1, 5])],
                              tensors)
    float_model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                        "float.onnx")

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
                                 for _ in range(4)])

        def get_next(self):
            return next(self.samples, None)

    model = tmp_path / "qop.onnx"
    quantize_static(str(float_model), str(model), Samples(), quant_format=QuantFormat.QOperator)
    return model


def test_qoperator_model_becomes_qdq_on_openvino_and_float_on_tensorrt(tmp_path: Path) -> None:
    model = qoperator_model(tmp_path)
    ops = {(n.domain, n.op_type) for n in onnx.load(model).graph.node}
    assert {("", "QLinearConv"), ("com.microsoft", "QLinearAdd"), ("com.microsoft", "QGemm")} <= ops
    report = api.build(model, "openvino-cpu", tmp_path / "ov", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    left = {(n.domain, n.op_type) for n in onnx.load(tmp_path / "ov" / "model.legalized.onnx").graph.node}
    # only what OpenVINO lacks is rewritten: QLinearConv (and com.microsoft's QLinearAdd) stay
    assert ("", "QLinearConv") in left and not {op for _, op in left} & {"QGemm", "QLinearGlobalAveragePool"}

    out = tmp_path / "qop.xavier.onnx"
    report = api.legalize(model, "jetson-xavier", out)
    assert report.success, report.summary
    assert [r.rule for r in report.rewrites if r.certificate.status == "proven"][:2] == \
        ["qoperator-to-qdq", "dequantize-to-float"]
    left_ops = {n.op_type for n in onnx.load(out).graph.node}
    assert not {op for op in left_ops if op.startswith("QLinear") or op in ("QGemm", "QuantizeLinear")}
    x = {"x": np.random.default_rng(10).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    expected = ort.InferenceSession(str(model), _unoptimized()).run(None, x)[0]
    np.testing.assert_allclose(ort.InferenceSession(str(out)).run(None, x)[0], expected, rtol=1e-4, atol=1e-4)


# 11. Silero VAD fixed at its 16 kHz chunk: the 8 kHz branch of the If on the sample rate cannot
# run with those shapes, and ONNX Runtime then refuses the whole model at load.


def branch_per_width() -> onnx.ModelProto:
    """y = x @ W4 when `wide`, else x @ W3: each branch takes one width of x only."""
    def branch(name: str, weights: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("MatMul", ["x", weights], [f"{name}_y"])], name, [],
                                 [_vi(f"{name}_y", FLOAT, ["N", 5])])

    nodes = [helper.make_node("If", ["wide"], ["y"], then_branch=branch("then", "w4"),
                              else_branch=branch("else", "w3"))]
    graph = helper.make_graph(
        nodes, "per_width", [_vi("x", FLOAT, ["N", "width"]), _vi("wide", TensorProto.BOOL, [])],
        [_vi("y", FLOAT, ["N", 5])],
        [_const("w4", np.arange(20).reshape(4, 5) / 10, np.float32),
         _const("w3", np.arange(15).reshape(3, 5) / 10, np.float32)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_branch_that_cannot_run_with_the_fixed_shapes_is_dropped(tmp_path: Path) -> None:
    model = _save(tmp_path, branch_per_width(), "per_width.onnx")
    feeds = {"x": np.random.default_rng(11).standard_normal((1, 4)).astype(np.float32),
             "wide": np.array(True)}
    np.savez(tmp_path / "inputs.npz", **feeds)
    out = tmp_path / "fixed.onnx"
    report = api.legalize(model, "ort-cpu", out, LegalizeOptions(shapes={"x": [1, 4]},
                                                                  inputs=tmp_path / "inputs.npz"))
    assert report.success, report.summary
    assert any("else branch cannot run" in note for p in report.passes for note in p.notes)
    written = onnx.load(out)
    assert "If" not in [node.op_type for node in written.graph.node]
    assert [i.name for i in written.graph.input] == ["x", "wide"]  # the signature stays
    _same_outputs(model, out, feeds)


# 12. MobileNetV3 on ort-cpu grew from 159 to 274 nodes: HardSwish, which ONNX Runtime expands into
# its function body itself, was decomposed by deploycc into more nodes than ORT's expansion.


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu"])
def test_a_function_op_the_runtime_expands_is_left_alone(tmp_path: Path, target: str) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("HardSwish", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "hs", [_vi("x", FLOAT, ["N", 2, 5, 5])],
                              [_vi("y", FLOAT, ["N", 3, 3, 3])],
                              [_const("w", np.full((3, 2, 3, 3), 0.1), np.float32)])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "hs.onnx")
    report = api.build(model, target, tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    assert report.legalize.nodes == {"before": 2, "after": 2} and not report.legalize.rewrites


# 13. onnxruntime's own scikit-learn sample (onnxmltools, IR 3): it imports ai.onnx.ml only, so no
# rule could write a standard op in it; and its LinearClassifier carries 4 coefficients per class
# for 2 declared features, of which ORT reads the first 2 * classes.


def test_an_ml_only_model_gets_a_default_opset_and_ort_reading_of_coefficients(tmp_path: Path) -> None:
    classifier = helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", classlabels_ints=[0, 1, 2],
        coefficients=[0.4, 1.4, -2.1, -1.0, 0.6, -1.7, 0.5, -1.4, -1.7, -1.2, 2.2, 2.4],
        intercepts=[0.25, 0.58, -0.94], post_transform="LOGISTIC")
    graph = helper.make_graph([classifier], "logreg", [_vi("x", FLOAT, [3, 2])],
                              [_vi("label", TensorProto.INT64, [3]), _vi("scores", FLOAT, [3, 3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)], ir_version=3)
    model = _save(tmp_path, proto, "logreg.onnx")
    out = tmp_path / "logreg.ov.onnx"
    report = api.legalize(model, "openvino-cpu", out)
    assert report.success, report.summary
    assert report.opset["before"] is None and report.opset["after"] is not None
    assert not [n for n in onnx.load(out).graph.node if n.domain == "ai.onnx.ml"]
    _same_outputs(model, out, {"x": np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)})


def test_a_quantized_form_is_proven_within_a_step_of_its_grid(tmp_path: Path) -> None:
    """ORT's QLinearConv requantizes its int32 sums in fixed point; the QDQ form it is rewritten to
    rounds a float sum once: over half a million outputs a few land a step apart (MobileNetV3's
    QOperator export: 5e-5 of a block's outputs). The proof allows that step, as verification of a
    quantized model does, and the rewrite is kept."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(9)
    weights = [numpy_helper.from_array(rng.standard_normal((32, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
               numpy_helper.from_array(rng.standard_normal(32).astype(np.float32) * 0.1, "b")]
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([conv], "conv", [_vi("x", FLOAT, [1, 3, 128, 128])],
                              [_vi("y", FLOAT, [1, 32, 128, 128])], weights)
    float_model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                        "conv.onnx")

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{"x": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
                                 for _ in range(4)])

        def get_next(self):
            return next(self.samples, None)

    model = tmp_path / "qconv.onnx"
    quantize_static(str(float_model), str(model), Samples(), quant_format=QuantFormat.QOperator)
    report = api.legalize(model, "jetson-xavier", tmp_path / "out.onnx")
    assert report.success, report.summary
    proof = next(r.certificate for r in report.rewrites if r.rule == "qoperator-to-qdq")
    assert proof is not None and proof.status == "proven"
    assert proof.max_abs_error > 1e-5  # a grid step apart somewhere: refused at float tolerances


def test_a_backend_that_needs_static_dims_is_built_at_the_given_inputs(tmp_path: Path) -> None:
    """Silero VAD with its inputs given (a corpus's hints): OpenVINO cannot type it while the batch
    is dynamic, and the build fixes the dims at the given arrays' shapes."""
    model = _save(tmp_path, squeeze_if_batch_one(), "vad.onnx")
    rng = np.random.default_rng(0)
    data = tmp_path / "vad.inputs.npz"
    np.savez(data, x=rng.standard_normal((1, 2, 8)).astype(np.float32),
             state=rng.standard_normal((2, 1, 4)).astype(np.float32))
    report = api.build(model, "openvino-cpu", tmp_path / "out",
                       BuildOptions(legalize=LegalizeOptions(inputs=data), bench=False))
    assert report.status == "verified", report.summary
    assert any("fixed at the verified sizes" in note for note in report.notes)


def test_integer_inputs_are_drawn_as_the_original_reads_them(tmp_path: Path) -> None:
    """The branch for 8 kHz cannot run with the width fixed at 4 and is dropped, and with it the
    Equal(sr, 16000) that said which sample rate the model takes: the rewritten graph no longer
    reads `sr`. Drawn from it, sr was 1..3 and the original took the dropped branch and failed."""
    def branch(name: str, weights: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("MatMul", ["x", weights], [f"{name}_y"])], name, [],
                                 [_vi(f"{name}_y", FLOAT, ["N", 5])])

    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
             helper.make_node("If", ["is_16k"], ["y"], then_branch=branch("then", "w4"),
                              else_branch=branch("else", "w3"))]
    graph = helper.make_graph(
        nodes, "vad", [_vi("x", FLOAT, ["N", "width"]), _vi("sr", INT64, [])], [_vi("y", FLOAT, ["N", 5])],
        [_const("w4", np.arange(20).reshape(4, 5) / 10, np.float32),
         _const("w3", np.arange(15).reshape(3, 5) / 10, np.float32), _const("rate", 16000)])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "vad.onnx")
    report = api.legalize(model, "ort-cpu", tmp_path / "fixed.onnx", LegalizeOptions(shapes={"x": [1, 4]}))
    assert report.success, report.summary
    assert "If" not in [node.op_type for node in onnx.load(tmp_path / "fixed.onnx").graph.node]


def test_a_model_that_takes_one_row_only_is_drawn_at_a_batch_of_1(tmp_path: Path) -> None:
    """onnxruntime-genai's decoders take one row only where a prompt meets a cache, and ended
    needs-inputs at the batch of 2 deploycc draws: where the original refuses every size at 2 and
    takes them at 1, verification draws 1 and says so; given --batch, the user's size stands."""
    squeeze = helper.make_node("Squeeze", ["x", "axes"], ["rows"])  # batch must be 1 at run time
    graph = helper.make_graph(
        [squeeze, helper.make_node("Relu", ["rows"], ["y"])], "one_row",
        [_vi("x", FLOAT, ["batch", "sequence", 8])], [_vi("y", FLOAT, ["sequence", 8])],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    model = _save(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "row.onnx")
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    assert report.verification.shapes["x"][0] == 1
    assert any("in a batch of 1 only" in note for note in report.notes), report.notes
    asked = api.build(model, "ort-cpu", tmp_path / "asked", BuildOptions(bench=False,
                                                                         legalize=LegalizeOptions(batch=2)))
    assert asked.status == "needs-inputs", asked.summary
    legalized = api.legalize(model, "ort-cpu", tmp_path / "row.legal.onnx")  # no shape plan: its own attempts
    assert legalized.success and legalized.verification.shapes["x"][0] == 1, legalized.summary
