"""Writing models: the streamed writer makes the file ir.save makes, weights and all, without
holding a second copy of them; the checker sees a large model without its weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import io
from deploycc.io import checker, write


def _weighted(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.arange(256, dtype=np.int64), "idx"),  # int64, large too
             numpy_helper.from_array(rng.standard_normal(256).astype(np.float16), "half"),
             numpy_helper.from_array(np.array([1.5], np.float32), "small")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Gather", ["h", "idx"], ["g"], axis=1),
             helper.make_node("Cast", ["half"], ["half32"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["g", "half32"], ["a"]),
             helper.make_node("Mul", ["a", "small"], ["y"])]
    graph = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_streamed_file_is_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write, "STREAM_TENSOR_BYTES", 1024)  # every weight but `small` streams
    source = _weighted(tmp_path / "m.onnx")
    model = io.load(source).model
    names = list(model.graph.initializers)
    written = tmp_path / "out.onnx"
    io.write_streamed(model, written)
    assert list(model.graph.initializers) == names  # the model in memory is as it was
    proto = onnx.load(written)
    onnx.checker.check_model(proto, full_check=True)
    original = {t.name: numpy_helper.to_array(t) for t in onnx.load(source).graph.initializer}
    again = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert original.keys() == again.keys()
    for name, array in original.items():
        assert again[name].dtype == array.dtype and np.array_equal(again[name], array), name
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)}
    expected = ort.InferenceSession(str(source)).run(None, feeds)[0]
    np.testing.assert_array_equal(ort.InferenceSession(str(written)).run(None, feeds)[0], expected)


def test_the_checker_sees_a_large_model_without_its_weights(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checker, "CHECK_COPY_LIMIT", 0)
    proto = onnx.load(_weighted(tmp_path / "m.onnx"))
    light = checker._without_weights(proto)
    # `half` holds 512 bytes, under LARGE_TENSOR_BYTES: small ones stay as they are.
    assert {t.name for t in light.graph.initializer} == {"small", "half"}
    assert {"w1", "idx"} <= {v.name for v in light.graph.input}
    onnx.checker.check_model(light)
    broken = onnx.ModelProto()
    broken.CopyFrom(proto)
    broken.graph.node[0].input[1] = "missing"
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(checker._without_weights(broken))


def test_a_constant_read_from_external_data_goes_with_the_model(tmp_path: Path) -> None:
    """Optimum's OLMo-1B export keeps its norms' Constant values in its external data file: saved
    elsewhere, the model named the old file beside it (ONNX Runtime refused it); now those values
    are in the saved model, which runs anywhere and computes what the original did."""
    scale = numpy_helper.from_array(np.linspace(0.5, 2.0, 4096).astype(np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=scale), helper.make_node("Mul", ["x", "s"], ["y"])],
        "constant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])])
    source = tmp_path / "exported" / "model.onnx"
    source.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source,
              save_as_external_data=True, location="model.onnx_data", size_threshold=0,
              convert_attribute=True)
    assert (source.parent / "model.onnx_data").exists()
    target = tmp_path / "elsewhere" / "copy.onnx"
    io.save(io.load(source).model, target, force_external=True)
    x = np.arange(4096, dtype=np.float32)
    outputs = [ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
               for path in (source, target)]
    np.testing.assert_array_equal(outputs[1], outputs[0])


def test_a_model_copied_takes_its_weights_file_and_leaves_one_already_in_place(tmp_path: Path) -> None:
    """copy_model_file: into another folder, the weights file goes beside the copy under the name the
    model gives it (so the copy loads with its weights); into the model's own folder, the one
    already there stays (copying a file onto itself failed)."""
    from deploycc.io import copy_model_file

    weight = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight])
    model = tmp_path / "model.legalized.onnx"
    onnx.save_model(helper.make_model(graph), model, save_as_external_data=True,
               location="model.legalized.onnx.data", size_threshold=0)
    elsewhere = tmp_path / "bundle"
    elsewhere.mkdir()
    for copy in (elsewhere / "model.toy.onnx", tmp_path / "model.toy.onnx"):
        files = copy_model_file(model, copy)
        assert [f.name for f in files] == ["model.toy.onnx", "model.legalized.onnx.data"]
        x = np.ones((1, 64), np.float32)
        (y,) = ort.InferenceSession(str(copy), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(y, x @ numpy_helper.to_array(weight))
