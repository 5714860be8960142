"""Running a model on ONNX Runtime CPU, the reference for every verification.

When ORT has no kernel for an op (a rewrite's *original* node may be exactly that), the onnx
package's reference evaluator is the fallback, and the result says which one ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.verify.exact import EXACT, with_exact_integers

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

ORT = "onnxruntime"
REFERENCE = "onnx.reference"


class RunError(Exception):
    """The model could not be run by any reference runtime; the message says why. `stage` is
    "run" when the runtime loaded the model and failed on the inputs it was given, "crash" when
    the runtime's process died or hung (which says nothing of the model's validity), else "load"."""

    def __init__(self, message: str, stage: str = "load") -> None:
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


def session(source: bytes | Path, *, optimize: bool = False, threads: int = 1,
            exact: bool | None = None) -> Any:
    """An ORT CPU session. Proofs (`optimize` off) run the ops as written, not ORT's fused versions
    of them, and integer ops as the spec defines them (exact.py); so does every run inside
    `exact_integers(True)` (a model bound for a GPU), optimized short of the Q/DQ fusion."""
    import onnxruntime as ort

    exact = EXACT.get() if exact is None else exact
    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif exact:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if exact or not optimize:
        source = with_exact_integers(source)
    model = source if isinstance(source, bytes) else str(source)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run_session(loaded: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in loaded.get_outputs()]
    wanted = {i.name for i in loaded.get_inputs()}
    results = loaded.run(names, {k: v for k, v in feeds.items() if k in wanted})
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


_CHILD = """
import json, sys
import numpy as np
from pathlib import Path
from deploycc.verify.runner import run_session, session
model, feeds_file, out_file, optimize, exact = sys.argv[1:6]
with np.load(feeds_file, allow_pickle=False) as archive:
    feeds = {name: archive[name] for name in archive.files}

def fail(error, code):
    lines = str(error).strip().splitlines()
    sys.stderr.write((lines[0] if lines else type(error).__name__)[:300] + "\\n")
    sys.exit(code)

try:
    loaded = session(Path(model), optimize=optimize == "1", threads=0, exact=exact == "1")
except Exception as error:
    fail(error, 3)
try:
    outputs = run_session(loaded, feeds)
except Exception as error:
    fail(error, 4)
names = list(outputs)
np.savez(out_file, **{f"o{i}": outputs[name] for i, name in enumerate(names)})
Path(out_file + ".json").write_text(json.dumps(names))
"""


def _die_with_parent() -> None:
    """Linux: the ORT child is killed when deploycc dies, so none is left behind by a SIGKILL."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_ort_isolated(source: bytes | Path, feeds: dict[str, np.ndarray], *, optimize: bool = True,
                     timeout: float = 1800) -> dict[str, np.ndarray]:
    """run_ort in a separate process: a model that crashes ONNX Runtime (it segfaults on some
    malformed-but-checker-valid models, found by tests/hostile/test_fuzz.py) fails this call
    with RunError instead of killing deploycc."""
    import json
    import subprocess
    import sys
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="deploycc-ort-") as folder:
        work = Path(folder)
        model = work / "model.onnx"
        if isinstance(source, bytes):
            model.write_bytes(source)
        else:
            model = source
        np.savez(work / "feeds.npz", **feeds)  # type: ignore[arg-type]
        out = str(work / "outputs.npz")
        try:
            child = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(work / "feeds.npz"), out,
                                    "1" if optimize else "0", "1" if EXACT.get() else "0"],
                                   capture_output=True, text=True,
                                   timeout=timeout, preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            raise RunError(f"onnxruntime did not finish in {timeout:g} s", stage="crash") from None
        if child.returncode < 0:
            raise RunError(f"onnxruntime crashed on this model (its process died by signal "
                           f"{-child.returncode})", stage="crash")
        if child.returncode != 0:
            lines = child.stderr.strip().splitlines()
            raise RunError(lines[-1] if lines else f"onnxruntime exited {child.returncode}",
                           stage="run" if child.returncode == 4 else "load")
        names = json.loads(Path(out + ".json").read_text())
        with np.load(out, allow_pickle=False) as archive:
            return {name: archive[f"o{i}"] for i, name in enumerate(names)}


_PROBE_CHILD = """
import json, sys
import numpy as np
from pathlib import Path
from deploycc.verify.compare import degenerate_outputs
from deploycc.verify.runner import run_session, session
model, out_file, stop_at_first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
try:
    loaded = session(Path(model), optimize=True, threads=0)
except Exception as error:
    lines = str(error).strip().splitlines()
    sys.stderr.write((lines[0] if lines else type(error).__name__)[:300] + "\\n")
    sys.exit(3)
verdicts = []
for feeds_file in sys.argv[4:]:
    with np.load(feeds_file, allow_pickle=False) as archive:
        feeds = {name: archive[name] for name in archive.files}
    try:
        flat = degenerate_outputs(run_session(loaded, feeds))
        reasons = "; ".join(f"{name} {why}" for name, why in flat.items())
        verdict = f"no signal: {reasons}" if reasons else ""
    except Exception as error:
        lines = str(error).strip().splitlines()
        verdict = "fails: " + (lines[0] if lines else type(error).__name__)[:300]
    verdicts.append(verdict)
    Path(out_file).write_text(json.dumps(verdicts))
    if stop_at_first and not verdict:
        break
"""


def probe_inputs(source: Path, feed_sets: list[dict[str, np.ndarray]], *, stop_at_first: bool = True,
                 timeout: float = 1800) -> list[str]:
    """Run the model on ORT CPU (in a child process, one session) on each set of inputs in turn:
    per set "" when it ran and some floating-point output carries a signal, else why not ("fails:
    ...", "no signal: ..."). With `stop_at_first` the list ends at the first good set. A model
    ORT cannot load, or a crash, is a RunError (stage "load" or "crash")."""
    import json
    import subprocess
    import sys
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="deploycc-probe-") as folder:
        work = Path(folder)
        files = []
        for index, feeds in enumerate(feed_sets):
            files.append(str(work / f"feeds{index}.npz"))
            np.savez(files[-1], **feeds)  # type: ignore[arg-type]
        out = work / "verdicts.json"
        try:
            child = subprocess.run([sys.executable, "-c", _PROBE_CHILD, str(source), str(out),
                                    "1" if stop_at_first else "0", *files], capture_output=True, text=True,
                                   timeout=timeout, preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            raise RunError(f"onnxruntime did not finish in {timeout:g} s", stage="crash") from None
        if child.returncode == 3:
            lines = child.stderr.strip().splitlines()
            raise RunError(lines[-1] if lines else "onnxruntime cannot load the model")
        verdicts: list[str] = json.loads(out.read_text()) if out.exists() else []
        if child.returncode != 0:  # died on the set after the last verdict written
            if len(verdicts) >= len(feed_sets):
                return verdicts
            verdicts.append(f"fails: onnxruntime crashed (exit {child.returncode})")
            if child.returncode < 0 and len(verdicts) == 1:
                raise RunError("onnxruntime crashed on this model", stage="crash")
        return verdicts
