"""Einsum rewrites for the equations exporters emit, and the ones the rule must decline."""

from __future__ import annotations

import pytest

from tests.rules.helpers import declines, rewrite_and_compare

TWO_OPERANDS = [
    ("bhqd,bhkd->bhqk", "float[2,3,4,5]", "float[2,3,6,5]", "float[2,3,4,6]"),  # attention scores
    ("bhqk,bhkd->bhqd", "float[2,3,4,6]", "float[2,3,6,5]", "float[2,3,4,5]"),  # attention context
    ("ij,jk->ik", "float[3,4]", "float[4,5]", "float[3,5]"),
    ("bij,bjk->bik", "float[2,3,4]", "float[2,4,5]", "float[2,3,5]"),
    ("i,j->ij", "float[3]", "float[4]", "float[3,4]"),  # outer product
    ("bi,bi->b", "float[3,4]", "float[3,4]", "float[3]"),  # batched dot
    ("ij,kj->ik", "float[3,4]", "float[5,4]", "float[3,5]"),
    ("bnij,bmj->bnmi", "float[2,2,3,4]", "float[2,5,4]", "float[2,2,5,3]"),  # flattened groups
    ("ijk,jl->il", "float[2,3,4]", "float[3,5]", "float[2,5]"),  # summed-out letter k
]


@pytest.mark.parametrize(("equation", "a", "b", "out"), TWO_OPERANDS, ids=[c[0] for c in TWO_OPERANDS])
def test_two_operand_equations(equation: str, a: str, b: str, out: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g ({a} x, {b} w) => ({out} y) {{ y = Einsum<equation="{equation}">(x, w) }}
    """, "Einsum", "einsum")


@pytest.mark.parametrize(("equation", "out"), [("ij->ji", "float[4,3]"), ("ijk->ik", "float[3,5]"),
                                               ("ijk->", "float"), ("ijk->kj", "float[5,4]")])
def test_one_operand_equations(equation: str, out: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[3,4,5] x) => ({out} y) {{ y = Einsum<equation="{equation}">(x) }}
    """.replace("float[3,4,5] x) => (float[4,3]", "float[3,4] x) => (float[4,3]"), "Einsum", "einsum")


def test_dynamic_batch_keeps_working_without_reshape() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[N,3,4,5] x, float[N,3,6,5] w) => (float[N,3,4,6] y) {
            y = Einsum<equation="bhqd,bhkd->bhqk">(x, w)
        }
    """, "Einsum", "einsum")


@pytest.mark.parametrize(("equation", "shapes", "reason"), [
    ("...ij,...jk->...ik", "float[2,3,4] x, float[2,4,5] w", "ellipsis"),
    ("ii,ij->j", "float[3,3] x, float[3,4] w", "repeated letter"),
])
def test_declined_forms_say_why(equation: str, shapes: str, reason: str) -> None:
    declines(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g ({shapes}) => (float[4] y) {{ y = Einsum<equation="{equation}">(x, w) }}
    """, "Einsum", reason)


def test_flattening_dynamic_letters_is_declined() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[2,A,B,4] x, float[2,5,4] w) => (float[2,5,A,B] y) {
            y = Einsum<equation="bnij,bmj->bmni">(x, w)
        }
    """, "Einsum", "dynamic sizes")
