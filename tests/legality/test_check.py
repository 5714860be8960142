"""check: every illegal node is listed with a reason that names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

import deploycc
from deploycc import api
from deploycc.analysis.check import CheckReport, TargetVerdict


def verdict(report: CheckReport, target: str) -> TargetVerdict:
    return next(t for t in report.targets if t.target == target)


def reasons(v: TargetVerdict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for group in v.illegal:
        out.setdefault(group.op, []).append(group.reason)
    return out


CNN_OPSET20 = """
<ir_version: 10, opset_import: ["" : 20]>
g (float[N,3,8,8] x) => (float[N,4,8,8] y, double[N,4,8,8] z) {
  w = Constant <value = float[4,3,1,1] {1,2,3,4,5,6,7,8,9,10,11,12}> ()
  c = Conv(x, w)
  y = Gelu(c)
  z = Cast<to=11>(y)
}
"""


def test_all_illegal_nodes_are_listed_not_just_the_first(write_model):
    report = deploycc.check(write_model(CNN_OPSET20), ["jetson-xavier"])
    found = reasons(verdict(report, "jetson-xavier"))
    assert "after the target's maximum opset 17" in found["Gelu"][0]
    assert "float64 tensors cannot be carried" in found["Cast"][0]
    assert report.exit_code == 1


def test_same_model_is_legal_on_cpu_backends(write_model):
    report = deploycc.check(write_model(CNN_OPSET20), ["ort-cpu", "openvino-cpu"])
    assert report.exit_code == 0
    assert all(t.legal for t in report.targets)


def test_gpu_trt10_accepts_gelu20_but_not_float64(write_model):
    found = reasons(verdict(deploycc.check(write_model(CNN_OPSET20), ["gpu-trt10"]), "gpu-trt10"))
    assert "Gelu" not in found and "Cast" in found


def test_groups_count_nodes_of_the_same_op_and_reason(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,8] x) => (float[2,8] y) {
      a = LayerNormalization(x, s, b)
      y = LayerNormalization(a, s, b)
    }
    """
    text = text.replace("g (float[2,8] x)", "g (float[2,8] x, float[8] s, float[8] b)")
    v = verdict(deploycc.check(write_model(text), ["jetson-xavier"]), "jetson-xavier")
    (group,) = [g for g in v.illegal if g.op == "LayerNormalization"]
    assert group.count == 2 and group.category == "unsupported-op"
    assert "listed as unsupported by TensorRT ONNX parser" in group.reason


@pytest.mark.parametrize(
    ("body", "op", "needle"),
    [
        ("y = Resize <mode = \"cubic\"> (x, , s)", "Resize", "mode='cubic' is not supported"),
        ("y = Einsum <equation = \"...ij,...jk->...ik\"> (x, x)", "Einsum", "uses an ellipsis"),
        ("y = Einsum <equation = \"ii->i\"> (x)", "Einsum", "diagonal"),
    ],
)
def test_vendor_restrictions_are_judged_by_named_predicates(write_model, body, op, needle):
    text = f"""
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,4,4] x) => (float[1,1,8,8] y) {{
      s = Constant <value = float[4] {{1, 1, 2, 2}}> ()
      {body}
    }}
    """
    v = verdict(deploycc.check(write_model(text), ["jetson-xavier"]), "jetson-xavier")
    assert any(needle in r for r in reasons(v)[op]), reasons(v)


def test_topk_k_must_be_an_initializer_on_tensorrt(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,10] x, int64[1] k) => (float[4,?] v, int64[4,?] i) {
      v, i = TopK(x, k)
    }
    """
    v = verdict(deploycc.check(write_model(text), ["jetson-xavier"]), "jetson-xavier")
    assert any("input 'K' must be a constant" in r for r in reasons(v)["TopK"])
    constant_k = text.replace("g (float[4,10] x, int64[1] k)", "g (float[4,10] x)").replace(
        "v, i = TopK(x, k)", "k = Constant <value = int64[1] {3}> ()\n      v, i = TopK(x, k)")
    v = verdict(deploycc.check(write_model(constant_k, "k.onnx"), ["jetson-xavier"]), "jetson-xavier")
    assert "TopK" not in reasons(v)
    assert any(g.op == "TopK" for g in v.conditional)  # legal under input_is_constant


def test_nodes_inside_subgraphs_are_checked(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool cond, float[2,8] x, float[8] s, float[8] b) => (float[2,8] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2,8] t) { t = LayerNormalization(x, s, b) },
        else_branch = else_g () => (float[2,8] e) { e = Relu(x) }
      >
    }
    """
    v = verdict(deploycc.check(write_model(text), ["jetson-xavier"]), "jetson-xavier")
    (group,) = [g for g in v.illegal if g.op == "LayerNormalization"]
    assert group.nodes[0].startswith("then_g/")


