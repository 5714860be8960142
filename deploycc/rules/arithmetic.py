"""Elementary ops some targets lack, in terms of ones they have.

- Reciprocal(x) = 1 / x (TensorRT 8.2's parser has Div but not Reciprocal)
- Sum(a, b, ...) = a + b + ... ; Mean(a, b, ...) = (a + b + ...) / n (broadcasting Adds)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


@register
class ReciprocalRule(Rule):
    """Reciprocal: 1 / x."""

    name = "reciprocal"
    family = "arithmetic"
    op_type = "Reciprocal"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Div", b.scalar_like(1.0, site.dtype(0)), site.inputs[0])]


def _chain(b: Builder, values: Sequence[ir.Value | None]) -> ir.Value:
    total = values[0]
    for value in values[1:]:
        total = b.op("Add", total, value)
    assert total is not None
    return total if len(values) > 1 else b.op("Identity", total)


@register
class SumRule(Rule):
    """Sum(x1..xn): x1 + x2 + ... + xn with broadcasting Adds."""

    name = "sum"
    family = "arithmetic"
    op_type = "Sum"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [_chain(b, site.inputs)]


@register
class MeanRule(Rule):
    """Mean(x1..xn): (x1 + ... + xn) / n."""

    name = "mean"
    family = "arithmetic"
    op_type = "Mean"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _chain(b, site.inputs)
        return [b.op("Div", total, b.scalar_like(float(len(site.inputs)), site.dtype(0)))]
