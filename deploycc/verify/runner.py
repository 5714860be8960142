"""Running a model on ONNX Runtime CPU, the reference for every verification.

When ORT has no kernel for an op (a rewrite's *original* node may be exactly that), the onnx
package's reference evaluator is the fallback, and the result says which one ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

ORT = "onnxruntime"
REFERENCE = "onnx.reference"


class RunError(Exception):
    """The model could not be run by any reference runtime; the message says why."""


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


def run_ort(source: bytes | Path, feeds: dict[str, np.ndarray], *, optimize: bool = False,
            threads: int = 1) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not optimize:  # proofs must run the ops as written, not ORT's fused versions of them
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = source if isinstance(source, bytes) else str(source)
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    results = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, results, strict=True))


def run_reference(source: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx
    from onnx.reference import ReferenceEvaluator

    proto = onnx.load_from_string(source)
    evaluator = ReferenceEvaluator(proto)
    names = [o.name for o in proto.graph.output]
    results = evaluator.run(names, feeds)
    return dict(zip(names, results, strict=True))


def run_model_bytes(source: bytes, feeds: dict[str, np.ndarray]) -> RunResult:
    """Run on ORT CPU (no graph optimizations); fall back to the onnx reference evaluator."""
    try:
        return RunResult(run_ort(source, feeds), ORT)
    except Exception as ort_error:  # ORT raises its own exception types for missing kernels
        try:
            return RunResult(run_reference(source, feeds), REFERENCE)
        except Exception as reference_error:
            raise RunError(f"onnxruntime: {_first_line(ort_error)}; onnx.reference: "
                           f"{_first_line(reference_error)}") from None


def serialize(model: ir.Model) -> bytes:
    from deploycc import io

    return io.to_proto(model).SerializeToString()


def _run_ort_child(source: bytes | str, feeds: dict[str, np.ndarray], optimize: bool
                   ) -> dict[str, np.ndarray] | str:
    """In the child: run, and return the outputs or the error's first line (never raise across)."""
    try:
        return run_ort(source if isinstance(source, bytes) else Path(source), feeds, optimize=optimize,
                       threads=0)
    except Exception as error:
        return _first_line(error)


def run_ort_isolated(source: bytes | Path, feeds: dict[str, np.ndarray], *, optimize: bool = True,
                     timeout: float = 1800) -> dict[str, np.ndarray]:
    """run_ort in a separate process: a model that crashes ONNX Runtime (it segfaults on some
    malformed-but-checker-valid models, found by tests/hostile/test_fuzz.py) fails this call
    with RunError instead of killing deploycc."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        future = pool.submit(_run_ort_child, source if isinstance(source, bytes) else str(source), feeds,
                             optimize)
        try:
            result = future.result(timeout=timeout)
        except BrokenProcessPool:
            raise RunError("onnxruntime crashed on this model (its process died)") from None
        except TimeoutError:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
            raise RunError(f"onnxruntime did not finish in {timeout:g} s") from None
    if isinstance(result, str):
        raise RunError(result)
    return result
