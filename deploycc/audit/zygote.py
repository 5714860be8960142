"""A process that has imported what a cell needs once, and forks a child per cell: the child has
its own process (group, memory limit, crash and timeout as before) without paying for the imports
again (onnx, onnx_ir, sympy, ONNX Runtime, OpenVINO and deploycc's passes: seconds per cell, a
third of a small model's cell).

    python -m deploycc.audit.zygote [--torch]      (started by Zygote; requests on stdin)

Protocol, one JSON object per line. In: {"id": N, "spec": FILE, "out": FILE, "err": FILE,
"memory": BYTES or null}. Out: {"id": N, "pid": PID} once the child runs, then {"pid": PID,
"code": C} when it ended (C as subprocess's returncode: negative for a signal). The child reads
its spec from FILE, and writes what the worker prints to "out" and "err".

Where processes cannot fork (not POSIX), or the zygote cannot start, cells start as processes
of their own (isolate.py); so they do with DEPLOYCC_NO_ZYGOTE=1 in the environment.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# What every cell imports; torch too for an audit of torch models. OpenVINO and ONNX Runtime are
# imported, not started: no session, core or thread pool exists before the fork.
PRELOAD = ("numpy", "onnx", "onnx_ir", "onnxscript", "sympy", "onnxruntime", "openvino",
           "deploycc.audit.worker", "deploycc.pipeline.build", "deploycc.pipeline.legalize",
           "deploycc.analysis.check", "deploycc.rules.catalog", "deploycc.verify.verification",
           "deploycc.backends.onnxruntime", "deploycc.backends.openvino", "deploycc.report.markdown")
TORCH_PRELOAD = ("torch", "deploycc.frontend.build", "deploycc.frontend.sources")


def _preload(names: tuple[str, ...]) -> None:
    for name in names:
        with contextlib.suppress(Exception):  # an optional backend not installed: imported by the cell
            importlib.import_module(name)


def _child(request: dict[str, Any], closing: list[int]) -> None:
    """In the forked child: a process group and memory limit of its own, the spec on stdin and
    the worker's output in the files asked, then the worker. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.setsid()
        with contextlib.suppress(Exception):  # a zygote gone (its audit killed) takes its cells along
            from deploycc.verify.runner import die_with_parent

            die_with_parent()
        if request.get("memory"):
            import resource

            from deploycc.bench.memory import address_space_bytes

            # The limit is on what the cell adds: the address space the zygote mapped before it
            # (torch's libraries and arenas: 3.7 GB, shared copy-on-write, not the cell's) is on top.
            # Counted in, it left ConvNeXt-L's export 8 of a 12 GiB limit, and it ran out.
            limit = request["memory"] + (address_space_bytes() or 0)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for fd, path, flags in ((0, request["spec"], os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        # fresh stream objects: the zygote's own may hold a lock or a buffer from before the fork
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        with contextlib.suppress(Exception):  # else the cell starts its ORT process when it needs one
            from deploycc.verify import runner

            runner.start_forked_ort_process()
        from deploycc.audit import worker

        worker.main()
        sys.stdout.flush()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The zygote's loop: fork a child per request, report each child's end."""
    _preload(PRELOAD + (TORCH_PRELOAD if "--torch" in sys.argv else ()))
    woken_r, woken_w = os.pipe()
    os.set_blocking(woken_w, False)
    signal.set_wakeup_fd(woken_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "request")
    selector.register(woken_r, selectors.EVENT_READ, "child")
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    open_requests, pending = True, b""
    running, children = 0, set[int]()
    while open_requests or running:
        for key, _ in selector.select():
            if key.data == "request":
                chunk = os.read(0, 65536)  # unbuffered: a line left in a buffer would never wake select
                if not chunk:
                    selector.unregister(0)
                    open_requests = False
                    # the audit waits for its cells before it lets go of the zygote: cells still
                    # running mean it died (killed, interrupted), and nobody would end them at
                    # their timeout
                    for child in children:  # the cell and what it started; itself if no group yet
                        for kill in (os.killpg, os.kill):
                            with contextlib.suppress(OSError):
                                kill(child, signal.SIGKILL)
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _child(request, [woken_r, woken_w, selector.fileno()])  # type: ignore[attr-defined]
                    running += 1
                    children.add(pid)
                    out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
                    out.flush()
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(woken_r, 4096)
                while running:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        running = 0
                        break
                    if pid == 0:
                        break
                    running -= 1
                    children.discard(pid)
                    out.write(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")
                    out.flush()


class ZygoteGone(Exception):
    """The zygote ended (killed, or out of memory): cells are started as processes of their own."""


class _Cell:
    def __init__(self) -> None:
        self.pid: int | None = None
        self.code: int | None = None
        self.started = threading.Event()
        self.ended = threading.Event()


class Zygote:
    """The parent's side: `run(spec_json, ...)` from any thread returns (returncode, stdout,
    stderr) as subprocess would, or raises TimeoutError after killing the child's group."""

    def __init__(self, torch: bool = False) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "deploycc.audit.zygote",
                                          *(["--torch"] if torch else [])],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None and self._process.stdin is not None
        self._replies: IO[str] = self._process.stdout
        self._requests: IO[str] = self._process.stdin
        first = self._replies.readline()
        if not first.startswith('{"ready"'):
            self._process.kill()
            raise OSError("the audit's zygote did not start")
        self._lock = threading.Lock()
        self._next = 0
        self._by_id: dict[int, _Cell] = {}
        self._by_pid: dict[int, _Cell] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._replies:
            reply = json.loads(line)
            with self._lock:
                if "id" in reply:
                    cell = self._by_id.pop(reply["id"])
                    cell.pid = reply["pid"]
                    self._by_pid[cell.pid] = cell
                    cell.started.set()
                else:
                    cell = self._by_pid.pop(reply["pid"])
                    cell.code = reply["code"]
                    cell.ended.set()
        with self._lock:  # the zygote died: no cell waiting will hear of its child
            for cell in [*self._by_id.values(), *self._by_pid.values()]:
                cell.code = cell.code if cell.code is not None else -int(signal.SIGKILL)
                cell.started.set()
                cell.ended.set()

    def run(self, spec_json: str, folder: Path, *, timeout: float,
            memory_limit: int | None) -> tuple[int, str, str]:
        """Raises ZygoteGone when the zygote is gone (the caller starts the cell itself)."""
        spec, out, err = folder / "spec.json", folder / "stdout", folder / "stderr"
        spec.write_text(spec_json)
        cell = _Cell()
        with self._lock:
            self._next += 1
            self._by_id[self._next] = cell
            try:
                self._requests.write(json.dumps({"id": self._next, "spec": str(spec), "out": str(out),
                                                 "err": str(err), "memory": memory_limit}) + "\n")
                self._requests.flush()
            except (OSError, ValueError):  # a broken pipe, or closed
                self._by_id.pop(self._next, None)
                raise ZygoteGone from None
        if not cell.started.wait(timeout) or not cell.ended.wait(timeout):
            if cell.pid is not None:
                for kill in (os.killpg, os.kill):  # its group, and itself if it has none yet
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(cell.pid, signal.SIGKILL)
                cell.ended.wait()
            raise TimeoutError
        return int(cell.code if cell.code is not None else 1), _text(out), _text(err)

    def close(self) -> None:  # no more requests: the zygote ends once its children have
        with contextlib.suppress(OSError):
            self._requests.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def zygote(torch: bool = False) -> Iterator[Zygote | None]:
    """A zygote for the audit's cells, or None where it cannot run (no fork, or it did not start)."""
    if not hasattr(os, "fork") or os.environ.get("DEPLOYCC_NO_ZYGOTE"):
        yield None
        return
    try:
        started: Zygote | None = Zygote(torch)
    except OSError:
        started = None
    try:
        yield started
    finally:
        if started is not None:
            started.close()


if __name__ == "__main__":
    try:
        serve()
    except BrokenPipeError:  # the audit went away (killed, interrupted): nobody is left to tell
        os._exit(0)
