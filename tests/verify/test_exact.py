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
    image = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 16, 6, 6])
    result = helper.make_tensor_value_info("y", TensorProto.INT32, None)
    graph = helper.make_graph(nodes, "g", [image], [result],
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
    lie near the ends of their ranges: the float rewrite for TensorRT is proven exactly against
    the spec's values; before, ORT's saturating kernel on this CPU failed the proof and the model
    stayed integer."""
    from onnxruntime.quantization import quantize_dynamic

    rng = np.random.default_rng(2)
    # activations spread over [0, 1] and weights over [-4, 4]: many levels near 255 and +-127
    weights = numpy_helper.from_array(rng.uniform(-4, 4, (256, 32)).astype(np.float32), "w")
    nodes = [helper.make_node("Sigmoid", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    signature = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])])
    graph = helper.make_graph(nodes, "proj", *signature, [weights])
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


def test_a_dynamically_quantized_lstm_s_recurrent_products_do_not_saturate() -> None:
    """com.microsoft's DynamicQuantizeLSTM multiplies uint8 levels by int8 weights too: 256 hidden
    units are enough for the saturated sums to move the outputs 0.26 off the float LSTM on the
    dequantized weights; read as uint8 + 128, the kernel stays within its activations' rounding."""
    rng = np.random.default_rng(3)
    hidden, features, scale = 256, 64, 0.002
    w = rng.integers(-127, 128, (1, features, 4 * hidden), dtype=np.int8)
    r = rng.integers(-127, 128, (1, hidden, 4 * hidden), dtype=np.int8)
    constants = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"),
                 numpy_helper.from_array(np.full(1, scale, np.float32), "ws"),
                 numpy_helper.from_array(np.zeros(1, np.int8), "wz"),
                 numpy_helper.from_array(np.full(1, scale, np.float32), "rs"),
                 numpy_helper.from_array(np.zeros(1, np.int8), "rz")]
    inputs = ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"]
    node = helper.make_node("DynamicQuantizeLSTM", inputs, ["y"], domain="com.microsoft", hidden_size=hidden)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, features])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    quantized = helper.make_model(helper.make_graph([node], "q", [x_info], [y_info], constants),
                                  opset_imports=[helper.make_opsetid("", 13),
                                                 helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    float_weights = [numpy_helper.from_array((w * scale).astype(np.float32).transpose(0, 2, 1).copy(), "w"),
                     numpy_helper.from_array((r * scale).astype(np.float32).transpose(0, 2, 1).copy(), "r")]
    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)
    reference = helper.make_model(helper.make_graph([lstm], "f", [x_info], [y_info], float_weights),
                                  opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    x = {"x": (np.abs(rng.standard_normal((5, 1, features))) * 3).astype(np.float32)}
    exact = with_exact_integers(quantized)
    assert isinstance(exact, bytes)
    assert np.abs(_run(exact, x) - _run(reference, x)).max() < 0.05


def test_an_integer_op_is_found_in_a_model_in_memory_subgraphs_included() -> None:
    """exact.has_integer_ops spares a session the search of its file only where the model has none
    of the ops with_exact_integers rewrites, one inside an If's branch included."""
    import onnx_ir as ir

    from deploycc.verify.exact import has_integer_ops

    def model(op: str) -> ir.Model:
        branch = helper.make_graph([helper.make_node(op, ["a", "b"], ["c"])], "branch", [],
                                   [helper.make_tensor_value_info("c", TensorProto.INT32, None)])
        plain = helper.make_graph([helper.make_node("Identity", ["a"], ["d"])], "plain", [],
                                  [helper.make_tensor_value_info("d", TensorProto.UINT8, None)])
        node = helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=plain)
        graph = helper.make_graph([node], "g", [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 2]),
            helper.make_tensor_value_info("b", TensorProto.INT8, [2, 2])],
            [helper.make_tensor_value_info("out", TensorProto.INT32, None)])
        return ir.serde.deserialize_model(helper.make_model(graph))

    assert has_integer_ops(model("MatMulInteger"))
    assert not has_integer_ops(model("MatMul"))
