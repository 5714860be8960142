"""Activation functions into elementwise primitives every backend has (Exp, Tanh, Erf, Max...).

Each decomposition is written to stay finite where the naive formula overflows: Softplus uses
max(x, 0) + log(1 + exp(-|x|)) so that exp never sees a large positive argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


def _x(site: Site) -> ir.Value:
    value = site.inputs[0]
    assert value is not None
    return value


def _float_input(site: Site) -> str | None:
    dtype = site.dtype(0)
    if dtype is not None and not dtype.is_floating_point():
        return f"input is {dtype.name.lower()}, the decomposition is for floating point"
    return None


class _Elementwise(Rule):
    family = "activations"

    def check(self, site: Site) -> str | None:
        return _float_input(site)


def gelu_erf(b: Builder, x: ir.Value, dtype: ir.DataType | None) -> ir.Value:
    """0.5 * x * (1 + erf(x / sqrt(2)))"""
    erf = b.op("Erf", b.op("Mul", x, b.scalar_like(1 / math.sqrt(2), dtype)))
    return b.op("Mul", b.op("Mul", x, b.scalar_like(0.5, dtype)),
                b.op("Add", erf, b.scalar_like(1.0, dtype)))


def gelu_tanh(b: Builder, x: ir.Value, dtype: ir.DataType | None) -> ir.Value:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))"""
    cube = b.op("Mul", b.op("Mul", x, x), x)
    inner = b.op("Add", x, b.op("Mul", cube, b.scalar_like(0.044715, dtype)))
    tanh = b.op("Tanh", b.op("Mul", inner, b.scalar_like(math.sqrt(2 / math.pi), dtype)))
    return b.op("Mul", b.op("Mul", x, b.scalar_like(0.5, dtype)),
                b.op("Add", tanh, b.scalar_like(1.0, dtype)))


def softplus(b: Builder, x: ir.Value, dtype: ir.DataType | None) -> ir.Value:
    """log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)), finite for every finite x"""
    tail = b.op("Log", b.op("Add", b.op("Exp", b.op("Neg", b.op("Abs", x))), b.scalar_like(1.0, dtype)))
    return b.op("Add", b.op("Relu", x), tail)


