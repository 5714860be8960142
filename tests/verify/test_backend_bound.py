"""An engine that differs from ONNX Runtime no more than the same backend differs on the model as
exported passes, said as such; one that differs more, or where the backend computes the original
within tolerance, fails as before."""

from __future__ import annotations

import numpy as np

from deploycc.taxonomy import Precision
from deploycc.verify.verification import compare_all, within_backend_on_original


def _judged(actual: np.ndarray, expected: np.ndarray):
    return compare_all({"y": expected}, {"y": actual}, reference="onnxruntime", inputs="drawn",
                       precision=Precision.FP32)


def test_an_engine_as_far_as_the_backend_on_the_original_passes_with_a_caveat() -> None:
    rng = np.random.default_rng(0)
    expected = rng.standard_normal(1000).astype(np.float32)
    drift = rng.standard_normal(1000).astype(np.float32) * 2e-3  # a backend's fp32 kernels, deep network
    result = _judged(expected + drift, expected)
    assert not result.passed
    within_backend_on_original(result, {"y": expected}, {"y": expected + drift * 1.05})
    assert result.passed and result.backend_bound == ["y"] and "as exported" in result.caveat()


def test_an_engine_further_than_the_backend_on_the_original_still_fails() -> None:
    rng = np.random.default_rng(1)
    expected = rng.standard_normal(1000).astype(np.float32)
    drift = rng.standard_normal(1000).astype(np.float32) * 2e-3
    result = _judged(expected + 3 * drift, expected)  # the change made it worse than the backend alone
    within_backend_on_original(result, {"y": expected}, {"y": expected + drift})
    assert not result.passed and not result.backend_bound
    exact = _judged(expected + drift, expected)  # the backend computes the original within tolerance
    within_backend_on_original(exact, {"y": expected}, {"y": expected.copy()})
    assert not exact.passed


def test_a_backend_that_gets_the_original_wrong_beyond_rounding_is_called_a_defect_not_rounding() -> None:
    rng = np.random.default_rng(2)
    expected = rng.standard_normal(1000).astype(np.float32)
    wrong = expected + rng.standard_normal(1000).astype(np.float32) * 0.5  # cosine ~0.9: not rounding
    result = _judged(wrong, expected)
    within_backend_on_original(result, {"y": expected}, {"y": wrong.copy()})
    assert result.passed and result.backend_defect == ["y"]
    assert "defect of the backend" in result.caveat() and "kernels' rounding" not in result.caveat()
    rounding = _judged(expected + 2e-3, expected)
    within_backend_on_original(rounding, {"y": expected}, {"y": expected + 2e-3})
    assert rounding.passed and not rounding.backend_defect and "kernels' rounding" in rounding.caveat()
