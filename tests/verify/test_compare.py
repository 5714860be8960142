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


def test_finite_outputs_are_measured_as_with_nan_beside_them_and_a_scalar_too() -> None:
    """Finite outputs take the in-place way; its statistics are the general way's (the same
    elements, with a nan added elsewhere, measure alike), a 0-d output (Det of one matrix) included."""
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((3, 5)).astype(np.float32) * 100
    actual = expected + rng.standard_normal((3, 5)).astype(np.float32) * 0.05
    finite = compare("y", expected, actual, atol=1e-2, rtol=1e-4)
    with_nan = compare("y", np.append(expected, np.nan), np.append(actual, np.nan), atol=1e-2, rtol=1e-4)
    assert not finite.passed and finite.mismatched == with_nan.mismatched > 0
    assert finite.max_abs_error == with_nan.max_abs_error and finite.max_rel_error == with_nan.max_rel_error
    assert abs(finite.cosine_similarity - with_nan.cosine_similarity) < 1e-12
    scalar = compare("det", np.array(2.0, np.float32), np.array(2.5, np.float32), atol=0.1, rtol=0.0)
    assert not scalar.passed and scalar.mismatched == 1 and scalar.max_abs_error == 0.5
    assert compare("det", np.array(2.0, np.float32), np.array(2.05, np.float32), atol=0.1, rtol=0.0).passed


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
