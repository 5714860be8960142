"""The comparator: one output of a candidate against the reference, with the statistics a user
needs to judge the difference (Polygraphy prints the tolerance that would have passed; OpenVINO's
benchmark_app adds cosine similarity).
"""

from __future__ import annotations

import numpy as np

from deploycc.records.verification import OutputComparison  # re-exported: a record, in records/
from deploycc.taxonomy import Precision

# (atol, rtol, minimum cosine similarity) per precision the target computes in. An element
# passes when |actual - expected| <= atol + rtol * |expected|.
TOLERANCES: dict[Precision, tuple[float, float, float]] = {
    Precision.FP32: (1e-4, 1e-3, 0.9999),
    Precision.FP16: (1e-2, 1e-2, 0.999),
    Precision.BF16: (5e-2, 5e-2, 0.995),  # 8-bit mantissa: ~4e-3 per rounding, accumulated over layers
    Precision.INT8: (1e-1, 1e-1, 0.99),
}
# The share of elements that may lie beyond the tolerance, per precision. An int8 model is judged
# by its accuracy budget and by cosine; element by element a few always flip (a text detector's
# map: 0.85% of its pixels at the edges of words, where a logit near 0 crosses it). Polygraphy's
# --check-error-stat lets a user judge by a statistic for the same reason.
MISMATCH_SHARE: dict[Precision, float] = {Precision.INT8: 0.01}


def judged_as(precision: str) -> Precision:
    """The precision whose tolerances judge an engine built in `precision`: its own, or int8's
    for the narrower ones (fp8, int4) that have none of their own."""
    return Precision(precision) if precision in TOLERANCES else Precision.INT8


DEGENERATE_ZERO = 1e-6  # every element of the reference this close to zero: no signal
# Relative spread within which a reference is one value up to float32 rounding (16 units in the
# last place): a constant output, or scores tied to the last bits.
DEGENERATE_SPREAD = 16 * float(np.finfo(np.float32).eps)


def degeneracy(expected: np.ndarray) -> str:
    """Why a floating-point reference output carries no signal (all about zero, or one value
    repeated: a random-weight detector's map at a toy size), or "" when it does. Integer and
    boolean outputs (labels, masks) and single values are not judged so."""
    array = np.asarray(expected)
    if array.size < 2 or not np.issubdtype(array.dtype, np.floating):
        return ""
    # the finite elements copied only where some are not: a segmentation map's 5.7M elements were
    # copied to float64 for every comparison (the ill-conditioning check compares 20 times)
    finite = array if np.isfinite(array).all() else array[np.isfinite(array)]
    if finite.size < 2:
        return ""
    largest = float(np.max(np.abs(finite)))
    if largest <= DEGENERATE_ZERO:
        return f"all within {DEGENERATE_ZERO:g} of zero"
    if float(np.max(finite)) - float(np.min(finite)) <= DEGENERATE_SPREAD * largest:
        return f"constant ({float(finite.flat[0]):.6g})"
    return ""


def degenerate_outputs(outputs: dict[str, np.ndarray]) -> dict[str, str]:
    """The floating-point outputs that carry no signal, with why; {} when any of them does (or
    there is none): then the drawn inputs exercise the model."""
    floating = {name: array for name, array in outputs.items()
                if np.issubdtype(np.asarray(array).dtype, np.floating) and np.asarray(array).size >= 2}
    reasons = {name: degeneracy(array) for name, array in floating.items()}
    if not floating or not all(reasons.values()):
        return {}
    return reasons


def _finite(value: float) -> float:
    return float(value) if np.isfinite(value) else float("inf")


