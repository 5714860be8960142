"""What runs, not only what is declared: an output whose rank or dtype changed fails verification
even where the numbers would pass."""

from __future__ import annotations

import numpy as np

from deploycc.verify.verification import signature_changes


def test_a_changed_rank_or_dtype_is_named_and_equal_runs_are_not() -> None:
    reference = {"y": np.ones((4, 1, 3), np.float32), "ids": np.arange(3, dtype=np.int64)}
    assert signature_changes(reference, {k: v.copy() for k, v in reference.items()}) == []
    flattened = {"y": np.ones((4, 3), np.float32)}
    [problem] = signature_changes(reference, flattened)
    assert "'y'" in problem and "rank 2" in problem and "rank 3" in problem
    narrowed = {"ids": np.arange(3, dtype=np.int32)}  # equal values, another dtype
    [problem] = signature_changes(reference, narrowed)
    assert "int32" in problem and "int64" in problem
    assert signature_changes(reference, {"other": np.ones(2)}) == []