def test_int64_values_that_do_not_fit_int32_are_illegal_on_tensorrt8(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2] x) => (int64[2] y) {
      big = Constant <value = int64[2] {1, 9000000000}> ()
      y = Add(x, big)
    }
    """
    # Constants become initializers in real exports; check both forms via the API on a proto.
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.parser.parse_model(text.replace(
        "      big = Constant <value = int64[2] {1, 9000000000}> ()\n", ""))
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 9_000_000_000], np.int64), "big"))
    path = write_model(model)
    nano = verdict(deploycc.check(path, ["jetson-nano"]), "jetson-nano")
    assert not nano.legal
    assert any(f.severity == "illegal" and "9000000000" in f.message for f in nano.graph_findings)
    trt10 = verdict(deploycc.check(path, ["gpu-trt10"]), "gpu-trt10")
    assert not any(f.severity == "illegal" for f in trt10.graph_findings)


def test_static_shape_policy_refuses_dynamic_dims(write_model, tmp_path: Path):
    board = (Path(deploycc.get_target("jetson-xavier").source_file).read_text()
             .replace('name = "jetson-xavier"', 'name = "static-board"')
             .replace('policy = "dynamic"', 'policy = "static"'))
    board_file = tmp_path / "static-board.toml"
    board_file.write_text(board)
    text = """
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,8] x) => (float[N,8] y) { y = Relu(x) }
    """
    v = verdict(deploycc.check(write_model(text), [str(board_file)]), "static-board")
    assert any(g.category == "dynamic-shape" and g.op == "Relu" for g in v.illegal)
    assert any("--shape" in f.message for f in v.graph_findings if f.severity == "illegal")


def test_contrib_ops_are_unknown_to_tensorrt_but_run_on_ort(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2,8] x) => (float[2,8] y) { y = com.microsoft.FastGelu(x) }
    """
    report = deploycc.check(write_model(text), ["ort-cpu", "jetson-xavier"])
    assert verdict(report, "ort-cpu").legal
    found = reasons(verdict(report, "jetson-xavier"))
    assert "com.microsoft::FastGelu is not supported" in found["FastGelu"][0]


def test_ort_kernel_version_gaps_are_reported_as_opset(write_model):
    # RoiAlign-22 has no CPU kernel in ORT 1.32 (its kernel was registered for version 16).
    text = """
    <ir_version: 10, opset_import: ["" : 22]>
    g (float[1,1,4,4] x, float[1,4] rois, int64[1] idx) => (float[1,1,2,2] y) {
      y = RoiAlign <output_height = 2, output_width = 2> (x, rois, idx)
    }
    """
    found = reasons(verdict(deploycc.check(write_model(text), ["ort-cpu"]), "ort-cpu"))
    assert "RoiAlign-22 has no implementation" in found["RoiAlign"][0]


def test_function_ops_are_legal_by_expansion_when_their_body_is(write_model):
    """ORT 1.32's table has no Mish kernel and ORT expands function ops up to opset 24: Mish is
    legal on the condition that its body (Softplus, Tanh, Mul) is."""
    text = """
    <ir_version: 10, opset_import: ["" : 18]>
    g (float[2,8] x) => (float[2,8] y) { y = Mish(x) }
    """
    v = verdict(deploycc.check(write_model(text), ["ort-cpu"]), "ort-cpu")
    assert v.legal
    assert [group.op for group in v.conditional] == ["Mish"]
    assert "function body" in v.conditional[0].reason, v.conditional


