"""A cell started as a process of its own has its own process group (a timeout kills all it
started), so an audit killed would have left it running: it dies with the audit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

AUDIT = """
import subprocess, sys, time
from pathlib import Path
from deploycc.audit.isolate import _limit_memory

pid_file = Path(sys.argv[1])
body = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
cell = [sys.executable, "-c", body]
subprocess.Popen(cell, preexec_fn=_limit_memory(None))
for _ in range(600):
    if pid_file.exists() and pid_file.read_text():
        break
    time.sleep(0.05)
"""  # then the audit ends as a SIGKILL would end it: no clean-up of its own


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        state = next(line for line in status.read_text().splitlines() if line.startswith("State:"))
        return "\tZ" not in state
    except (FileNotFoundError, StopIteration):
        return False


def test_a_cell_in_a_process_of_its_own_dies_with_its_audit(tmp_path: Path) -> None:
    pid_file = tmp_path / "cell.pid"
    audit = AUDIT + "\nimport os; os._exit(0)"
    subprocess.run([sys.executable, "-c", audit, str(pid_file)], timeout=60, check=True)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the cell outlived its audit"
