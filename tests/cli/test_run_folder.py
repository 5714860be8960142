"""`deploycc run FOLDER`: FOLDER is the output directory of `build --partition` or its segments/;
any other folder is one line saying what `run` takes (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tests.cli.test_cli import run
from tests.pipeline.test_partition import _save, scaler_in_the_middle


def test_run_takes_the_build_folder_itself(tmp_path: Path) -> None:
    model = _save(tmp_path, scaler_in_the_middle(), "middle.onnx")
    built = run("build", str(model), "-t", "ort-cpu", "-o", str(tmp_path / "out"), "--partition", "--json")
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["segments"]
    assert (tmp_path / "out" / "segments" / "pipeline.json").is_file()
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    ran = run("run", str(tmp_path / "out"), "--inputs", str(tmp_path / "in.npz"),
              "-o", str(tmp_path / "y.npz"))
    assert ran.returncode == 0, ran.stderr
    assert "y: float32 [1, 4, 8, 8]" in ran.stdout
    with np.load(tmp_path / "y.npz") as outputs:
        expected = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
        np.testing.assert_allclose(outputs["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_folder_without_a_pipeline_says_what_run_takes(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4, 8, 8), np.float32))
    (tmp_path / "plain").mkdir()
    refused = run("run", str(tmp_path / "plain"), "--inputs", str(tmp_path / "in.npz"))
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Errno" not in lines[0] and "Traceback" not in refused.stderr, lines
    assert "not a partitioned model" in lines[0] and "build --partition" in lines[0], lines[0]
