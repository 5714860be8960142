"""Running one ONNX conformance case on a backend and judging its outputs, for every element type
the cases use.

The cases store some inputs and expected outputs as TensorProto or numpy scalars, and the exotic
types (bfloat16, float8, int4, int2, float4) as ml_dtypes arrays, which neither ONNX Runtime's nor
OpenVINO's Python bindings accept as numpy. Each backend runs a case its own way
(`Backend.runners.conformance`, with backends/raw_values.py for the exotic types' raw storage
bits), so a case fails only for what the backend does, never for what the harness could not feed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from deploycc.backends.raw_values import Refused, is_exotic
from deploycc.errors import OptionError
from deploycc.taxonomy import CaseOutcome

RTOL, ATOL = 1e-3, 1e-4
REFUSAL_WORDS = ("NOT_IMPLEMENTED", "not supported", "Unsupported", "No conversion rule",
                 "Could not find an implementation", "has no element type")


def as_value(value: Any) -> Any:
    """A case's input or expected output as numpy (sequences as lists, an empty optional as None)."""
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [as_value(item) for item in value]
    return value


def same(got: Any, want: Any) -> bool:
    """Output equality at the probe's tolerance: floats within rtol/atol, everything else exact."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if want is None:
        return got is None
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if is_exotic(want) or is_exotic(got):
        wide = np.int64 if "int" in want.dtype.name else np.float64
        got, want = got.astype(wide), want.astype(wide)
    if want.dtype.kind in "fc":
        return bool(np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(np.array_equal(got, want))


def headline(error: Exception) -> str:
    """The informative part of a backend's message: OpenVINO's start with source-file lines."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    boilerplate = ("Summary:", "Model wasn't fully converted.", "Failed operations detailed log:")
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '", "src/"))
              and "FrontEnd API failed" not in line and line not in boilerplate]
    text = " ".join(useful[:2]) if useful else (lines[0] if lines else type(error).__name__)
    return text[:200]


def outcome(kind: str, model_bytes: bytes, case: Any) -> tuple[CaseOutcome, str]:
    """pass | mismatch | refused | error, with the first line of the backend's message."""
    from deploycc.backends.registry import get_backend

    backend = get_backend(kind)
    proto = onnx.load_from_string(model_bytes)
    constants = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in constants]
    for inputs, expected in case.data_sets:
        feeds = dict(zip(names, (as_value(x) for x in inputs), strict=False))
        try:
            if backend.runners.conformance is None:
                raise OptionError(f"{kind} runs no conformance cases here")
            actual = backend.runners.conformance(model_bytes, feeds)
        except Exception as error:
            text = headline(error)
            if isinstance(error, Refused) or any(word in text for word in REFUSAL_WORDS):
                return CaseOutcome.REFUSED, text
            return CaseOutcome.ERROR, text
        try:
            pairs = zip(actual, expected, strict=False)
            agree = all(same(as_value(got), as_value(want)) for got, want in pairs)
        except Exception as error:  # outputs of a kind the comparison cannot read
            return CaseOutcome.ERROR, f"harness: {type(error).__name__}: {str(error)[:100]}"
        if not agree:
            return CaseOutcome.MISMATCH, f"outputs differ beyond rtol {RTOL:g} / atol {ATOL:g}"
    return CaseOutcome.PASS, ""
