"""Saturating float8 casts as Clip + a non-saturating cast, and OptionalGetElement on a tensor."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import declines, rewrite_and_compare

BEYOND = np.array([0.3, -1.7, 300.0, 1e6, -1e6, np.inf, -np.inf, np.nan, 6e4, -0.0], dtype=np.float32)


@pytest.mark.parametrize("to", [17, 19])  # float8e4m3fn, float8e5m2
def test_saturating_cast(to: int) -> None:
    # the float8 result is read back as float, so both graphs' outputs compare as float32
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[10] x) => (float[10] y) {{
            small = Cast <to={to}> (x)
            y = Cast <to=1> (small)
        }}
    """, "Cast", "saturating-cast", feeds={"x": BEYOND}, seeds=(1,), atol=0, rtol=0)


def test_saturating_castlike() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[10] x) => (float[10] y) {
            like = Constant <value = float8e4m3fn[1] {0}> ()
            small = CastLike (x, like)
            y = Cast <to=1> (small)
        }
    """, "CastLike", "saturating-castlike", feeds={"x": BEYOND}, seeds=(1,), atol=0, rtol=0)


def test_non_saturating_cast_is_left_alone() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[3] x) => (float[3] y) {
            small = Cast <to=17, saturate=0> (x)
            y = Cast <to=1> (small)
        }
    """, "Cast", "does not saturate")


def test_optional_get_element_of_a_tensor() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[4] x) => (float[4] y) { y = OptionalGetElement (x) }
    """, "OptionalGetElement", "optional-get-tensor")
