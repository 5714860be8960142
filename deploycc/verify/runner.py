"""Running a model on ONNX Runtime CPU, the reference for every verification.

When ORT has no kernel for an op (a rewrite's *original* node may be exactly that), the onnx
package's reference evaluator is the fallback, and the result says which one ran.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.budget import return_freed_memory
from deploycc.taxonomy import Failed
from deploycc.verify.exact import EXACT, with_exact_integers

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

ORT = "onnxruntime"
REFERENCE = "onnx.reference"


class RunError(Exception):
    """The model could not be run by any reference runtime; the message says why. `stage` says
    where (taxonomy.Failed: RUN, CRASH, else LOAD)."""

    def __init__(self, message: str, stage: Failed = Failed.LOAD) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    runtime: str


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(error).__name__


def as_arrays(outputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Outputs that are not tensors, as arrays that compare like them: a sequence of maps (a
    scikit-learn classifier's ZipMap probabilities) as rows of values in key order, a map as its
    values in key order, a sequence of tensors as one stacked array (or one entry per element
    when their shapes differ)."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    for name, value in outputs.items():
        if isinstance(value, dict):
            arrays[name] = np.asarray([value[key] for key in sorted(value)])
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            arrays[name] = np.asarray([[row[key] for key in sorted(row)] for row in value])
        elif isinstance(value, list):
            shapes = {np.shape(item) for item in value}
            if len(shapes) <= 1:
                arrays[name] = np.asarray(value)
            else:
                arrays.update({f"{name}[{index}]": np.asarray(item) for index, item in enumerate(value)})
        else:
            arrays[name] = np.asarray(value)
    return arrays


# The threads a session asked with 0 (all cores) takes where cells run side by side (an audit sets
# it to its share of the cores): two cells of two threads each on two cores ran the fp16
# emulation of a large model at half the speed of one thread each.
THREADS_ENV = "DEPLOYCC_SESSION_THREADS"


def session(source: bytes | Path, *, optimize: bool = False, threads: int = 1,
            exact: bool | None = None, integer_ops: bool = True) -> Any:
    """An ORT CPU session. Proofs (`optimize` off) run the ops as written, not ORT's fused versions
    of them, and integer ops as the spec defines them (exact.py); so does every run inside
    `exact_integers(True)` (a model bound for a GPU), optimized short of the Q/DQ fusion.
    `threads` 0: ORT's default, all cores (or THREADS_ENV's share of them). `integer_ops` False:
    the caller knows the model has no op exact.py rewrites (exact.has_integer_ops)."""
    import onnxruntime as ort

    exact = EXACT.get() if exact is None else exact
    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    options.intra_op_num_threads = threads or int(os.environ.get(THREADS_ENV) or 0)
    options.inter_op_num_threads = 1
    # An allocation that fails past the memory ceiling (budget.py) raises std::bad_alloc cleanly
    # from plain malloc; ORT's arena aborted the process instead (an assertion in
    # BFCArena::RemoveFreeChunkFromBin, on a Loop growing a scan output to the ceiling).
    options.enable_cpu_mem_arena = False
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif exact:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if (exact or not optimize) and integer_ops:
        source = with_exact_integers(source)
    model = source if isinstance(source, bytes) else str(source)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run_session(loaded: Any, feeds: dict[str, np.ndarray], seconds: float | None = None
                ) -> dict[str, np.ndarray]:
    """The session's outputs on the feeds, within the run time budget (a Loop of 10^9 trips is
    stopped) and the memory ceiling (an allocation that fails is budget.TooLarge, not a crash);
    `seconds` in place of budget.run_seconds() (a process that has not read the model)."""
    import onnxruntime as ort

    from deploycc import budget

    names = [o.name for o in loaded.get_outputs()]
    wanted = {i.name for i in loaded.get_inputs()}
    options = ort.RunOptions()
    with budget.Deadline(options, seconds) as deadline:
        try:
            results = loaded.run(names, {k: v for k, v in feeds.items() if k in wanted}, options)
        except Exception as error:
            if deadline.expired:
                raise budget.over_time("running the model on ONNX Runtime", deadline.seconds) from None
            if budget.says_out_of_memory(error):
                raise budget.out_of_memory("running the model on ONNX Runtime") from None
            raise
    return as_arrays(dict(zip(names, results, strict=True)))


def run_ort(source: bytes | Path, feeds: dict[str, np.ndarray], *, optimize: bool = False,
            threads: int = 1) -> dict[str, np.ndarray]:
    return run_session(session(source, optimize=optimize, threads=threads), feeds)


def run_reference(source: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx
    from onnx.reference import ReferenceEvaluator

    proto = onnx.load_from_string(source)
    evaluator = ReferenceEvaluator(proto)
    names = [o.name for o in proto.graph.output]
    results = evaluator.run(names, feeds)
    return dict(zip(names, results, strict=True))


def run_model_bytes(source: bytes, feeds: dict[str, np.ndarray], *, valid: bool = False) -> RunResult:
    """Run on ORT CPU (no graph optimizations); fall back to the onnx reference evaluator. With
    `valid`, a graph ORT finds invalid (a type its opset does not allow) is an error, not a case
    for the reference evaluator, which does not check types."""
    try:
        return RunResult(run_ort(source, feeds), ORT)
    except Exception as ort_error:  # ORT raises its own exception types for missing kernels
        if valid and "INVALID_GRAPH" in str(ort_error):
            raise RunError(f"onnxruntime: {_first_line(ort_error)}") from None
        try:
            return RunResult(run_reference(source, feeds), REFERENCE)
        except Exception as reference_error:
            raise RunError(f"onnxruntime: {_first_line(ort_error)}; onnx.reference: "
                           f"{_first_line(reference_error)}") from None


def serialize(model: ir.Model) -> bytes:
    from deploycc import io

    return io.to_proto(model).SerializeToString()


def _without_objects(array: np.ndarray) -> np.ndarray:
    """A STRING tensor (ORT's object array of str) as numpy's fixed-width text, which an .npz
    holds without pickling (the files between the processes are read with allow_pickle off)."""
    return array.astype(str) if array.dtype == object else array


def _run_job(model: str, feeds_file: str, out_file: str, optimize: bool, exact: bool,
             seconds: float) -> tuple[int, str]:
    """In the ORT process: the model on the feeds, outputs saved to `out_file`; (0, "") or the
    exit code of the stage that failed (3 load, 4 run) and the error's first line."""
    import json

    import numpy as np

    with np.load(feeds_file, allow_pickle=False) as archive:
        feeds = {name: archive[name] for name in archive.files}
    try:
        loaded = session(Path(model), optimize=optimize, threads=0, exact=exact)
    except Exception as error:
        return 3, _first_line(error)
    try:
        outputs = run_session(loaded, feeds, seconds)
    except Exception as error:
        return 4, _first_line(error)
    names = list(outputs)
    np.savez(out_file, **{f"o{i}": _without_objects(outputs[name]) for i, name in enumerate(names)})  # type: ignore[arg-type]
    Path(out_file + ".json").write_text(json.dumps(names))
    return 0, ""


def _probe_job(model: str, out_file: str, stop_at_first: bool, feeds_files: list[str],
               seconds: float) -> tuple[int, str]:
    """In the ORT process: per set of feeds, "" when some output carries a signal, else why not,
    written to `out_file` as each set is judged; (3, why) when the model does not load."""
    import json

    import numpy as np

    from deploycc.verify.compare import degenerate_outputs

    try:
        loaded = session(Path(model), optimize=True, threads=0)
    except Exception as error:
        return 3, _first_line(error)
    verdicts = []
    for feeds_file in feeds_files:
        with np.load(feeds_file, allow_pickle=False) as archive:
            feeds = {name: archive[name] for name in archive.files}
        try:
            flat = degenerate_outputs(run_session(loaded, feeds, seconds))
            reasons = "; ".join(f"{name} {why}" for name, why in flat.items())
            verdict = f"no signal: {reasons}" if reasons else ""
        except Exception as error:
            verdict = "fails: " + _first_line(error)
        verdicts.append(verdict)
        Path(out_file).write_text(json.dumps(verdicts))
        if stop_at_first and not verdict:
            break
    return 0, ""


JOBS: dict[str, Callable[..., tuple[int, str]]] = {"run": _run_job, "probe": _probe_job}


def serve() -> None:
    """The ORT process's loop (`python -c 'from deploycc.verify.runner import serve; serve()'`):
    one JSON request per line on stdin ({"job": NAME, "args": [...]}), one JSON reply per line
    ({"code": C, "error": LINE}); ends when stdin does."""
    import json
    import sys

    # what a library prints, Python's or C++'s, goes where stderr goes, never into the replies
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        request = json.loads(line)
        try:
            code, error = JOBS[request["job"]](*request["args"])
        except Exception as failure:  # a bad request file: this job fails, the process goes on
            code, error = 5, _first_line(failure)
        replies.write(json.dumps({"code": code, "error": error}) + "\n")
        replies.flush()
        return_freed_memory()  # it waits for the rest of a build (held 1.7 GB of a 2.4 GB decoder's run)


def die_with_parent() -> None:
    """Linux: this process (a child, called in it) is killed when its parent dies: an ORT process
    or an audit's cell is not left behind by a deploycc killed, SIGKILL included."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# what a run stopped by its deadline says (budget.over_time), from the ORT process too
OVER_TIME = "running the model on ONNX Runtime did not finish"
LOAD_SECONDS = 60  # what an isolated run may take beyond the run itself: starting, loading the model
ENDED = 6  # the ORT process ended without answering (it could not start: a memory limit, ...)


class _OrtProcess:
    """One ORT process, kept between runs: starting Python and ONNX Runtime costs more than a
    small model's run (0.6 s of the 0.7 s a verification took). A run that crashes or hangs it
    ends it; the next run starts another."""

    def __init__(self, forked: bool = False) -> None:
        import subprocess
        import sys

        self.process: Any = _Forked() if forked else subprocess.Popen(
            [sys.executable, "-c", "from deploycc.verify.runner import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            preexec_fn=die_with_parent)

    def ask(self, job: str, args: list[Any], timeout: float) -> tuple[int, str]:
        """(code, error line): 0 done, 3 load, 4 run, 5 bad request, ENDED; a negative code, the
        signal that killed the process. TimeoutError (the process killed) when it did not answer in time."""
        import json
        import select

        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps({"job": job, "args": args}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._ended()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise TimeoutError
        line = self.process.stdout.readline()
        if not line:
            return self._ended()
        reply = json.loads(line)
        return int(reply["code"]), str(reply["error"])

    def _ended(self) -> tuple[int, str]:
        code = self.process.wait()
        if code < 0:
            return code, ""
        return ENDED, f"the ONNX Runtime process exited {code} without answering"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


class _Forked:
    """The ORT process as a fork of this one, serving on pipes: what Popen gives the class above
    (stdin, stdout, poll, wait, kill), without starting Python and importing ONNX Runtime again
    (0.18 s, once per audit cell)."""

    def __init__(self) -> None:
        import sys

        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the ORT process
            code = 1
            try:
                os.dup2(to_child, 0)
                os.dup2(from_child, 1)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
                for fd in (to_child, from_parent, to_parent, from_child):
                    os.close(fd)
                die_with_parent()
                sys.stdin = open(0, closefd=False)  # a fresh stream: the parent's may hold a buffer
                serve()
                code = 0
            finally:
                os._exit(code)
        os.close(to_child)
        os.close(from_child)
        self.stdin = os.fdopen(from_parent, "w")
        self.stdout = os.fdopen(to_parent, "r")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        import signal

        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


_idle: list[_OrtProcess] = []
_idle_lock = threading.Lock()


def start_forked_ort_process() -> None:
    """Start the ORT process the next isolated run will ask, as a fork of this one. Only for a
    process that has imported ONNX Runtime and has no thread yet (an audit's cell, just forked by
    the zygote): a fork copies only the thread that calls it, and ORT's thread pools would be
    left without theirs. A process started later, after a crash, is a Python of its own."""
    worker = _OrtProcess(forked=True)
    with _idle_lock:
        _idle.append(worker)


def _in_ort_process(job: str, args: list[Any], timeout: float) -> tuple[int, str]:
    """`job` in an idle ORT process (one is started when none is idle: runs from two threads go
    side by side), which is kept for the next job unless this one ended it."""
    with _idle_lock:
        while _idle and not _idle[-1].alive:  # ended while idle (killed from outside)
            _idle.pop().close()
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _OrtProcess()
    try:
        code, error = worker.ask(job, args, timeout)
    except TimeoutError:
        raise RunError(f"onnxruntime did not finish in {timeout:g} s", stage=Failed.CRASH) from None
    if worker.alive:
        with _idle_lock:
            _idle.append(worker)
    return code, error


def _close_idle() -> None:
    with _idle_lock:
        while _idle:
            _idle.pop().close()


atexit.register(_close_idle)


def run_ort_isolated(source: bytes | Path, feeds: dict[str, np.ndarray], *, optimize: bool = True,
                     timeout: float | None = None) -> dict[str, np.ndarray]:
    """run_ort in a separate process: a model that crashes ONNX Runtime (it segfaults on some
    malformed-but-checker-valid models, found by tests/hostile/test_fuzz.py) fails this call
    with RunError instead of killing deploycc. The run may take `timeout` seconds, by default
    the budget's (budget.run_seconds), and the process a minute more to load the model."""
    import json

    import numpy as np

    from deploycc import budget, io

    size = sum(array.nbytes for array in feeds.values()) + (len(source) if isinstance(source, bytes) else 0)
    with io.scratch_folder("deploycc-ort-", size) as folder:
        work = Path(folder)
        model = work / "model.onnx"
        if isinstance(source, bytes):
            model.write_bytes(source)
        else:
            model = source
        np.savez(work / "feeds.npz", **{name: _without_objects(a) for name, a in feeds.items()})  # type: ignore[arg-type]
        out = str(work / "outputs.npz")
        seconds = budget.run_seconds() if timeout is None else timeout
        code, error = _in_ort_process("run", [str(model), str(work / "feeds.npz"), out, optimize,
                                              EXACT.get(), seconds], seconds + LOAD_SECONDS)
        if code < 0:
            raise RunError(f"onnxruntime crashed on this model (its process died by signal {-code})",
                           stage=Failed.CRASH)
        if code == ENDED:  # says nothing of the model
            raise RunError(error, stage=Failed.CRASH)
        if code in (3, 4) and budget.says_out_of_memory(error):
            raise budget.out_of_memory("loading the model in ONNX Runtime" if code == 3 else
                                       "running the model on ONNX Runtime")
        if code == 4 and error.startswith(OVER_TIME):
            raise budget.over_time("running the model on ONNX Runtime", seconds)
        if code != 0:
            raise RunError(error or f"onnxruntime exited {code}",
                           stage=Failed.RUN if code == 4 else Failed.LOAD)
        names = json.loads(Path(out + ".json").read_text())
        with np.load(out, allow_pickle=False) as archive:
            return {name: archive[f"o{i}"] for i, name in enumerate(names)}


def probe_inputs(source: Path, feed_sets: list[dict[str, np.ndarray]], *, stop_at_first: bool = True,
                 timeout: float | None = None) -> list[str]:
    """Run the model on ORT CPU (in a child process, one session) on each set of inputs in turn:
    per set "" when it ran and some floating-point output carries a signal, else why not ("fails:
    ...", "no signal: ..."). With `stop_at_first` the list ends at the first good set. A model
    ORT cannot load, or a crash, is a RunError (stage "load" or "crash")."""
    import json

    import numpy as np

    from deploycc import budget, io

    size = sum(array.nbytes for feeds in feed_sets for array in feeds.values())
    with io.scratch_folder("deploycc-probe-", size) as folder:
        work = Path(folder)
        files = []
        for index, feeds in enumerate(feed_sets):
            files.append(str(work / f"feeds{index}.npz"))
            np.savez(files[-1], **{name: _without_objects(a) for name, a in feeds.items()})  # type: ignore[arg-type]
        out = work / "verdicts.json"
        seconds = budget.run_seconds() if timeout is None else timeout
        code, error = _in_ort_process("probe", [str(source), str(out), stop_at_first, files, seconds],
                                      seconds * len(feed_sets) + LOAD_SECONDS)
        if code == 3:
            raise RunError(error or "onnxruntime cannot load the model")
        if code == ENDED:
            raise RunError(error, stage=Failed.CRASH)
        verdicts: list[str] = json.loads(out.read_text()) if out.exists() else []
        if code != 0:  # died on the set after the last verdict written
            if len(verdicts) >= len(feed_sets):
                return verdicts
            verdicts.append(f"fails: onnxruntime crashed (exit {code})")
            if code < 0 and len(verdicts) == 1:
                raise RunError("onnxruntime crashed on this model", stage=Failed.CRASH)
        return verdicts
