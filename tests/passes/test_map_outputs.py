"""map-outputs: a scikit-learn classifier's ZipMap output becomes its probability tensor on a
target without ZipMap, columns in label order, and the result is checked against the maps the
original returns on ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from deploycc import api
from deploycc.options import BuildOptions, LegalizeOptions

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def classifier(labels: list[int], probabilities_shape: list | None) -> onnx.ModelProto:
    """LinearClassifier + ZipMap, as skl2onnx writes a logistic regression; the probabilities'
    shape declared or not (skl2onnx's Normalizer leaves it unknown)."""
    nodes = [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                              classlabels_ints=labels, coefficients=[(v - 6) / 10 for v in range(12)],
                              intercepts=[0.1, 0.2, 0.3], post_transform="SOFTMAX"),
             helper.make_node("Identity", ["scores"], ["probabilities"]),
             helper.make_node("ZipMap", ["probabilities"], ["probs"], domain="ai.onnx.ml",
                              classlabels_int64s=labels)]
    maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(INT64, helper.make_tensor_type_proto(FLOAT, [])))
    info = [helper.make_tensor_value_info("probabilities", FLOAT, probabilities_shape)] \
        if probabilities_shape else []
    graph = helper.make_graph(nodes, "pipeline", [helper.make_tensor_value_info("x", FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("label", INT64, ["N"]),
                               helper.make_value_info("probs", maps)], value_info=info)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("ai.onnx.ml", 1)])


def _build(tmp_path: Path, model: onnx.ModelProto, target: str, **legalize) -> tuple[object, Path]:
    source = tmp_path / "classifier.onnx"
    onnx.save(model, source)
    report = api.build(source, target, tmp_path / target, BuildOptions(legalize=LegalizeOptions(**legalize),
                                                                      bench=False))
    return report, source


@pytest.mark.parametrize(("labels", "shape"), [([0, 1, 2], ["N", 3]), ([9, 2, 5], None)])
def test_zipmap_output_becomes_probabilities_in_label_order(tmp_path: Path, labels, shape) -> None:
    report, source = _build(tmp_path, classifier(labels, shape), "openvino-cpu")
    assert report.status == "verified", report.summary
    changes = report.legalize.signature_changes
    assert any("probs" in change and "sequence of maps" in change for change in changes)
    written = onnx.load(tmp_path / "openvino-cpu" / "model.legalized.onnx")
    probs = written.graph.output[1]
    assert probs.name == "probs" and probs.type.tensor_type.elem_type == FLOAT
    assert not any(node.op_type == "ZipMap" for node in written.graph.node)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    maps = ort.InferenceSession(str(source)).run(["probs"], {"x": x})[0]
    legalized = tmp_path / "openvino-cpu" / "model.legalized.onnx"
    tensor = ort.InferenceSession(str(legalized)).run(["probs"], {"x": x})[0]
    expected = np.array([[row[label] for label in sorted(labels)] for row in maps], np.float32)
    np.testing.assert_allclose(tensor, expected, atol=1e-6)


def test_keep_map_outputs_leaves_zipmap_for_the_target_to_refuse(tmp_path: Path) -> None:
    report, _ = _build(tmp_path, classifier([0, 1, 2], ["N", 3]), "openvino-cpu", keep_map_outputs=True)
    assert report.status == "failed"
    assert [item.op for item in report.legalize.unresolved] == ["ZipMap"]
    assert not report.legalize.signature_changes


def test_a_target_with_zipmap_keeps_the_maps(tmp_path: Path) -> None:
    report, _ = _build(tmp_path, classifier([0, 1, 2], ["N", 3]), "ort-cpu")
    assert report.status == "verified", report.summary
    assert not report.legalize.signature_changes
    written = onnx.load(tmp_path / "ort-cpu" / "model.legalized.onnx")
    assert written.graph.output[1].type.WhichOneof("value") == "sequence_type"
