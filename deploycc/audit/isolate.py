"""Running one cell in a child process with a timeout and a memory limit, and reading how the
child ended: a result, a crash (killed by a signal), a hang (timeout), or out of memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict

from deploycc.records.audit import CellResult, CellSpec
from deploycc.results import from_dict
from deploycc.taxonomy import CellStatus, Failure, Stage

WORKER = (sys.executable, "-m", "deploycc.audit.worker")
OOM_MARKERS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory", "std::bad_alloc")


def _limit_memory(limit_bytes: int | None):
    def apply() -> None:
        os.setsid()  # its own process group: a timeout kills the worker and anything it started
        if limit_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def run_isolated(spec: CellSpec, *, timeout: float, memory_limit: int | None,
                 worker: Sequence[str] = WORKER) -> CellResult:
    started = time.perf_counter()
    failed = CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED, stage=Stage.ISOLATION)
    child = subprocess.Popen(list(worker), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_limit_memory(memory_limit))
    try:
        stdout, stderr = child.communicate(json.dumps(asdict(spec)), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        failed.category = Failure.TIMEOUT
        failed.message = f"no result after {timeout:g} s; the cell was killed"
        failed.seconds = round(time.perf_counter() - started, 3)
        return failed
    failed.seconds = round(time.perf_counter() - started, 3)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if child.returncode == 0 and lines:
        data = json.loads(lines[-1])
        return from_dict(CellResult, data)
    tail = (stderr.strip().splitlines() or ["no message"])[-1][:300]
    if memory_limit and any(marker in stderr for marker in OOM_MARKERS):
        failed.category = Failure.OUT_OF_MEMORY
        failed.message = f"exceeded the memory limit of {memory_limit >> 20} MiB: {tail}"
    elif child.returncode < 0:
        name = signal.Signals(-child.returncode).name
        failed.category, failed.message = Failure.BACKEND_CRASH, f"the cell's process died by {name}: {tail}"
    else:
        failed.category = Failure.BACKEND_CRASH
        failed.message = f"the cell's process exited {child.returncode}: {tail}"
    return failed
