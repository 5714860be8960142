"""ONNX Runtime contrib ops (com.microsoft) left by exporters and ORT's transformer optimizer.

Targets other than ORT do not know them; each has an exact standard-ONNX form:
- FusedConv(X, W, B, Z) = activation(Conv(X, W, B) + Z)
- Gelu(x) = 0.5 x (1 + erf(x / sqrt 2)); BiasGelu(a, b) = Gelu(a + b)
- FastGelu(x, bias) = tanh-approximated Gelu of x + bias
- QuickGelu(x) = x * sigmoid(alpha x), alpha = 1.702 by default
- SkipLayerNormalization(x, skip, gamma, beta, bias): s = x + skip + bias, LayerNorm(s) over the
  last axis; its fourth output is s itself
- SkipSimplifiedLayerNormalization / SimplifiedLayerNormalization: the same with RMS norm
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.activations import gelu_erf, gelu_tanh, hard_sigmoid
from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register
from deploycc.rules.normalization import normalize, rms_normalize

if TYPE_CHECKING:
    import onnx_ir as ir

MS = "com.microsoft"
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class _Contrib(Rule):
    family = "contrib"
    domain = MS


def _activation(site: Site, b: Builder, y: ir.Value) -> ir.Value:
    kind = site.attr("activation", "")
    params = site.attr("activation_params", []) or []
    dtype = site.dtype(0)
    if kind in ("", "Identity"):
        return y
    if kind in ("Relu", "Tanh", "Sigmoid"):
        return b.op(kind, y)
    if kind == "LeakyRelu":
        return b.op("LeakyRelu", y, alpha=params[0] if params else 0.01)
    if kind == "Clip" and len(params) == 2:
        return b.op("Min", b.op("Max", y, b.scalar_like(params[0], dtype)), b.scalar_like(params[1], dtype))
    if kind == "HardSigmoid" and len(params) == 2:
        return hard_sigmoid(b, y, params[0], params[1], dtype)
    raise Decline(f"activation {kind!r} with parameters {params} is not rewritten")


@register
class FusedConvRule(_Contrib):
    """com.microsoft FusedConv: activation(Conv(X, W, B) + Z)."""

    name = "ms-fused-conv"
    op_type = "FusedConv"

    def check(self, site: Site) -> str | None:
        kind = site.attr("activation", "")
        if kind not in ("", "Identity", "Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid"):
            return f"activation {kind!r} is not rewritten"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        conv_attributes = {k: site.attr(k) for k in CONV_ATTRIBUTES if site.attr(k) is not None}
        y = b.op("Conv", *site.inputs[:3], **conv_attributes)
        if site.has_input(3):
            y = b.op("Add", y, site.inputs[3])
        return [_activation(site, b, y)]


@register
class MsGeluRule(_Contrib):
    """com.microsoft Gelu: 0.5 x (1 + erf(x / sqrt 2))."""

    name = "ms-gelu"
    op_type = "Gelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [gelu_erf(b, site.inputs[0], site.dtype(0))]  # type: ignore[arg-type]


@register
class BiasGeluRule(_Contrib):
    """com.microsoft BiasGelu: Gelu(a + b), erf form."""

    name = "ms-bias-gelu"
    op_type = "BiasGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [gelu_erf(b, b.op("Add", site.inputs[0], site.inputs[1]), site.dtype(0))]


@register
class FastGeluRule(_Contrib):
    """com.microsoft FastGelu: tanh-approximated Gelu of x (+ bias)."""

    name = "ms-fast-gelu"
    op_type = "FastGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        if site.has_input(1):
            x = b.op("Add", x, site.inputs[1])
        return [gelu_tanh(b, x, site.dtype(0))]  # type: ignore[arg-type]


@register
class QuickGeluRule(_Contrib):
    """com.microsoft QuickGelu: x * sigmoid(alpha x), alpha = 1.702 by default."""

    name = "ms-quick-gelu"
    op_type = "QuickGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        scaled = b.op("Mul", x, b.scalar_like(site.attr("alpha", 1.702), site.dtype(0)))
        return [b.op("Mul", x, b.op("Sigmoid", scaled))]


def _skip_sum(site: Site, b: Builder, bias_index: int) -> ir.Value:
    total = b.op("Add", site.inputs[0], site.inputs[1])
    if site.has_input(bias_index):
        total = b.op("Add", total, site.inputs[bias_index])
    return total


def _only_first_outputs(site: Site, supported: Sequence[int]) -> str | None:
    used = [i for i in range(1, site.output_count) if site.output_used(i) and i not in supported]
    return f"output {used[0]} (statistics) is used and not rewritten" if used else None


@register
class SkipLayerNormalizationRule(_Contrib):
    """com.microsoft SkipLayerNormalization: s = x + skip (+ bias); LayerNorm(s) * gamma + beta; s."""

    name = "ms-skip-layer-normalization"
    op_type = "SkipLayerNormalization"

    def check(self, site: Site) -> str | None:
        return _only_first_outputs(site, [3])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _skip_sum(site, b, 4)
        normalized, mean, inv_std = normalize(b, total, [-1], site.attr("epsilon", 1e-12), site.dtype(0))
        y = b.op("Mul", normalized, site.inputs[2])
        if site.has_input(3):
            y = b.op("Add", y, site.inputs[3])
        return [y, mean, inv_std, total][:site.output_count]


@register
class SkipSimplifiedLayerNormalizationRule(_Contrib):
    """com.microsoft SkipSimplifiedLayerNormalization: s = x + skip (+ bias); RMSNorm(s) * gamma; s."""

    name = "ms-skip-simplified-layer-normalization"
    op_type = "SkipSimplifiedLayerNormalization"

    def check(self, site: Site) -> str | None:
        return _only_first_outputs(site, [3])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _skip_sum(site, b, 3)
        normalized, inv_rms = rms_normalize(b, total, [-1], site.attr("epsilon", 1e-12), site.dtype(0))
        y = b.op("Mul", normalized, site.inputs[2])
        return [y, inv_rms, inv_rms, total][:site.output_count]


@register
class SimplifiedLayerNormalizationRule(Rule):
    """ORT's SimplifiedLayerNormalization (default domain, contrib): RMSNorm over the last axes."""

    name = "ms-simplified-layer-normalization"
    family = "contrib"
    op_type = "SimplifiedLayerNormalization"

    def check(self, site: Site) -> str | None:
        if site.attr("axis", -1) != -1:
            return "only axis=-1 is rewritten"
        return _only_first_outputs(site, [])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        normalized, _ = rms_normalize(b, site.inputs[0], [-1], site.attr("epsilon", 1e-5), site.dtype(0))  # type: ignore[arg-type]
        return [b.op("Mul", normalized, site.inputs[1])]
