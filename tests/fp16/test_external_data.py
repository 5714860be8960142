"""The fp16 analysis on a model whose weights live in an external file (`model.onnx` +
`model.onnx.data`, what torch's dynamo exporter writes): it runs with the weights, in `build` for
a Jetson and in `check`, and nothing is skipped. It had failed on every such model: the analysis
saved a copy of the model in its scratch folder that still named the data file by a path
relative to the model's own folder ("External data path does not exist")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploycc
from deploycc import io
from deploycc.verify.runner import run_session, session

RNG = np.random.default_rng(3)


def external_data_model(folder: Path) -> Path:
    """Conv -> Relu -> Flatten -> MatMul, every weight in model.onnx.data beside model.onnx."""
    weights = {"W1": (RNG.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32),
               "B1": (RNG.standard_normal(8) * 0.1).astype(np.float32),
               "W2": (RNG.standard_normal((8 * 6 * 6, 10)) * 0.05).astype(np.float32)}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W1", "B1"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
         helper.make_node("MatMul", ["f", "W2"], ["y"], name="head")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(array, name) for name, array in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    return path


def test_a_copy_saved_elsewhere_takes_its_external_data_along(tmp_path: Path) -> None:
    source = external_data_model(tmp_path / "exported")
    copy = tmp_path / "elsewhere" / "copy.onnx"
    written = io.save(io.load(source).model, copy)
    assert copy.with_name("copy.onnx.data") in written
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    expected = run_session(session(source), feeds)["y"]
    np.testing.assert_array_equal(run_session(session(copy), feeds)["y"], expected)


def test_build_for_a_jetson_runs_the_fp16_analysis_on_an_external_data_model(tmp_path: Path) -> None:
    model = external_data_model(tmp_path / "exported")
    report = deploycc.build(model, "jetson-xavier", tmp_path / "out")
    assert report.exit_code == 0, report.summary
    assert report.half is not None and report.half.runs >= 1, report.skipped_steps
    assert report.skipped_steps == []
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written["half"]["layers"] == 4 and written["skipped_steps"] == []
    assert not any("analysis" in note for note in written["notes"])


def test_check_runs_the_fp16_analysis_on_an_external_data_model(tmp_path: Path) -> None:
    model = external_data_model(tmp_path / "exported")
    report = deploycc.check(model, ["jetson-xavier"], precision="target", strict=True)
    assert report.half is not None and report.skipped_steps == []
    assert report.exit_code == 0


def test_a_dynamo_export_with_external_data_gets_its_fp16_analysis(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.head = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.head(torch.relu(self.conv(x)).mean((2, 3)))

    path = tmp_path / "dynamo" / "model.onnx"
    path.parent.mkdir()
    program = torch.onnx.export(Small().eval(), (torch.randn(1, 3, 16, 16),), dynamo=True, verbose=False)
    program.save(str(path), external_data=True)
    assert path.with_name("model.onnx.data").exists()
    report = deploycc.check(path, ["jetson-orin"], precision="target")
    assert report.half is not None and report.skipped_steps == []
