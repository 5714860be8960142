"""The headline command as a newcomer types it: `deploycc build MODEL --target T` and nothing else.
One small graph per thing that broke it: the output folder, the shapes a dynamic export is built
and verified at, inputs that carry no signal, and what the reports write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api, io
from deploycc.graph.dim_roles import guess_dims
from deploycc.options import BuildOptions, LegalizeOptions
from examples.make_models import small_cnn
from tests.conftest import REPO

FLOAT = TensorProto.FLOAT


def _deploycc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deploycc.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def _dynamic_cnn(path: Path) -> Path:
    """small_cnn with its batch dim made dynamic, as torch.onnx.export's tutorials write it."""
    model = small_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, path)
    return path


def test_build_without_o_writes_the_default_folder_and_says_so(tmp_path: Path) -> None:
    model = _dynamic_cnn(tmp_path / "resnetish.onnx")
    work = tmp_path / "work"
    work.mkdir()
    first = _deploycc("build", str(model), "--target", "jetson-xavier", cwd=work)
    assert first.returncode == 0, first.stderr
    assert "writing resnetish.jetson-xavier/ (no -o given)" in first.stderr
    report = json.loads((work / "resnetish.jetson-xavier" / "report.json").read_text())
    assert report["status"] == "pending-on-device"
    (shapes,) = report["shapes"]["inputs"]
    assert shapes["accepts"] == "1x3x32x32" and shapes["exported"] == ["batch", 3, 32, 32]
    assert "1x3x32x32" in first.stdout and "--dynamic-batch" in first.stdout  # says what it takes, and how
    again = _deploycc("build", str(model), "--target", "jetson-xavier", cwd=work)
    assert again.returncode == 2 and "already exists (pass --force" in again.stderr
    assert _deploycc("build", str(model), "--target", "jetson-xavier", "--force", cwd=work).returncode == 0


def test_legalize_refuses_to_overwrite_its_output_without_force(tmp_path: Path) -> None:
    model = _dynamic_cnn(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    out.write_bytes(b"a file the user keeps")
    refused = _deploycc("legalize", str(model), "-t", "ort-cpu", "-o", str(out), cwd=tmp_path)
    assert refused.returncode == 2 and "already exists" in refused.stderr
    assert "Traceback" not in refused.stderr and out.read_bytes() == b"a file the user keeps"
    forced = _deploycc("legalize", str(model), "-t", "ort-cpu", "-o", str(out), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert onnx.load(out).graph.node


def test_report_json_is_strict_json(tmp_path: Path) -> None:
    """An output whose reference holds an exact zero where the candidate is off has an infinite
    relative error: JSON has no Infinity, so report.json writes "inf" and JSON.parse/jq read it."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("x", FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", FLOAT, [2, 8])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    out = tmp_path / "out"
    report = api.build(path, "openvino-cpu", out, BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    # the relative error of a Relu's exact zeros is 0/0: make one output's error infinite by hand
    report.verification.outputs[0].max_rel_error = float("inf")  # type: ignore[union-attr]

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    data = json.loads(report.to_json(), parse_constant=refuse)
    assert data["verification"]["outputs"][0]["max_rel_error"] == "inf"
    json.loads((out / "report.json").read_text(), parse_constant=refuse)


def test_outputs_without_signal_are_never_ok(tmp_path: Path) -> None:
    """A map that is zero wherever drawn (a random-weight detector at a toy size): no size the
    roles offer gives it signal, so verification asks for inputs instead of calling it ok."""
    nodes = [helper.make_node("Sub", ["x", "far"], ["shifted"]),
             helper.make_node("Relu", ["shifted"], ["map"])]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info("x", FLOAT, ["N", 3, "h", "w"])],
                              [helper.make_tensor_value_info("map", FLOAT, ["N", 3, "h", "w"])],
                              [numpy_helper.from_array(np.array(1000, np.float32), "far")])
    path = tmp_path / "dead.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    report = api.build(path, "ort-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "needs-inputs" and report.exit_code == 1, report.summary
    assert "carry no signal" in report.summary and "all within 1e-06 of zero" in report.summary
    assert (tmp_path / "out" / "verify-inputs.npz").exists()  # kept to reproduce, whatever the outcome
    assert "verify-inputs.npz" in (tmp_path / "out" / "report.md").read_text()


def test_a_scalar_the_graph_tests_against_a_constant_is_drawn_at_it(tmp_path: Path) -> None:
    """Silero VAD branches on `sr == 16000`; the other branch cannot run: a drawn sample rate of
    1..3 failed every draw."""
    good = helper.make_graph([helper.make_node("Identity", ["x"], ["good_y"])], "then", [],
                             [helper.make_tensor_value_info("good_y", FLOAT, [1, "n"])])
    bad = helper.make_graph([helper.make_node("Reshape", ["x", "odd"], ["bad_y"])], "else", [],
                            [helper.make_tensor_value_info("bad_y", FLOAT, [7, "n"])])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
             helper.make_node("If", ["is_16k"], ["y"], then_branch=good, else_branch=bad)]
    graph = helper.make_graph(
        nodes, "vad", [helper.make_tensor_value_info("x", FLOAT, [1, "n"]),
                       helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", FLOAT, ["a", "b"])],
        [numpy_helper.from_array(np.array(16000, np.int64), "rate"),
         numpy_helper.from_array(np.array([7, -1], np.int64), "odd")])
    path = tmp_path / "vad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    report = api.legalize(path, "ort-cpu")
    assert report.verification is not None and report.verification.passed, report.summary


def lstm_with_state(path: Path, state_dims: list) -> Path:
    """An LSTM whose initial hidden state is an input [1, ?, 4]: its dim 1 is the batch."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((1, 16, 3)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal((1, 16, 4)).astype(np.float32), "R")]
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "", "", "h0"], ["all", "h"], hidden_size=4)]
    graph = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info("x", FLOAT, ["T", "?", 3]),
                                             helper.make_tensor_value_info("h0", FLOAT, state_dims)],
                              [helper.make_tensor_value_info("h", FLOAT, [1, "b", 4])], weights)
    graph.input[0].type.tensor_type.shape.dim[1].Clear()  # unnamed, as many exports leave it
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    return path