def compare(name: str, expected: np.ndarray, actual: np.ndarray, *, atol: float, rtol: float,
            min_cosine: float = 0.0, mismatch_share: float = 0.0) -> OutputComparison:
    expected, actual = np.asarray(expected), np.asarray(actual)
    base = dict(name=name, shape=list(expected.shape), dtype=str(expected.dtype), atol=atol, rtol=rtol,
                degenerate=degeneracy(expected))
    if expected.shape != actual.shape:
        return OutputComparison(**base, passed=False, max_abs_error=float("inf"),  # type: ignore[arg-type]
                                max_rel_error=float("inf"), cosine_similarity=0.0,
                                required_atol=float("inf"), required_rtol=float("inf"),
                                mismatched=int(expected.size),
                                problem=f"shape {list(actual.shape)} != {list(expected.shape)}")
    if expected.dtype == np.bool_ or not np.issubdtype(expected.dtype, np.number):
        equal = expected == actual
        wrong = int((~equal).sum())
        return OutputComparison(**base, passed=wrong == 0, max_abs_error=float(wrong > 0),  # type: ignore[arg-type]
                                max_rel_error=float(wrong > 0), cosine_similarity=1.0 if not wrong else 0.0,
                                required_atol=0.0 if not wrong else float("inf"),
                                required_rtol=0.0 if not wrong else float("inf"), mismatched=wrong)
    if expected.dtype == actual.dtype and np.array_equal(expected, actual, equal_nan=True):
        # the same bits (most rewrite proofs): nothing differs, and the long way below costs a
        # dozen float64 copies of a tensor that may hold millions of elements
        return OutputComparison(**base, passed=True, max_abs_error=0.0,  # type: ignore[arg-type]
                                max_rel_error=0.0, cosine_similarity=1.0, required_atol=0.0,
                                required_rtol=0.0, mismatched=0)
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    finite = bool(np.isfinite(e).all() and np.isfinite(a).all())
    diff, bad, max_rel, cosine, largest = (_finite_statistics if finite else _statistics)(e, a, atol, rtol)
    mismatched = int(np.count_nonzero(bad))
    # Cosine says whether the output points the right way; an output whose every element is within
    # atol of zero (a random-weight classifier quantized to nothing) has no direction to judge.
    negligible = largest <= atol
    passed = mismatched <= mismatch_share * diff.size and (cosine >= min_cosine or negligible)
    max_abs = _finite(diff.max()) if diff.size else 0.0
    problem = ""
    if mismatched > mismatch_share * diff.size:
        worst = np.unravel_index(int(np.argmax(np.where(bad, diff, -1))), diff.shape)
        problem = (f"{mismatched} of {diff.size} elements differ beyond atol={atol} rtol={rtol}; "
                   f"worst at {list(map(int, worst))}: expected {e[worst]:.6g}, got {a[worst]:.6g}")
    elif cosine < min_cosine and not negligible:
        problem = f"cosine similarity {cosine:.6f} below {min_cosine}"
    return OutputComparison(**base, passed=passed, max_abs_error=max_abs,  # type: ignore[arg-type]
                            max_rel_error=max_rel, cosine_similarity=cosine, required_atol=max_abs,
                            required_rtol=max_rel, mismatched=mismatched, problem=problem)


Statistics = tuple[np.ndarray, np.ndarray, float, float, float]  # diff, bad, max rel, cosine, max |finite e|


def _cosine(e: np.ndarray, a: np.ndarray) -> float:
    norms = float(np.linalg.norm(e) * np.linalg.norm(a))
    if norms == 0:
        return 1.0 if np.array_equal(e, a) else 0.0
    return float(np.dot(e.ravel(), a.ravel()) / norms)


def _finite_statistics(e: np.ndarray, a: np.ndarray, atol: float, rtol: float) -> Statistics:
    """Where every element of both is finite (nearly always): in place, a third of the passes over
    the arrays of _statistics (a segmentation map's 5.7M elements took 0.35 s a comparison, and the
    ill-conditioning check compares 20 times)."""
    shape, e, a = e.shape, e.reshape(-1), a.reshape(-1)  # a 0-d array's arithmetic makes scalars
    diff = np.subtract(a, e)
    np.abs(diff, out=diff)
    magnitude = np.abs(e)
    scratch = np.multiply(magnitude, rtol)
    scratch += atol
    bad = diff > scratch
    max_rel = 0.0
    if diff.size and diff.max() > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(diff, magnitude, out=scratch)  # 0 / 0 is nan where nothing differs: not a maximum
        max_rel = _finite(np.nanmax(scratch))
    return (diff.reshape(shape), bad.reshape(shape), max_rel, _cosine(e, a),
            float(np.max(magnitude)) if magnitude.size else 0.0)


def _statistics(e: np.ndarray, a: np.ndarray, atol: float, rtol: float) -> Statistics:
    """With nan or inf in either: the same nan, or the same inf, in both is no difference; cosine
    over the elements finite in both."""
    same_nan = np.isnan(e) & np.isnan(a)
    same_inf = np.isinf(e) & (e == a)
    settled = same_nan | same_inf
    with np.errstate(divide="ignore", invalid="ignore"):  # inf - inf is nan: settled (same inf) or inf
        diff = np.where(settled, 0.0, np.abs(a - e))
        diff = np.where(np.isnan(diff), np.inf, diff)
        magnitude = np.abs(np.where(settled, 1.0, e))
        rel = np.where(diff == 0, 0.0, diff / magnitude)
    bad = diff > atol + rtol * magnitude
    finite = ~np.isnan(e) & ~np.isnan(a) & ~np.isinf(e) & ~np.isinf(a)
    ef, af = e[finite], a[finite]
    return (diff, bad, _finite(rel.max()) if rel.size else 0.0, _cosine(ef, af),
            float(np.max(np.abs(ef))) if ef.size else 0.0)
