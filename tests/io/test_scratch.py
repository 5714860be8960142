"""Scratch folders: in memory when there is room, on disk when the files would not fit, and a
folder left in memory by a killed process is removed by the next one made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploycc.io import files, scratch_folder


@pytest.fixture
def ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ram"
    folder.mkdir()
    monkeypatch.setattr(files, "RAM_FOLDER", folder)
    return folder


def test_small_files_go_to_memory_and_are_removed_after(ram: Path) -> None:
    with scratch_folder("probe-", size=1 << 20) as made:
        assert Path(made).parent == ram
        assert Path(made).name.startswith(f"{files.SCRATCH_MARK}{os.getpid()}-probe-")
        (Path(made) / "x.bin").write_bytes(b"0" * 1024)
    assert not Path(made).exists()


def test_files_larger_than_memory_go_to_disk(ram: Path) -> None:
    with scratch_folder("probe-", size=1 << 60) as made:
        assert Path(made).parent != ram and Path(made).is_dir()


def test_a_dead_process_folder_is_removed_a_live_one_kept(ram: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = ram / f"{files.SCRATCH_MARK}{int(child.stdout)}-left"
    live = ram / f"{files.SCRATCH_MARK}{os.getpid()}-mine"
    other = ram / "not-ours"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "f").write_bytes(b"x")
    with scratch_folder("probe-", size=0):
        pass
    assert not dead.exists()
    assert live.exists() and other.exists()