def test_an_rnn_state_carries_the_batch_at_dim_1(tmp_path: Path) -> None:
    path = lstm_with_state(tmp_path / "rnn.onnx", [1, "?", 4])
    model = onnx.load(path)
    model.graph.input[1].type.tensor_type.shape.dim[1].Clear()
    onnx.save(model, path)
    graph = io.load(path, check=False).model.graph
    roles = {(g.input, g.axis): g.role for g in guess_dims(graph)}
    assert roles[("h0", 1)] == "batch" and roles[("x", 0)] == "sequence"
    report = api.build(path, "jetson-xavier", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "pending-on-device", report.summary
    accepts = {i.input: i.accepts for i in report.shapes.inputs}  # type: ignore[union-attr]
    assert accepts["h0"] == "1x1x4"  # the batch fixed at 1 on both, though neither names it


@pytest.mark.parametrize(("dims", "metadata", "expected"), [
    (["N", 3, "h", "w"], {}, (224, 224)),  # images: ImageNet's crop
    (["N", 3, 48, "w"], {}, (48, 48)),  # a static sibling gives its size
    (["N", 3, "h", "w"], {"imgsz": "[320, 640]"}, (320, 640)),  # ultralytics' metadata
    (["N", "h", "w", 3], {}, (224, 224)),  # NHWC (Keras through tf2onnx)
])
def test_image_sizes_come_from_the_model(dims: list, metadata: dict, expected: tuple, tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "img",
                              [helper.make_tensor_value_info("x", FLOAT, dims)],
                              [helper.make_tensor_value_info("y", FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, tmp_path / "m.onnx")
    loaded = io.load(tmp_path / "m.onnx", check=False).model
    sizes = {g.role: g.typical for g in guess_dims(loaded.graph, loaded.metadata_props)}
    assert (sizes.get("height", dims[2] if isinstance(dims[2], int) else None), sizes["width"]) == expected


def test_an_engine_that_refuses_the_inputs_is_a_backend_error_not_a_mismatch(tmp_path: Path) -> None:
    """PP-OCR's recognizer pools its feature map with a 3x2 kernel: ONNX Runtime runs a map 2 high,
    OpenVINO refuses it ("kernel larger than the data"). That is the engine refusing the inputs,
    not the engine computing otherwise."""
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[3, 2])
    graph = helper.make_graph([pool], "rec", [helper.make_tensor_value_info("x", FLOAT, ["N", 4, "h", "w"])],
                              [helper.make_tensor_value_info("y", FLOAT, ["N", 4, "a", "b"])])
    path = tmp_path / "rec.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)]), path)
    inputs = tmp_path / "short.npz"
    np.savez(inputs, x=np.random.default_rng(0).random((1, 4, 2, 8), dtype=np.float32))
    options = BuildOptions(bench=False, legalize=LegalizeOptions(inputs=inputs))
    report = api.build(path, "openvino-cpu", tmp_path / "out", options)
    assert report.status == "failed" and report.stage == "verify" and report.verification is None
    assert report.failure_category == "backend-error"
    assert report.summary.startswith("the engine could not run inputs the original model takes")
    assert "refuses these input sizes" in report.next_step and "differs" not in report.next_step
    # at its typical sizes (224 x 224 by the dims' names) the same model builds and verifies
    typical = api.build(path, "openvino-cpu", tmp_path / "typical", BuildOptions(bench=False))
    assert typical.status == "verified", typical.summary
