"""An empty Constant that is its graph's output: OpenVINO 2026.4 returns it with one element
(torchvision's batched_nms returns `torch.empty((0,))` from an If branch when there is no box, so a
picture without proposals got a phantom box in every R-CNN). The empty-constant-of-shape rule writes
it as ConstantOfShape of its dims: checked on OpenVINO here, compared on ORT on both branches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from deploycc import api


def _branch_model(path: Path) -> Path:
    """y = If(c) then an empty int64 [0] else Cast(x): batched_nms's form."""
    empty = numpy_helper.from_array(np.zeros((0,), np.int64))
    then = helper.make_graph([helper.make_node("Constant", [], ["none"], value=empty)], "then", [],
                             [helper.make_tensor_value_info("none", TensorProto.INT64, ["k"])])
    other = helper.make_graph([helper.make_node("Cast", ["x"], ["all"], to=TensorProto.INT64)], "else", [],
                              [helper.make_tensor_value_info("all", TensorProto.INT64, ["k"])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
         helper.make_node("Shape", ["y"], ["count"])], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["k"]),
         helper.make_tensor_value_info("count", TensorProto.INT64, [1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), path)
    return path


def test_an_empty_branch_result_is_rewritten_and_openvino_returns_it_empty(tmp_path: Path) -> None:
    import openvino as ov

    model = _branch_model(tmp_path / "m.onnx")
    verdict = api.check(model, ["openvino-cpu", "ort-cpu"]).targets
    assert [g.op for g in verdict[0].illegal] == ["Constant"], verdict[0].illegal
    assert verdict[1].legal  # ONNX Runtime reads it as it is
    report = api.legalize(model, "openvino-cpu", tmp_path / "l.onnx")
    assert report.success, report.summary
    assert {r.rule for r in report.rewrites} == {"empty-constant-of-shape"}
    compiled = ov.Core().compile_model(str(tmp_path / "l.onnx"), "CPU")
    original = ort.InferenceSession(str(model))
    rewritten = ort.InferenceSession(str(tmp_path / "l.onnx"))
    for branch in (True, False):
        feeds = {"c": np.array(branch), "x": np.arange(3, dtype=np.float32)}
        expected = original.run(None, feeds)
        for got in (rewritten.run(None, feeds), [compiled(feeds)[o] for o in compiled.outputs]):
            assert [list(np.asarray(a).shape) for a in got] == [list(a.shape) for a in expected]
            for a, b in zip(got, expected, strict=True):
                np.testing.assert_array_equal(np.asarray(a), b)


def test_an_empty_constant_that_only_feeds_an_op_is_legal(tmp_path: Path) -> None:
    """OpenVINO reads an empty constant a Concat takes as it is: nothing to rewrite."""
    empty = numpy_helper.from_array(np.zeros((0,), np.float32))
    graph = helper.make_graph([helper.make_node("Constant", [], ["none"], value=empty),
                               helper.make_node("Concat", ["x", "none"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), tmp_path / "m.onnx")
    assert api.check(tmp_path / "m.onnx", ["openvino-cpu"]).targets[0].legal
