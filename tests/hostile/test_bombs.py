"""The fuzz suite of issue 49, one hostile file per class through the commands a user types: each
ends as a one-line error or a finding (exit 0, 1 or 2), never an internal error, a traceback,
or a process killed for memory or time. benchmarks/hostile/run.py runs every file of
bombs.py through every command and measures time and peak RSS; here the suite itself stays safe
on a 2-core machine: each command runs with a 3 GiB data limit of its own (above deploycc's
ceiling for these files, so that a run stopped by it is a failure of deploycc's budget, seen
as a signal or MemoryError) and a run time budget of a few seconds."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.bombs import Bomb, all_bombs, argv_for

CLI = (sys.executable, "-m", "deploycc.cli")
SAFETY_DATA_BYTES = 3 << 30
HANG_SECONDS = 240  # a hang guard, not a timing: each of these ends in seconds

# one file per class, each through the commands where it did harm (exit 3, a kill, a hang)
CHOSEN = {
    "many-tiles-concat": ("check", "build"),
    "tile-constant-1e12": ("legalize",),
    "range-int-1e12": ("build",),
    "loop-1e9-trips": ("check", "build"),
    "loop-1e9-trips-scan": ("check",),
    "input-2e40": ("build",),
    "input-5e9": ("legalize",),
    "npz-zip-bomb": ("build",),
    "npz-declares-2e40": ("build",),
    "npz-object-dtype": ("build",),
    "string-initializer": ("build",),
    "invalid-utf8-value-name": ("legalize",),
    "output-under-a-file": ("build",),
}


def _cases() -> list[tuple[Bomb, str]]:
    bombs = {bomb.name: bomb for bomb in all_bombs()}
    return [(bombs[name], command) for name, commands in CHOSEN.items() for command in commands]


def _safety_limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (SAFETY_DATA_BYTES, SAFETY_DATA_BYTES))


@pytest.mark.parametrize(("bomb", "command"), _cases(), ids=lambda case: getattr(case, "name", case))
def test_a_hostile_file_ends_in_a_documented_exit(bomb: Bomb, command: str, tmp_path: Path) -> None:
    path = bomb.write(tmp_path)
    argv = argv_for(bomb, path, command, tmp_path, CLI)
    env = {**os.environ, "DEPLOYCC_RUN_SECONDS": "4"}  # a Loop of 10^9 trips stops at 4 s
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_SECONDS,
        preexec_fn=_safety_limit,
    )
    assert done.returncode in (0, 1, 2), (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-2000:]
    if done.returncode == 2:  # a one-line error that says what
        errors = [line for line in done.stderr.splitlines() if line.startswith("deploycc: error: ")]
        assert len(errors) == 1, done.stderr[-2000:]


def test_the_budget_stops_what_would_outgrow_it(tmp_path: Path) -> None:
    """The ceiling is what stops a Loop growing a scan output, not the suite's limit: with the
    budget at 256 MiB, the fp16 analysis says it ran out of the budget, and the command's data
    stayed within it (its high-water mark, read by the parent, under the suite's limit)."""
    bombs = {bomb.name: bomb for bomb in all_bombs()}
    path = bombs["loop-1e9-trips-scan"].write(tmp_path)
    env = {**os.environ, "DEPLOYCC_MEMORY_BUDGET": str(256 << 20), "DEPLOYCC_RUN_SECONDS": "60"}
    log = tmp_path / "said.txt"
    with log.open("w") as out:
        child = subprocess.Popen(
            [*CLI, "check", str(path), "--target", "jetson-nano"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_safety_limit,
        )
        _, status, usage = os.wait4(child.pid, 0)  # its own high-water mark, not other tests' children
        child.returncode = os.waitstatus_to_exitcode(status)
    said = log.read_text()
    assert os.waitstatus_to_exitcode(status) in (0, 1), said[-2000:]
    assert "needed more memory than the budget allows" in said, said[-2000:]
    assert usage.ru_maxrss << 10 < 1 << 30  # its high-water mark: 256 MiB of budget and the libraries


@pytest.mark.parametrize("setting", [("--memory-budget", "lots"), ("env", "lots")])
def test_a_budget_that_is_no_size_is_a_one_line_error(setting: tuple[str, str], tmp_path: Path) -> None:
    path = {bomb.name: bomb for bomb in all_bombs()}["input-2e40"].write(tmp_path)
    flag, value = setting
    argv = [*CLI, *((flag, value) if flag != "env" else ()), "check", str(path), "--target", "ort-cpu"]
    env = {**os.environ, "DEPLOYCC_MEMORY_BUDGET": value} if flag == "env" else None
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=HANG_SECONDS)
    assert done.returncode == 2 and "not a size: 'lots'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_npz_member_that_is_no_array_is_sized_before_numpy_reads_it(tmp_path: Path, monkeypatch) -> None:
    """numpy hands a member whose name does not end in .npy back as its bytes, read whole: a few
    hundred KB of zip that inflate to 96 MiB, past a 64 MiB tensor budget, is refused first."""
    import zipfile

    from deploycc.budget import TooLarge
    from deploycc.verify.inputs import load_npz

    monkeypatch.setenv("DEPLOYCC_MEMORY_BUDGET", str(256 << 20))
    path = tmp_path / "raw.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x", bytes(96 << 20))
    assert path.stat().st_size < 1 << 20
    with pytest.raises(TooLarge, match="member 'x'"):
        load_npz(path)
