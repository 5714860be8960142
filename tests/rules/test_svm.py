"""SVMClassifier in standard ops (rules/svm.py), against ONNX Runtime's own kernel: every kernel
type, with and without probabilities, 2 and 4 classes. The rewritten graph runs on ORT and is
compared with the original on rows the test draws itself (not the rule's proof)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from deploycc.graph.graphs import opset_map
from deploycc.graph.shapes import infer_shapes
from deploycc.rules.engine import decide
from deploycc.verify.runner import serialize

FEATURES = 6


def _svc(kernel: str, classes: int, probabilities: bool, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    per_class = [int(n) for n in rng.integers(2, 6, classes)]
    vectors = sum(per_class)
    pairs = classes * (classes - 1) // 2
    attributes = {
        "classlabels_ints": [10 * (c + 1) for c in range(classes)],
        "vectors_per_class": per_class,
        "support_vectors": rng.standard_normal(vectors * FEATURES).astype(np.float32).tolist(),
        "coefficients": rng.uniform(-1, 1, (classes - 1) * vectors).astype(np.float32).tolist(),
        "rho": rng.uniform(-0.5, 0.5, pairs).astype(np.float32).tolist(),
        "kernel_type": kernel,
        "kernel_params": [0.3, 0.5, 3.0],
        "post_transform": "NONE",
    }
    if probabilities:
        attributes["prob_a"] = rng.uniform(-4, -1, pairs).astype(np.float32).tolist()
        attributes["prob_b"] = rng.uniform(-0.2, 0.2, pairs).astype(np.float32).tolist()
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", **attributes)
    width = classes if probabilities or classes == 2 else pairs
    graph = helper.make_graph([node], "svc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", width])])
    opsets = [helper.make_opsetid("", 15), helper.make_opsetid("ai.onnx.ml", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def _rewritten(original: bytes) -> bytes:
    model = ir.serde.deserialize_model(onnx.load_from_string(original))
    infer_shapes(model)
    node = next(n for n in model.graph if n.op_type == "SVMClassifier")
    decision = decide(node, model.graph, opset_map(model))
    assert decision.rewrite is not None and decision.rewrite.rule == "svm-classifier", decision.explain()
    assert all(n.domain != "ai.onnx.ml" for n in model.graph)
    return serialize(model)


@pytest.mark.parametrize("kernel", ["RBF", "LINEAR", "POLY", "SIGMOID"])
@pytest.mark.parametrize(("classes", "probabilities"), [(4, True), (4, False), (2, True), (2, False)])
def test_svm_classifier_as_onnx_runtime_computes_it(kernel: str, classes: int, probabilities: bool) -> None:
    original = _svc(kernel, classes, probabilities)
    rows = np.random.default_rng(7).standard_normal((500, FEATURES)).astype(np.float32)
    expected = ort.InferenceSession(original).run(None, {"x": rows})
    actual = ort.InferenceSession(_rewritten(original)).run(None, {"x": rows})
    # the label comes from the votes, computed from the same decision values: equal unless a value
    # lies within float32 rounding of 0 (none does on these rows)
    np.testing.assert_array_equal(actual[0], expected[0])
    assert actual[1].shape == expected[1].shape
    np.testing.assert_allclose(actual[1], expected[1], atol=2e-5, rtol=1e-4)


def test_probabilities_stop_per_row_as_onnx_runtime_does() -> None:
    """The coupling's rounds end per row: rows that stop early keep the values of their round
    (a model run for all 100 rounds everywhere would drift from ORT by more than the tolerance)."""
    original = _svc("RBF", 4, True, seed=3)
    rows = np.random.default_rng(11).standard_normal((2000, FEATURES)).astype(np.float32) * 2
    expected = ort.InferenceSession(original).run(None, {"x": rows})[1]
    actual = ort.InferenceSession(_rewritten(original)).run(None, {"x": rows})[1]
    assert float(np.abs(actual - expected).max()) < 2e-5
    np.testing.assert_allclose(actual.sum(axis=1), 1.0, atol=1e-5)
