"""Running one cell in a child process with a timeout and a memory limit, and reading how the
child ended: a result, a crash (killed by a signal), a hang (timeout), or out of memory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.records.audit import CellResult, CellSpec
from deploycc.results import from_dict
from deploycc.taxonomy import CellStatus, Failure, Stage, says_out_of_memory

if TYPE_CHECKING:
    from deploycc.audit.zygote import Zygote

WORKER = (sys.executable, "-m", "deploycc.audit.worker")


def _limit_memory(limit_bytes: int | None):
    def apply() -> None:
        from deploycc.verify.runner import die_with_parent

        os.setsid()  # its own process group: a timeout kills the worker and anything it started
        die_with_parent()  # and an audit killed takes it along (its group is not the audit's)
        if limit_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def run_isolated(spec: CellSpec, *, timeout: float, memory_limit: int | None,
                 worker: Sequence[str] = WORKER, zygote: Zygote | None = None) -> CellResult:
    """The cell in a process of its own: forked from `zygote` (imports done) when there is one
    and the worker is deploycc's, else started as `worker`."""
    started = time.perf_counter()
    failed = CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED, stage=Stage.ISOLATION)
    try:
        forked = None
        if zygote is not None and tuple(worker) == WORKER:
            from deploycc.audit.zygote import ZygoteGone

            with tempfile.TemporaryDirectory(prefix="deploycc-cell-") as folder, \
                    contextlib.suppress(ZygoteGone):  # the zygote is gone: started as its own below
                forked = zygote.run(json.dumps(asdict(spec)), Path(folder), timeout=timeout,
                                    memory_limit=memory_limit)
        returncode, stdout, stderr = forked or _started(spec, timeout, memory_limit, worker)
    except TimeoutError:
        failed.category = Failure.TIMEOUT
        failed.message = f"no result after {timeout:g} s; the cell was killed"
        failed.seconds = round(time.perf_counter() - started, 3)
        return failed
    failed.seconds = round(time.perf_counter() - started, 3)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode == 0 and lines:
        data = json.loads(lines[-1])
        return from_dict(CellResult, data)
    tail = (stderr.strip().splitlines() or ["no message"])[-1][:300]
    if memory_limit and says_out_of_memory(stderr):
        failed.category = Failure.OUT_OF_MEMORY
        failed.message = f"exceeded the memory limit of {memory_limit >> 20} MiB: {tail}"
    elif returncode < 0:
        name = signal.Signals(-returncode).name
        failed.category, failed.message = Failure.BACKEND_CRASH, f"the cell's process died by {name}: {tail}"
    else:
        failed.category = Failure.BACKEND_CRASH
        failed.message = f"the cell's process exited {returncode}: {tail}"
    return failed


def _started(spec: CellSpec, timeout: float, memory_limit: int | None,
             worker: Sequence[str]) -> tuple[int, str, str]:
    """The worker started as a process of its own: (returncode, stdout, stderr), or TimeoutError
    once its process group is killed."""
    child = subprocess.Popen(list(worker), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_limit_memory(memory_limit))
    try:
        stdout, stderr = child.communicate(json.dumps(asdict(spec)), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise TimeoutError from None
    return child.returncode, stdout, stderr