@register
class GeluRule(_Elementwise):
    """Gelu (opset 20): 0.5x(1+erf(x/sqrt2)); approximate='tanh': 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))).

    Both forms are exact transcriptions of the spec's function bodies.
    """

    name = "gelu"
    op_type = "Gelu"
    since = 20

    def check(self, site: Site) -> str | None:
        mode = site.attr("approximate", "none")
        if mode not in ("none", "tanh"):
            return f"unknown approximate={mode!r}"
        return _float_input(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        formula = gelu_tanh if site.attr("approximate", "none") == "tanh" else gelu_erf
        return [formula(b, _x(site), site.dtype(0))]


@register
class SoftplusRule(_Elementwise):
    """Softplus: log(1 + exp(x)) computed as max(x, 0) + log(1 + exp(-|x|))."""

    name = "softplus"
    op_type = "Softplus"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [softplus(b, _x(site), site.dtype(0))]


@register
class MishRule(_Elementwise):
    """Mish (opset 18): x * tanh(softplus(x))."""

    name = "mish"
    op_type = "Mish"
    since = 18

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = _x(site)
        return [b.op("Mul", x, b.op("Tanh", softplus(b, x, site.dtype(0))))]


def hard_sigmoid(b: Builder, x: ir.Value, alpha: float, beta: float, dtype: ir.DataType | None) -> ir.Value:
    """max(0, min(1, alpha * x + beta))"""
    affine = b.op("Add", b.op("Mul", x, b.scalar_like(alpha, dtype)), b.scalar_like(beta, dtype))
    return b.op("Max", b.op("Min", affine, b.scalar_like(1.0, dtype)), b.scalar_like(0.0, dtype))


@register
class HardSigmoidRule(_Elementwise):
    """HardSigmoid: max(0, min(1, alpha*x + beta)), alpha=0.2 and beta=0.5 by default."""

    name = "hard-sigmoid"
    op_type = "HardSigmoid"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [hard_sigmoid(b, _x(site), site.attr("alpha", 0.2), site.attr("beta", 0.5), site.dtype(0))]


@register
class HardSwishRule(_Elementwise):
    """HardSwish (opset 14): x * max(0, min(1, x/6 + 1/2))."""

    name = "hard-swish"
    op_type = "HardSwish"
    since = 14

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = _x(site)
        return [b.op("Mul", x, hard_sigmoid(b, x, 1 / 6, 0.5, site.dtype(0)))]


@register
class CeluRule(_Elementwise):
    """Celu (opset 12): max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    name = "celu"
    op_type = "Celu"
    since = 12

    def check(self, site: Site) -> str | None:
        return "alpha must not be 0" if site.attr("alpha", 1.0) == 0 else _float_input(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype, alpha = _x(site), site.dtype(0), site.attr("alpha", 1.0)
        scaled = b.op("Div", x, b.scalar_like(alpha, dtype))
        expm1 = b.op("Sub", b.op("Exp", scaled), b.scalar_like(1.0, dtype))
        negative = b.op("Min", b.op("Mul", expm1, b.scalar_like(alpha, dtype)), b.scalar_like(0.0, dtype))
        return [b.op("Add", b.op("Relu", x), negative)]


@register
class SeluRule(_Elementwise):
    """Selu: gamma * (max(0, x) + min(0, alpha * (exp(x) - 1)))."""

    name = "selu"
    op_type = "Selu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype = _x(site), site.dtype(0)
        alpha = site.attr("alpha", 1.67326319217681884765625)
        gamma = site.attr("gamma", 1.05070102214813232421875)
        expm1 = b.op("Sub", b.op("Exp", x), b.scalar_like(1.0, dtype))
        negative = b.op("Min", b.op("Mul", expm1, b.scalar_like(alpha, dtype)),
                        b.scalar_like(0.0, dtype))
        return [b.op("Mul", b.op("Add", b.op("Relu", x), negative), b.scalar_like(gamma, dtype))]


@register
class ThresholdedReluRule(_Elementwise):
    """ThresholdedRelu (opset 10): x where x > alpha, else 0."""

    name = "thresholded-relu"
    op_type = "ThresholdedRelu"
    since = 10

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype = _x(site), site.dtype(0)
        above = b.op("Greater", x, b.scalar_like(site.attr("alpha", 1.0), dtype))
        return [b.op("Where", above, x, b.scalar_like(0.0, dtype))]


@register
class ShrinkRule(_Elementwise):
    """Shrink (opset 9): x + bias where x < -lambd, x - bias where x > lambd, else 0."""

    name = "shrink"
    op_type = "Shrink"
    since = 9

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype = _x(site), site.dtype(0)
        lambd, bias = site.attr("lambd", 0.5), site.attr("bias", 0.0)
        below = b.op("Less", x, b.scalar_like(-lambd, dtype))
        above = b.op("Greater", x, b.scalar_like(lambd, dtype))
        upper = b.op("Where", above, b.op("Sub", x, b.scalar_like(bias, dtype)), b.scalar_like(0.0, dtype))
        return [b.op("Where", below, b.op("Add", x, b.scalar_like(bias, dtype)), upper)]


@register
class PReluRule(_Elementwise):
    """PRelu: max(0, x) + slope * min(0, x), with slope broadcast the ONNX (numpy) way.

    Backends that only take a per-channel slope in one layout get plain Mul/Max/Min instead.
    """

    name = "prelu"
    op_type = "PRelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype = _x(site), site.dtype(0)
        zero = b.scalar_like(0.0, dtype)
        negative = b.op("Mul", b.op("Min", x, zero), site.inputs[1])
        return [b.op("Add", b.op("Max", x, zero), negative)]
