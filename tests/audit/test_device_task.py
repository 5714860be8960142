"""The on-board half of a Ray TensorRT cell, without Ray: the bundle's tar is unpacked safely and
a runner that dies leaves an error with its reason, not a hung or crashed task."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

from deploycc.device.ray_task import run_bundle, unpack
from deploycc.io import tar_folder


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_unpack_refuses_members_outside_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsafe"):
        unpack(_tar({"bundle/../../evil.txt": b"x"}), str(tmp_path / "into"))
    assert not (tmp_path / "evil.txt").exists()
    with pytest.raises(ValueError, match="outside"):
        unpack(_tar({"other/file": b"x"}), str(tmp_path / "into"), strip="bundle")


def test_a_folder_round_trips_through_its_tar(tmp_path: Path) -> None:
    source = tmp_path / "KEY"
    (source / "bundle").mkdir(parents=True)
    (source / "bundle" / "model.onnx").write_bytes(b"\x08\x07")
    (source / "report.json").write_text("{}")
    unpack(tar_folder(source), str(tmp_path / "copy"), strip="KEY")
    assert (tmp_path / "copy" / "bundle" / "model.onnx").read_bytes() == b"\x08\x07"
    assert (tmp_path / "copy" / "report.json").read_text() == "{}"


def test_a_runner_killed_on_the_board_is_an_error_with_its_exit(tmp_path: Path) -> None:
    """As when the board's OOM killer ends the runner: no result.json, and the task says so."""
    killed = (b"import os, signal, sys\nsys.stderr.write('building the engine\\n')\n"
              b"os.kill(os.getpid(), signal.SIGKILL)\n")
    outcome = run_bundle(_tar({"bundle/run_on_device.py": killed}), engine="tensorrt", iterations=1,
                         timeout=60, python=sys.executable)
    assert "result" not in outcome
    assert outcome["error"] == "the runner left no result (exit -9): building the engine"
    hung = b"import time\ntime.sleep(60)\n"
    outcome = run_bundle(_tar({"bundle/run_on_device.py": hung}), engine="tensorrt", iterations=1,
                         timeout=1, python=sys.executable)
    assert outcome["error"] == "the runner did not finish in 1 s"
