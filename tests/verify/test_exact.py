"""Integer ops as the spec defines them, where ONNX Runtime's CPU kernels saturate (uint8 x int8
without AVX-VNNI): the models a GPU target gets are judged against the spec's values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from deploycc import api
from deploycc.verify.exact import exact_integers, with_exact_integers
from deploycc.verify.runner import run_ort


def _run(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_uint8_by_int8_products_come_out_as_the_spec_s() -> None:
    """Activations near 255 and weights near 127, 64 long: each pairwise int16 sum of vpmaddubsw
    overflows. With the weights read as uint8 + 128 (and the zero point too), ORT's uint8 x uint8
    kernel gives the exact int32 products, as onnx's reference evaluator does."""
    rng = np.random.default_rng(0)
    a = rng.integers(200, 256, (4, 64), dtype=np.uint8)
    b = rng.integers(90, 128, (64, 8), dtype=np.int8)
    b_zero = np.array(-3, np.int8)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "", "bz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 8])],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_zero, "bz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    exact = a.astype(np.int64) @ (b.astype(np.int64) - int(b_zero))
    assert np.array_equal(ReferenceEvaluator(onnx.load_from_string(model)).run(None, {"a": a})[0], exact)
    rewritten = with_exact_integers(model)
    assert isinstance(rewritten, bytes) and rewritten != model
    assert np.array_equal(_run(rewritten, {"a": a}), exact)
    # deploycc's proofs run it so, and so does every run for a GPU target
    assert np.array_equal(run_ort(model, {"a": a})["y"], exact)
    with exact_integers(True):
        assert np.array_equal(run_ort(model, {"a": a}, optimize=True)["y"], exact)


def test_conv_integer_with_a_zero_point() -> None:
    """(ORT's ConvInteger takes a per-tensor zero point only.)"""
    rng = np.random.default_rng(1)
    x = rng.integers(180, 256, (1, 16, 6, 6), dtype=np.uint8)
    w = rng.integers(-128, 128, (4, 16, 3, 3), dtype=np.int8)
    w_zero = np.array(-7, np.int8)
    nodes = [helper.make_node("ConvInteger", ["x", "w", "", "wz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 16, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_zero, "wz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    exact = ReferenceEvaluator(onnx.load_from_string(model)).run(None, {"x": x})[0]
    assert np.array_equal(_run(with_exact_integers(model), {"x": x}), exact)  # type: ignore[arg-type]


def test_a_model_without_int8_weights_is_left_as_it_is() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph).SerializeToString()
    assert with_exact_integers(model) is model


def test_ort_s_default_dynamic_quantization_is_proven_and_verified_for_tensorrt(tmp_path: Path) -> None:
    """quantize_dynamic's default (int8 weights, uint8 activations) on a projection whose levels
    lie near the ends of their ranges: the float rewrite for TensorRT is proven exactly against the spec's values; before,
    ORT's saturating kernel on this CPU failed the proof and the model stayed integer."""
    from onnxruntime.quantization import quantize_dynamic

    rng = np.random.default_rng(2)
    # activations spread over [0, 1] and weights over [-4, 4]: many levels near 255 and +-127
    weights = numpy_helper.from_array(rng.uniform(-4, 4, (256, 32)).astype(np.float32), "w")
    nodes = [helper.make_node("Sigmoid", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    graph = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])], [weights])
    float_model = tmp_path / "f.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), float_model)
    model = tmp_path / "q.onnx"
    quantize_dynamic(str(float_model), str(model))
    assert "MatMulInteger" in {node.op_type for node in onnx.load(model).graph.node}
    report = api.legalize(model, "jetson-xavier", tmp_path / "q.xavier.onnx")
    assert report.success, report.summary
    proofs = {r.rule: r.certificate for r in report.rewrites}
    assert proofs["dynamic-quantization-to-float"].status == "proven"
    assert report.verification is not None and report.verification.passed
