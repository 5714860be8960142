"""An artifact loaded the way its manifest says runs what ONNX Runtime would run on the raw export:
the manifest once said the level the ORT artifact was saved at ("extended"), and a user who loaded
it so lost ORT's NCHWc layout transform (MobileNetV3: 1.95x the raw export's time). And the "how
to load" lines of report.md run as written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api


@pytest.fixture(scope="module")
def convnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two convolutions with channels that ORT's NCHWc transform blocks (16, 32) on AVX2 and up."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.2, (16, 3, 3, 3)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.normal(0, 0.2, (32, 16, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["features"])]
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])
    graph = helper.make_graph(nodes, "convnet", [image],
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, None)], weights)
    path = tmp_path_factory.mktemp("convnet") / "convnet.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _ops_as_loaded(model: Path, options: ort.SessionOptions, providers: list[str], dump: Path) -> Counter:
    """The ops ORT runs after its optimizations at load, read from the model it writes."""
    options.optimized_model_filepath = str(dump)
    ort.InferenceSession(str(model), options, providers=providers)
    return Counter((node.domain, node.op_type) for node in onnx.load(dump).graph.node)


def test_ort_artifact_loaded_as_manifest_says_runs_what_the_raw_export_runs(convnet: Path,
                                                                            tmp_path: Path) -> None:
    out = tmp_path / "ort"
    report = api.build(convnet, "ort-cpu", out)
    assert report.status == "verified", report.summary
    settings = json.loads((out / "manifest.json").read_text())["artifact"]["settings"]
    assert settings["saved_optimization_level"] == "extended"  # portable on disk
    load = settings["load"]
    options = ort.SessionOptions()
    for name, value in load["session_options"].items():
        level = name == "graph_optimization_level"
        setattr(options, name, getattr(ort.GraphOptimizationLevel, value) if level else value)
    as_manifest = _ops_as_loaded(out / "model.ort.onnx", options, load["providers"],
                                 tmp_path / "artifact.onnx")
    raw = _ops_as_loaded(convnet, ort.SessionOptions(), ["CPUExecutionProvider"], tmp_path / "raw.onnx")
    assert as_manifest == raw


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu"])
def test_how_to_load_lines_run_as_written(convnet: Path, tmp_path: Path, target: str) -> None:
    out = tmp_path / target
    report = api.build(convnet, target, out)
    assert report.status == "verified", report.summary
    markdown = (out / "report.md").read_text()
    snippet = markdown.split("```python\n", 1)[1].split("\n```", 1)[0]
    assert "'image': np.zeros((1, 3, 32, 32), np.float32)" in snippet
    check = "\nassert outputs and next(iter(outputs.values())).shape == (1, 32, 32, 32)\n"
    if target == "ort-cpu":
        check = "\nassert outputs[0].shape == (1, 32, 32, 32)\n"
    run = subprocess.run([sys.executable, "-c", snippet + check], cwd=out, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_an_optimizer_the_target_leaves_out_stays_out_as_saved_and_as_loaded(tmp_path: Path) -> None:
    """ort-cpu's data leaves out SkipLayerNormFusion (its kernel ran BERT 1.15x the time of the
    LayerNormalization and Add it fuses): neither the saved artifact nor a session opened as the
    manifest and the "how to load" lines say fuses the residual Add into the LayerNormalization,
    which ORT at its defaults does."""
    rng = np.random.default_rng(0)
    hidden = 64
    weights = [numpy_helper.from_array(rng.normal(0, 0.2, (hidden, hidden)).astype(np.float32), "w"),
               numpy_helper.from_array(np.ones(hidden, np.float32) * 1.5, "gamma"),
               numpy_helper.from_array(np.full(hidden, 0.1, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["projected"]),
             helper.make_node("Add", ["projected", "x"], ["residual"]),
             helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["y"], axis=-1)]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "block", [value("x", TensorProto.FLOAT, [2, 16, hidden])],
                              [value("y", TensorProto.FLOAT, [2, 16, hidden])], weights)
    model = tmp_path / "block.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    skip = ("com.microsoft", "SkipLayerNormalization")
    assert _ops_as_loaded(model, ort.SessionOptions(), ["CPUExecutionProvider"], tmp_path / "raw.onnx")[skip]

    out = tmp_path / "ort"
    report = api.build(model, "ort-cpu", out)
    assert report.status == "verified", report.summary
    load = json.loads((out / "manifest.json").read_text())["artifact"]["settings"]["load"]
    assert load["disabled_optimizers"] == ["SkipLayerNormFusion"]
    saved = Counter((node.domain, node.op_type) for node in onnx.load(out / "model.ort.onnx").graph.node)
    assert not saved[skip] and saved[("", "LayerNormalization")] == 1
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "loaded.onnx")
    ort.InferenceSession(str(out / "model.ort.onnx"), options, providers=load["providers"],
                         disabled_optimizers=load["disabled_optimizers"])
    assert not Counter((n.domain, n.op_type) for n in onnx.load(tmp_path / "loaded.onnx").graph.node)[skip]
    assert "disabled_optimizers=['SkipLayerNormFusion']" in (out / "report.md").read_text()
