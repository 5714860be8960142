"""Einsum into Transpose / MatMul / ReduceSum / Reshape, for the equations exporters emit.

Two operands: every letter is one of
  batch      in A, B and the output      -> leading dims of a batched MatMul
  contracted in A and B, not the output  -> the MatMul's K
  left/right in one operand and the output -> the MatMul's M / N
  summed     in one operand only          -> ReduceSum before anything else
A is transposed to (batch, left, contracted), B to (batch, contracted, right); MatMul gives
(batch, left, right), transposed to the output order. With more than one letter in a group the
group is flattened by Reshape, which needs its static sizes. An outer product is a MatMul with
K = 1. One operand: ReduceSum over the letters missing from the output, then a Transpose.
Ellipsis ('...') and repeated letters in one operand (diagonals, traces) are declined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


def parse(equation: str) -> tuple[list[str], str]:
    text = equation.replace(" ", "")
    if "->" not in text:  # implicit output: letters appearing once, in alphabetical order
        operands = text.split(",")
        letters = "".join(operands)
        return operands, "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    left, output = text.split("->")
    return left.split(","), output


def _transpose(b: Builder, x: ir.Value, current: str, wanted: str) -> ir.Value:
    if current == wanted:
        return x
    return b.op("Transpose", x, perm=[current.index(c) for c in wanted])


def _sum_out(b: Builder, x: ir.Value, letters: str, keep: set[str]) -> tuple[ir.Value, str]:
    summed = [i for i, c in enumerate(letters) if c not in keep]
    if not summed:
        return x, letters
    return b.reduce("ReduceSum", x, summed, keepdims=0), "".join(c for c in letters if c in keep)


@register
class EinsumRule(Rule):
    """Einsum (opset 12): Transpose/ReduceSum each operand, batched MatMul, Transpose to the output.

    One or two operands, no ellipsis, no repeated letter in one operand (see the module).
    """

    name = "einsum"
    family = "einsum"
    op_type = "Einsum"
    since = 12

    def check(self, site: Site) -> str | None:
        equation = site.attr("equation", "")
        reason = f"Einsum equation {equation!r} not in supported forms"
        if "." in equation:
            return f"{reason}: ellipsis"
        operands, output = parse(equation)
        if len(operands) not in (1, 2) or len(operands) != len(site.inputs):
            return f"{reason}: {len(operands)} operands (1 or 2 are rewritten)"
        for index, letters in enumerate(operands):
            if len(set(letters)) != len(letters):
                return f"{reason}: repeated letter in operand {index} (diagonal or trace)"
            if site.rank(index) is not None and site.rank(index) != len(letters):
                return f"{reason}: operand {index} has rank {site.rank(index)}, equation says {len(letters)}"
        if len(set(output)) != len(output):
            return f"{reason}: repeated letter in the output"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        operands, output = parse(site.attr("equation", ""))
        if len(operands) == 1:
            x, letters = _sum_out(b, site.inputs[0], operands[0], set(output))  # type: ignore[arg-type]
            return [b.op("Identity", x) if letters == output else _transpose(b, x, letters, output)]
        return [self._two(site, b, operands[0], operands[1], output)]

    def _two(self, site: Site, b: Builder, a_letters: str, b_letters: str, output: str) -> ir.Value:
        a, a_letters = _sum_out(b, site.inputs[0], a_letters, set(b_letters) | set(output))  # type: ignore[arg-type]
        bb, b_letters = _sum_out(b, site.inputs[1], b_letters, set(a_letters) | set(output))  # type: ignore[arg-type]
        batch = "".join(c for c in a_letters if c in b_letters and c in output)
        contracted = "".join(c for c in a_letters if c in b_letters and c not in output)
        left = "".join(c for c in a_letters if c not in b_letters)
        right = "".join(c for c in b_letters if c not in a_letters)
        sizes = self._sizes(site, a_letters, b_letters)
        a = _transpose(b, a, a_letters, batch + left + contracted)
        bb = _transpose(b, bb, b_letters, batch + contracted + right)
        a = self._as_one(b, a, len(batch), left, contracted, sizes, where="left")
        bb = self._as_one(b, bb, len(batch), contracted, right, sizes, where="right")
        product = b.op("MatMul", a, bb)  # (batch, M, N), each of M and N one dim or flattened
        rank = len(batch)
        if len(left) <= 1 and len(right) <= 1:
            unit = ([rank] if not left else []) + ([rank + 1] if not right else [])
            if unit:
                product = b.squeeze(product, unit)
        else:
            missing = [c for c in left + right if c not in sizes]
            if missing:
                raise Decline(f"letters {''.join(missing)} have dynamic sizes; unflattening the "
                              f"product needs them static")
            product = b.op("Reshape", product, b.ints([0] * rank + [sizes[c] for c in left + right]))
        return _transpose(b, product, batch + left + right, output)

    @staticmethod
    def _sizes(site: Site, a_letters: str, b_letters: str) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for index, letters in ((0, a_letters), (1, b_letters)):
            shape = site.shape(index)
            if shape is None or len(shape) != len(letters):
                continue
            for letter, dim in zip(letters, shape, strict=True):
                if dim is not None:
                    sizes[letter] = dim
        return sizes

    @staticmethod
    def _as_one(b: Builder, x: ir.Value, batch_rank: int, first: str, second: str,
                sizes: dict[str, int], where: str) -> ir.Value:
        """x is (batch, first, second); make it (batch, M, K) / (batch, K, N), one dim each."""
        if len(first) <= 1 and len(second) <= 1:
            unit = ([batch_rank] if not first else []) + ([batch_rank + 1] if not second else [])
            return b.unsqueeze(x, unit) if unit else x
        missing = [c for c in first + second if c not in sizes]
        if missing:
            raise Decline(f"letters {''.join(missing)} have dynamic sizes; flattening the {where} "
                          f"operand needs them static")
        m = math.prod(sizes[c] for c in first) if first else 1
        k = math.prod(sizes[c] for c in second) if second else 1
        return b.op("Reshape", x, b.ints([0] * batch_rank + [m, k]))
