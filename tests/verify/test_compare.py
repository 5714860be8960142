"""compare() on outputs that are the same bits takes a short way: it must say what the long way
says (passed, no error) and never let a near miss through as equal."""

from __future__ import annotations

import numpy as np

from deploycc.verify.compare import compare


def test_identical_outputs_pass_with_no_error_and_near_ones_are_measured() -> None:
    expected = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, 3.5]], dtype=np.float32)
    same = compare("y", expected, expected.copy(), atol=0.0, rtol=0.0, min_cosine=0.999)
    assert same.passed and same.max_abs_error == 0.0 and same.mismatched == 0
    assert same.cosine_similarity == 1.0

    nudged = expected.copy()
    nudged[1, 2] = np.nextafter(np.float32(3.5), np.float32(4.0))
    exact = compare("y", expected, nudged, atol=0.0, rtol=0.0)
    assert not exact.passed and exact.mismatched == 1 and exact.max_abs_error > 0.0
    assert compare("y", expected, nudged, atol=1e-5, rtol=0.0).passed

    # the same values in another dtype are compared as numbers, the long way
    widened = compare("y", expected, expected.astype(np.float64), atol=0.0, rtol=0.0)
    assert widened.passed and widened.max_abs_error == 0.0
    labels = np.array([3, 1, 2], dtype=np.int64)
    assert compare("k", labels, labels.copy(), atol=0.0, rtol=0.0).passed
    assert not compare("k", labels, labels[::-1].copy(), atol=0.0, rtol=0.0).passed


def test_detections_in_another_order_pass_as_sets_and_other_rows_do_not() -> None:
    from deploycc.taxonomy import Precision
    from deploycc.verify.verification import compare_all

    rng = np.random.default_rng(0)
    boxes = rng.standard_normal((50, 6)).astype(np.float32)
    labels = rng.integers(0, 9, 50)
    order = rng.permutation(50)
    shuffled = compare_all({"boxes": boxes, "labels": labels},
                           {"boxes": boxes[order], "labels": labels[order]},
                           reference="onnxruntime", inputs="generated", precision=Precision.FP32)
    assert shuffled.passed and shuffled.compared_as_sets == ["boxes", "labels"]
    moved = boxes[order].copy()
    moved[3, 2] += 1.0
    assert not compare_all({"boxes": boxes}, {"boxes": moved}, reference="onnxruntime", inputs="generated",
                           precision=Precision.FP32).passed
    # wide rows (a batch of maps) are ordered by their leading columns: the swapped batch items
    # are found (the full sort took 28 s a call on a 2x21x224x224 map)
    maps = rng.standard_normal((2, 21, 224, 224)).astype(np.float32)
    swapped = compare_all({"map": maps}, {"map": maps[::-1].copy()}, reference="onnxruntime",
                          inputs="generated", precision=Precision.FP32)
    assert swapped.passed and swapped.compared_as_sets == ["map"]
