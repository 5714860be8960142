"""A skipped safety step is never silent: a warning line, the report's `skipped_steps`, and with
`--strict` exit 1 (a step turned off by its own flag is said, and `--strict` accepts it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli.test_cli import run
from tests.fp16.test_external_data import external_data_model

RNG = np.random.default_rng(5)


def labels_model(folder: Path) -> Path:
    """A classifier that returns its labels (ArgMax, int64): no float output for a metric to read."""
    weights = {"W1": (RNG.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32),
               "W2": (RNG.standard_normal((8 * 6 * 6, 10)) * 0.05).astype(np.float32)}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W1"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
         helper.make_node("MatMul", ["f", "W2"], ["scores"], name="head"),
         helper.make_node("ArgMax", ["scores"], ["label"], name="argmax", axis=1, keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [1])],
        [numpy_helper.from_array(array, name) for name, array in weights.items()])
    path = folder / "labels.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    calibration = folder / "calibration"
    calibration.mkdir()
    for index in range(4):
        np.savez(calibration / f"{index}.npz", x=RNG.standard_normal((1, 3, 6, 6)).astype(np.float32))
    return path


def test_check_says_the_fp16_analysis_did_not_run_and_strict_fails(tmp_path: Path) -> None:
    model = str(external_data_model(tmp_path))
    inputs = tmp_path / "other-size.npz"  # ONNX Runtime refuses them: the analysis cannot run
    np.savez(inputs, x=np.zeros((1, 3, 5, 5), np.float32))
    plain = run("check", model, "-t", "jetson-xavier", "--inputs", str(inputs))
    assert plain.returncode == 0, plain.stderr
    assert "warning: fp16-analysis skipped: onnxruntime" in plain.stdout
    strict = run("check", model, "-t", "jetson-xavier", "--inputs", str(inputs), "--strict", "--json")
    assert strict.returncode == 1, strict.stderr
    (skipped,) = json.loads(strict.stdout)["skipped_steps"]
    assert skipped["step"] == "fp16-analysis" and not skipped["asked"] and "onnxruntime" in skipped["reason"]
    ran = run("check", model, "-t", "jetson-xavier", "--strict")  # on drawn inputs it runs
    assert ran.returncode == 0 and "fp16:" in ran.stdout and "skipped" not in ran.stdout


def test_an_int8_guard_that_judged_nothing_is_a_skipped_step(tmp_path: Path) -> None:
    model = str(labels_model(tmp_path))
    flags = ["-t", "jetson-xavier", "--precision", "int8", "--calibration", str(tmp_path / "calibration")]
    plain = run("build", model, *flags, "-o", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "warning: int8-guard skipped: the model has no float output" in plain.stdout
    report = json.loads((tmp_path / "plain" / "report.json").read_text())
    assert report["precision"] == "int8" and report["exit_code"] == 0
    assert [step["step"] for step in report["skipped_steps"]] == ["int8-guard"]
    assert "## Skipped safety steps" in (tmp_path / "plain" / "report.md").read_text()
    strict = run("build", model, *flags, "-o", str(tmp_path / "strict"), "--strict")
    assert strict.returncode == 1 and "--strict: 1 safety step(s) skipped (int8-guard)" in strict.stdout
    report = json.loads((tmp_path / "strict" / "report.json").read_text())
    assert report["strict"] and report["exit_code"] == 1 and report["status"] == "pending-on-device"


def test_a_step_turned_off_by_its_flag_is_said_and_strict_accepts_it(tmp_path: Path) -> None:
    model = str(external_data_model(tmp_path))
    built = run("build", model, "-t", "jetson-xavier", "-o", str(tmp_path / "out"), "--no-fp16-analysis",
                "--strict")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "note: fp16-analysis skipped (as asked): --no-fp16-analysis" in built.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["skipped_steps"] == [{"step": "fp16-analysis", "asked": True,
                                        "reason": "--no-fp16-analysis: every layer builds in fp16"}]
