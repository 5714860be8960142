"""The function-body rule: an op the target lacks, replaced by its ONNX function body."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from deploycc import api
from deploycc.verify.runner import run_model_bytes, run_ort
from tests.rules.helpers import declines, rewrite_and_compare, rewritten_by


def test_static_body_elu() -> None:
    decision = rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[2,8] x) => (float[2,8] y) { y = Elu <alpha: float = 0.7> (x) }
    """, "Elu", "function-body")
    assert decision.rewrite is not None and decision.rewrite.added_nodes > 1


def test_context_dependent_body_log_softmax() -> None:
    # the body is built by onnx for this node's attributes and input type
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[2,3,5] x) => (float[2,3,5] y) { y = LogSoftmax <axis: int = 1> (x) }
    """, "LogSoftmax", "function-body")


def test_unset_attributes_take_the_schema_default() -> None:
    # Elu's alpha defaults to 1.0; the body reads it by name, so the rule must spell it out
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[16] x) => (float[16] y) { y = Elu (x) }
    """, "Elu", "function-body")


def test_op_without_a_body_is_declined() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[4,3] x) => (float[4,3] y) { y = Neg (x) }
    """, "Neg", "has no function body")


def test_nested_bodies_reach_ops_the_target_runs(tmp_path: Path, write_model) -> None:
    """SwiGLU's body is Swish (opset 24), for which ORT 1.32 has no kernel: a second round
    expands Swish too, and the result runs on ORT and matches the onnx reference evaluator."""
    newest = onnx.defs.onnx_opset_version()
    if _has_swiglu():
        model = write_model(f"""
            <ir_version: 10, opset_import: ["" : {newest}]>
            g (float[2,6] a, float[2,6] b) => (float[2,6] y) {{ y = SwiGLU <alpha: float = 1.5> (a, b) }}
        """)
    else:
        model = write_model("""
            <ir_version: 10, opset_import: ["" : 24]>
            g (float[2,6] a) => (float[2,6] y) { y = Swish <alpha: float = 1.5> (a) }
        """)
    out = tmp_path / "legal.onnx"
    report = api.legalize(model, "ort-cpu", out)
    assert report.success, report.summary
    ops = {node.op_type for node in onnx.load(out).graph.node}
    assert not ops & {"SwiGLU", "Swish"}, ops
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal((2, 6)).astype(np.float32) for i in onnx.load(model).graph.input}
    expected = run_model_bytes(Path(model).read_bytes(), feeds).outputs
    actual = run_ort(out.read_bytes(), feeds)
    np.testing.assert_allclose(actual["y"], expected["y"], rtol=1e-5, atol=1e-6)


def _has_swiglu() -> bool:
    try:
        onnx.defs.get_schema("SwiGLU", onnx.defs.onnx_opset_version(), "")
    except onnx.defs.SchemaError:
        return False
    return True


def test_a_body_with_a_scan_reads_the_models_values() -> None:
    """LinearAttention's body is a Scan whose loop body reads values computed outside it: the
    rewrite rewires those references onto the model's own values (taken from the onnx case)."""
    import onnx_ir as ir

    from deploycc.audit.conformance import as_value
    from deploycc.graph.shapes import infer_shapes
    from deploycc.verify.runner import serialize

    case = next(c for c in _cases() if c.name == "test_linear_attention_linear")
    model = ir.serde.deserialize_model(case.model)
    infer_shapes(model)
    rewritten_by(model, "LinearAttention", "function-body")
    ops = {n.op_type for n in model.graph}
    assert "Scan" in ops and "LinearAttention" not in ops
    inputs, expected = case.data_sets[0]
    names = [v.name for v in model.graph.inputs]
    actual = run_ort(serialize(model), dict(zip(names, map(as_value, inputs), strict=True)))
    for want, name in zip(expected, [v.name for v in model.graph.outputs], strict=False):
        np.testing.assert_allclose(actual[name], as_value(want), rtol=1e-4, atol=1e-5)


def test_preview_domain_bodies() -> None:
    """FlexAttention (ai.onnx.preview) has a body but no runtime kernel: the preview rule inlines it."""
    import onnx_ir as ir

    from deploycc.graph.shapes import infer_shapes

    case = next(c for c in _cases() if c.name == "test_flexattention")
    model = ir.serde.deserialize_model(case.model)
    infer_shapes(model)
    rewritten_by(model, "FlexAttention", "function-body-preview")
    assert all(n.domain in ("", "ai.onnx") for n in model.graph)


def _cases():
    from deploycc.audit.probe import all_cases

    return all_cases()
