"""A model whose every weight lives in an external file, as torch.onnx.export (dynamo) writes it,
converted to an older opset: the converter's protobuf names the file relative to a folder it
does not record, and the converted model must still find it (it did not: FileNotFoundError on
every Jetson build of a torch 2.9+ export)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api


def _exported_like_torch(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.weight")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv.bias")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = folder / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)  # every weight outside, however small
    return path


@pytest.mark.parametrize("target", ["jetson-xavier", "jetson-nano"])  # opset 18 -> 17, 18 -> 13
def test_external_weights_survive_opset_conversion(tmp_path: Path, target: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    model = _exported_like_torch(tmp_path / "src")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the data file's relative name must not resolve from here
    report = api.legalize(model, target, tmp_path / "out.onnx")
    assert report.success, report.summary
    assert report.opset["after"] < 18 and report.verification is not None and report.verification.passed