def test_dla_split_reports_gpu_fallback(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,8,8] x, float[4,3,1,1] w) => (float[1,4,8,8] y) {
      c = Conv(x, w)
      y = Softmax(c)
    }
    """
    v = verdict(deploycc.check(write_model(text), ["jetson-xavier"], dla=True), "jetson-xavier")
    assert v.dla is not None
    assert "y" in v.dla["gpu-fallback"] and "c" not in v.dla["gpu-fallback"]  # Softmax falls back, Conv not


def test_json_of_the_api_result_round_trips(write_model):
    import json

    report = deploycc.check(write_model(CNN_OPSET20), ["jetson-xavier", "ort-cpu"])
    data = json.loads(report.to_json())
    assert data == json.loads(json.dumps(report.to_dict()))
    assert data["legal"] is False
    assert {t["target"] for t in data["targets"]} == {"jetson-xavier", "ort-cpu"}


@pytest.mark.parametrize(
    ("signature", "body", "op", "needle"),
    [
        ("(float[4] x) => (float8e4m3fn[4] y)", "y = Cast <to = 17> (x)", "Cast",
         "does not saturate out-of-range values"),
        ("(float[4] x, float[4] d) => (float[4] y)", "y = Mod <fmod = 0> (x, d)", "Mod", "fmod=0"),
        ("(float16[4] x) => (float16[4] y)", "y = Celu (x)", "Celu", "is float16 (supported: float32)"),
        ("(float[3,4,5] x, int64[2] a) => (float[3] y)", "y = ReduceSum <keepdims = 0> (x, a)", "ReduceSum",
         "several axes computed at run time"),
        # two [[restrict]] entries for Resize add up: both are still judged
        ("(float[1,1,4,4] x, float[4] s) => (float[1,1,2,2] y)", "y = Resize <antialias = 1> (x, , s)",
         "Resize", "antialias=1 is not supported"),
        ("(float[1,1,4,4] x, float[4] s) => (float[1,1,2,2] y)",
         "y = Resize <coordinate_transformation_mode = \"half_pixel_symmetric\"> (x, , s)", "Resize",
         "'half_pixel_symmetric' is not supported"),
    ],
)
def test_probed_openvino_restrictions(write_model, signature, body, op, needle):
    """Restrictions found by `deploycc probe`: OpenVINO converts these, then computes otherwise."""
    model = write_model(f"""
    <ir_version: 10, opset_import: ["" : 21]>
    g {signature} {{ {body} }}
    """)
    v = verdict(deploycc.check(model, ["openvino-cpu"]), "openvino-cpu")
    assert any(needle in r for r in reasons(v)[op]), reasons(v)
    assert verdict(deploycc.check(model, ["ort-cpu"]), "ort-cpu").legal


def test_a_single_run_time_reduction_axis_is_fine_on_openvino(write_model):
    model = write_model("""
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[3,4,5] x, int64[1] a) => (float[3,4] y) { y = ReduceSum <keepdims = 0> (x, a) }
    """)
    assert verdict(deploycc.check(model, ["openvino-cpu"]), "openvino-cpu").legal


def test_an_opset_outside_the_range_is_a_note_before_legalize_and_illegal_after(write_model):
    from deploycc.analysis.check import judge_model
    from deploycc.api import get_target
    from deploycc.graph.shapes import load_inferred

    path = write_model("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,4] x) => (float[2,4] y) { y = Relu(x) }
    """)
    before = verdict(deploycc.check(path, ["jetson-xavier"]), "jetson-xavier")
    assert before.legal
    assert [(f.severity, f.category) for f in before.graph_findings] == [("note", "opset")]
    after = judge_model(load_inferred(path).model, get_target("jetson-xavier"), legalized=True)
    assert not after.legal
    assert [(f.severity, f.message) for f in after.graph_findings] == \
        [("illegal", "model opset 18 is outside jetson-xavier's range 7..17")]


def test_explain_names_only_the_fix_legalize_applies(write_model, tmp_path):
    """NonZero on bool: TensorRT 8.5 takes it in a wider type, so compute-wider is the fix there and
    legalize applies it; TensorRT 8.2 lacks NonZero in every type, so no rule applies, and both
    `check --explain` and the failed build say --partition (the node runs on the host)."""
    path = write_model("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (bool[2,4] x) => (int64[2,?] y) { y = NonZero(x) }
    """)
    report = deploycc.check(path, ["jetson-xavier", "jetson-nano"], explain=True)
    xavier, nano = verdict(report, "jetson-xavier"), verdict(report, "jetson-nano")
    assert xavier.fixes == [{"node": "y", "op": "NonZero", "fix": "compute-wider",
                             "explanation": "rule compute-wider"}]
    legalized = api.legalize(path, "jetson-xavier", tmp_path / "x.onnx")
    assert legalized.success and [r.rule for r in legalized.rewrites] == ["compute-wider"]
    assert nano.fixes is not None and [fix["fix"] for fix in nano.fixes] == [""]
    explanation = nano.fixes[0]["explanation"]
    assert "compute-wider declined: the target lacks NonZero in the wider type too" in explanation
    assert explanation.endswith("no rule applies: --partition runs it on the host")
    built = api.build(path, "jetson-nano", tmp_path / "nano")
    assert built.status == "failed" and built.stage == "legalize"
    assert "--partition runs them on the host" in built.next_step
