"""Activation rules: each decomposition against the op it replaces, on ORT, with edge values."""

from __future__ import annotations

import pytest

from tests.rules.helpers import declines, rewrite_and_compare

CASES = [
    ("Gelu", 'Gelu<approximate="none">', 20, "gelu"),
    ("Gelu", 'Gelu<approximate="tanh">', 20, "gelu"),
    ("Mish", "Mish", 18, "mish"),
    ("HardSwish", "HardSwish", 14, "hard-swish"),
    ("HardSigmoid", "HardSigmoid<alpha=0.3, beta=0.4>", 13, "hard-sigmoid"),
    ("Softplus", "Softplus", 13, "softplus"),
    ("Celu", "Celu<alpha=0.7>", 13, "celu"),
    ("Selu", "Selu", 13, "selu"),
    ("ThresholdedRelu", "ThresholdedRelu<alpha=0.5>", 13, "thresholded-relu"),
    ("Shrink", "Shrink<lambd=0.7, bias=0.2>", 13, "shrink"),
]


@pytest.mark.parametrize(("op", "call", "opset", "rule"), CASES, ids=[c[1] for c in CASES])
def test_activation_rewrite_matches_the_op(op: str, call: str, opset: int, rule: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : {opset}]>
        g (float[2,3,5] x) => (float[2,3,5] y) {{ y = {call}(x) }}
    """, op, rule)


@pytest.mark.parametrize("slope", ["float[3,1,1]", "float[1]", "float[5]"])
def test_prelu_broadcast_forms(slope: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 16]>
        g (float[2,3,4,5] x, {slope} s) => (float[2,3,4,5] y) {{ y = PRelu(x, s) }}
    """, "PRelu", "prelu")


def test_softplus_stays_finite_where_the_naive_formula_overflows() -> None:
    import numpy as np

    x = np.array([[-1000.0, -100.0, -1.0, 0.0, 1.0, 88.0, 100.0, 1000.0]], dtype=np.float32)
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[1,8] x) => (float[1,8] y) { y = Softplus(x) }
    """, "Softplus", "softplus", feeds={"x": x})


def test_integer_input_is_declined() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (int32[4] x) => (int32[4] y) { y = HardSigmoid(x) }
    """, "HardSigmoid", "floating point")
