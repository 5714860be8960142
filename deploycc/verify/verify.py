"""Whole-model verification: the original and the rewritten model on ONNX Runtime CPU, on the
same inputs, every output compared with the comparator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploycc.verify.compare import TOLERANCES, OutputComparison, compare
from deploycc.verify.runner import ORT, REFERENCE, RunError, run_ort, run_reference

if TYPE_CHECKING:
    from deploycc.pipeline.context import LegalizeOptions, PipelineState


@dataclass
class Verification:
    passed: bool
    reference: str
    inputs: str
    precision: str
    outputs: list[OutputComparison] = field(default_factory=list)
    problem: str = ""
    blame: str | None = None


def _run_original(path: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    try:
        return run_ort(path, feeds, optimize=True, threads=0), ORT
    except Exception as ort_error:
        if path.stat().st_size > (1 << 30):
            raise RunError(f"onnxruntime cannot run the original: {str(ort_error).splitlines()[0]}") from None
        try:
            return run_reference(path.read_bytes(), feeds), REFERENCE
        except Exception:
            raise RunError(f"onnxruntime cannot run the original: {str(ort_error).splitlines()[0]}") from None


def verify_files(original: Path, candidate: Path, state: PipelineState, options: LegalizeOptions,
                 precision: str = "fp32") -> Verification:
    from deploycc.verify import inputs as input_data

    graph = state.model.graph
    signature = {v.name or "": v for v in graph.inputs if v.name not in graph.initializers}
    if options.inputs is not None:
        feeds = input_data.load_npz(options.inputs, signature)
        described = str(options.inputs)
    else:
        feeds = input_data.generate(list(signature.values()), seed=options.seed)
        described = f"generated (seed {options.seed})"
    layouts = state.fed_layouts
    original_feeds = {name: (np.transpose(array, layouts[name]) if name in layouts else array)
                      for name, array in feeds.items()}
    atol, rtol, min_cosine = TOLERANCES[precision]
    result = Verification(passed=True, reference=ORT, inputs=described, precision=precision)
    try:
        expected, result.reference = _run_original(original, original_feeds)
        actual = run_ort(candidate, feeds, optimize=True, threads=0)
    except RunError as error:
        return Verification(False, result.reference, described, precision, problem=str(error))
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return Verification(False, result.reference, described, precision,
                            problem=f"onnxruntime cannot run the legalized model: {first}")
    for name, array in actual.items():
        if name not in expected:
            continue
        comparison = compare(name, expected[name], array, atol=atol, rtol=rtol, min_cosine=min_cosine)
        result.outputs.append(comparison)
        if not comparison.passed and result.passed:
            result.passed = False
            result.problem = f"output '{name}': {comparison.problem}"
    return result
