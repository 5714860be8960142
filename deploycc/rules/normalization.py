"""Normalisation ops into ReduceMean / Sub / Mul / Sqrt / Div, for targets that lack them.

All four share one core: y = (x - mean) / sqrt(var + eps), with mean and var taken over some
axes, then an affine map. Statistics are computed in float32 when the input is float16 and
`stash_type` asks for float32 (the spec's default), as the reference implementations do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

FLOAT = 1  # onnx TensorProto.FLOAT, the stash_type default


def _stash(site: Site, b: Builder, x: ir.Value) -> tuple[ir.Value, ir.DataType | None, bool]:
    """x in the dtype statistics are computed in, that dtype, and whether to Cast back."""
    import onnx_ir as ir

    dtype = site.dtype(0)
    if dtype is not None and dtype.name in ("FLOAT16", "BFLOAT16") and \
            site.attr("stash_type", FLOAT) == FLOAT:
        return b.op("Cast", x, to=FLOAT), ir.DataType.FLOAT, True
    return x, dtype, False


def normalize(b: Builder, x: ir.Value, axes: Sequence[int], eps: float,
               dtype: ir.DataType | None) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(x - mean) * inv_std, with mean and inv_std kept for the optional outputs."""
    mean = b.reduce("ReduceMean", x, axes)
    centered = b.op("Sub", x, mean)
    variance = b.reduce("ReduceMean", b.op("Mul", centered, centered), axes)
    std = b.op("Sqrt", b.op("Add", variance, b.scalar_like(eps, dtype)))
    inv_std = b.op("Div", b.scalar_like(1.0, dtype), std)  # Div, not Reciprocal: TensorRT 8.2 lacks it
    return b.op("Div", centered, std), mean, inv_std


def rms_normalize(b: Builder, x: ir.Value, axes: Sequence[int], eps: float,
                  dtype: ir.DataType | None) -> tuple[ir.Value, ir.Value]:
    """x / sqrt(mean(x^2) + eps), with 1 / sqrt(...) kept for an optional statistics output."""
    mean_square = b.reduce("ReduceMean", b.op("Mul", x, x), axes)
    rms = b.op("Sqrt", b.op("Add", mean_square, b.scalar_like(eps, dtype)))
    return b.op("Div", x, rms), b.op("Div", b.scalar_like(1.0, dtype), rms)


def _require_rank(site: Site, index: int = 0) -> str | None:
    rank = site.rank(index)
    if rank is None:
        return "the input's rank is unknown (run shape inference)"
    axis = site.attr("axis", -1)
    if rank == 0 or not -rank <= axis < rank:
        return f"axis {axis} does not fit an input of rank {rank}"
    return None


