"""A file given where an .npz is taken (--inputs, --calibration) that is not one: a truncated
archive or a text file is a one-line error naming the file, exit 2, in every command that reads one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx.parser
import pytest

from tests.cli.test_cli import run

RELU = """
<ir_version: 10, opset_import: ["" : 17]>
g (float[2,8] x) => (float[2,8] y) { y = Relu(x) }
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(RELU), model)
    good = tmp_path / "good.npz"
    np.savez(good, x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # a copy cut short
    text = tmp_path / "text.npz"
    text.write_text("x = 1, 2, 3\n")
    return {"model": model, "truncated": truncated, "text": text}


def _refused_as_not_npz(result, file: Path) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{file}: not a valid .npz" in lines[0] and "pickle" not in lines[0], lines[0]


def test_legalize_inputs(files: dict[str, Path], tmp_path: Path) -> None:
    for kind in ("truncated", "text"):
        result = run("legalize", str(files["model"]), "-t", "ort-cpu", "-o", str(tmp_path / f"{kind}.onnx"),
                     "--inputs", str(files[kind]))
        _refused_as_not_npz(result, files[kind])


def test_build_inputs(files: dict[str, Path], tmp_path: Path) -> None:
    result = run("build", str(files["model"]), "-t", "ort-cpu", "-o", str(tmp_path / "out"),
                 "--inputs", str(files["truncated"]))
    _refused_as_not_npz(result, files["truncated"])


def test_build_calibration(files: dict[str, Path], tmp_path: Path) -> None:
    samples = tmp_path / "calibration"
    samples.mkdir()
    (samples / "000.npz").write_bytes(files["truncated"].read_bytes())
    result = run("build", str(files["model"]), "-t", "ort-cpu", "-o", str(tmp_path / "out"),
                 "--precision", "int8", "--calibration", str(samples))
    _refused_as_not_npz(result, samples / "000.npz")


def test_run_inputs(files: dict[str, Path], tmp_path: Path) -> None:
    result = run("run", str(tmp_path), "--inputs", str(files["text"]))
    _refused_as_not_npz(result, files["text"])
