"""A SIGTERM ends a command with exit 130 however the error it raises comes back: Python wraps an
exception raised while a class is being made (a dataclass field's __set_name__) in a RuntimeError,
which once surfaced as "internal error" (exit 3); a stage that catches the wrapped error as its own
failure once made it a failed build (exit 1); and the interpreter's teardown with a runtime's
threads still busy once crashed (SIGSEGV)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from deploycc.cli import main as entry

    def command(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt as interrupt:
            if sys.argv[1] == "wrapped":
                raise RuntimeError("Error calling __set_name__") from interrupt
            return 1  # caught as a stage's failure: the command would have said "failed"
        return 0

    entry.cli.main = command
    entry.main(["build", "model.onnx"])
""")


@pytest.mark.parametrize("how", ["wrapped", "swallowed"])
def test_a_sigterm_that_comes_back_as_another_error_still_exits_130(how: str) -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT, how], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 130, (run.returncode, run.stderr)
    assert "terminated by signal 15" in run.stderr and "internal error" not in run.stderr