@register
class LayerNormalizationRule(Rule):
    """LayerNormalization: y = (x - E[x]) / sqrt(Var[x] + eps) * scale + bias over axes [axis, rank).

    Mean and InvStdDev outputs, when used, are the statistics with keepdims=1 (in stash type).
    """

    name = "layer-normalization"
    family = "normalization"
    op_type = "LayerNormalization"
    since = 17

    def check(self, site: Site) -> str | None:
        return _require_rank(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank = site.rank(0)
        assert rank is not None
        axis = site.attr("axis", -1)
        axes = list(range(axis % rank, rank))
        x, stat_dtype, cast_back = _stash(site, b, site.inputs[0])  # type: ignore[arg-type]
        normalized, mean, inv_std = normalize(b, x, axes, site.attr("epsilon", 1e-5), stat_dtype)
        if cast_back:
            normalized = b.op("Cast", normalized, to=site.dtype(0).value)  # type: ignore[union-attr]
        y = b.op("Mul", normalized, site.inputs[1])
        if site.has_input(2):
            y = b.op("Add", y, site.inputs[2])
        outputs = [y]
        if site.output_count > 1:
            outputs.append(mean)
        if site.output_count > 2:
            outputs.append(inv_std)
        return outputs


@register
class RMSNormalizationRule(Rule):
    """RMSNormalization (opset 23): y = x / sqrt(mean(x^2 over [axis, rank)) + eps) * scale."""

    name = "rms-normalization"
    family = "normalization"
    op_type = "RMSNormalization"
    since = 23

    def check(self, site: Site) -> str | None:
        return _require_rank(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank = site.rank(0)
        assert rank is not None
        axes = list(range(site.attr("axis", -1) % rank, rank))
        x, stat_dtype, cast_back = _stash(site, b, site.inputs[0])  # type: ignore[arg-type]
        y, _ = rms_normalize(b, x, axes, site.attr("epsilon", 1e-5), stat_dtype)
        if cast_back:
            y = b.op("Cast", y, to=site.dtype(0).value)  # type: ignore[union-attr]
        return [b.op("Mul", y, site.inputs[1])]


def _per_channel(b: Builder, param: ir.Value | None, rank: int) -> ir.Value | None:
    """A [C] parameter reshaped to [C, 1, ..., 1] so it broadcasts over N, C, spatial."""
    if param is None:
        return None
    return b.unsqueeze(param, list(range(1, rank - 1))) if rank > 2 else param


@register
class InstanceNormalizationRule(Rule):
    """InstanceNormalization: y = scale[c] * (x - mean) / sqrt(var + eps) + B[c], stats over spatial axes."""

    name = "instance-normalization"
    family = "normalization"
    op_type = "InstanceNormalization"

    def check(self, site: Site) -> str | None:
        rank = site.rank(0)
        if rank is None:
            return "the input's rank is unknown (run shape inference)"
        return None if rank >= 3 else f"needs an (N, C, spatial...) input, got rank {rank}"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank = site.rank(0)
        assert rank is not None
        x = site.inputs[0]
        assert x is not None
        normalized, _, _ = normalize(b, x, list(range(2, rank)), site.attr("epsilon", 1e-5), site.dtype(0))
        y = b.op("Mul", normalized, _per_channel(b, site.inputs[1], rank))
        return [b.op("Add", y, _per_channel(b, site.inputs[2], rank))]


@register
class GroupNormalizationRule(Rule):
    """GroupNormalization: x viewed as (N, G, C/G * spatial), normalised per group, then affine.

    Opset 18 takes scale/bias per group ([G]); opset 21 per channel ([C]), applied after the
    view is restored to x's shape.
    """

    name = "group-normalization"
    family = "normalization"
    op_type = "GroupNormalization"
    since = 18

    def check(self, site: Site) -> str | None:
        rank = site.rank(0)
        if rank is None:
            return "the input's rank is unknown (run shape inference)"
        if rank < 3:
            return f"needs an (N, C, spatial...) input, got rank {rank}"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank = site.rank(0)
        assert rank is not None
        groups = site.attr("num_groups")
        if groups is None:
            raise Decline("num_groups attribute missing")
        x, stat_dtype, cast_back = _stash(site, b, site.inputs[0])  # type: ignore[arg-type]
        grouped = b.op("Reshape", x, b.ints([0, groups, -1]))
        normalized, _, _ = normalize(b, grouped, [2], site.attr("epsilon", 1e-5), stat_dtype)
        if cast_back:
            normalized = b.op("Cast", normalized, to=site.dtype(0).value)  # type: ignore[union-attr]
        scale, bias = site.inputs[1], site.inputs[2]
        if site.opset < 21:  # per-group parameters, applied in the grouped view
            normalized = b.op("Add", b.op("Mul", normalized, b.unsqueeze(scale, [1])),  # type: ignore[arg-type]
                              b.unsqueeze(bias, [1]))  # type: ignore[arg-type]
            return [b.op("Reshape", normalized, b.op("Shape", site.inputs[0]))]
        restored = b.op("Reshape", normalized, b.op("Shape", site.inputs[0]))
        y = b.op("Mul", restored, _per_channel(b, scale, rank))
        return [b.op("Add", y, _per_channel(b, bias, rank))]
