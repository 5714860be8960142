"""A build whose bundle ran on the (stand-in) board, for the device-import bombs: built once per
folder, copied for each bomb, so that each bomb edits its own copy's result or bundle files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BOARD = "board-build"


def _model(path: Path) -> Path:
    weights = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2) / 8, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [weights],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def board_build(folder: Path) -> Path:
    """OUTDIR of a jetson-xavier build whose bundle's runner ran here with ONNX Runtime standing
    in for TensorRT (bundle/result.json written), made once under `folder`."""
    outdir = folder / BOARD / "out"
    if (outdir / "bundle" / "result.json").is_file():
        return outdir
    shutil.rmtree(folder / BOARD, ignore_errors=True)
    (folder / BOARD).mkdir(parents=True)
    model = _model(folder / BOARD / "m.onnx")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "deploycc.cli",
            "build",
            str(model),
            "--target",
            "jetson-xavier",
            "-o",
            str(outdir),
            "--no-bench",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [
            sys.executable,
            str(outdir / "bundle" / "run_on_device.py"),
            "--engine",
            "onnxruntime",
            "--iterations",
            "3",
            "--warmup-s",
            "0",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return outdir


def copy_of_board_build(folder: Path, name: str) -> Path:
    copy = folder / f"{name}.out"
    shutil.copytree(board_build(folder), copy)
    return copy


def honest_result(outdir: Path) -> dict:
    return json.loads((outdir / "bundle" / "result.json").read_text())
