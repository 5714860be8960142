"""Pad and Resize modes a target lacks, where an exact rewrite exists; a clear refusal otherwise.

- Pad mode 'wrap' (opset 19) with constant pads: each padded axis becomes
  Concat(x[-before:], x, x[:after]) (the input seen as a ring), exact when pads do not exceed
  the axis.
- Resize 'nearest' with integer scale factors >= 1 and asymmetric/floor rounding: each output
  pixel copies input pixel floor(i / s), which is Expand-based tiling (Unsqueeze, Expand,
  Reshape) per spatial axis.
Other modes (cubic, linear with other coordinate modes, fractional nearest) have no exact
rewrite into simpler ops and are declined with the mode named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

INT64_MAX = np.iinfo(np.int64).max


def _pads(site: Site) -> np.ndarray | None:
    """Pads as [begin..., end...] for every axis, with the axes input folded in."""
    pads = site.attr("pads") if site.opset < 11 else site.constant(1)
    rank = site.rank(0)
    if pads is None or rank is None:
        return None
    pads = np.asarray(pads, dtype=np.int64)
    axes = site.constant(3) if site.opset >= 18 and site.has_input(3) else None
    if axes is None:
        return pads if pads.size == 2 * rank else None
    full = np.zeros(2 * rank, np.int64)
    for i, axis in enumerate(np.asarray(axes) % rank):
        full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
    return full


def _slice(b: Builder, x: ir.Value, axis: int, start: int, end: int) -> ir.Value:
    return b.op("Slice", x, b.ints([start]), b.ints([end]), b.ints([axis]))


@register
class PadWrapRule(Rule):
    """Pad mode='wrap': per axis Concat(x[n-before:], x, x[:after]) with constant pads <= axis size."""

    name = "pad-wrap"
    family = "resize_pad"
    op_type = "Pad"
    since = 19

    def check(self, site: Site) -> str | None:
        mode = site.attr("mode", "constant")
        if mode != "wrap":
            return f"Pad mode {mode!r} has no rewrite here (only 'wrap' is rewritten)"
        pads = _pads(site)
        if pads is None:
            return "pads are not constant (or the rank is unknown)"
        if (pads < 0).any():
            return "negative pads (cropping) are not rewritten"
        shape, rank = site.shape(0), len(pads) // 2
        for axis in range(rank):
            size = shape[axis] if shape else None
            widest = max(pads[axis], pads[axis + rank])
            if widest and (size is None or widest > size):
                return f"axis {axis}: pads larger than the axis (or a dynamic axis) wrap more than once"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        pads = _pads(site)
        assert pads is not None
        rank = len(pads) // 2
        y = site.inputs[0]
        assert y is not None
        for axis in range(rank):
            before, after = int(pads[axis]), int(pads[axis + rank])
            if not before and not after:
                continue
            parts = []
            if before:
                parts.append(_slice(b, y, axis, -before, INT64_MAX))
            parts.append(y)
            if after:
                parts.append(_slice(b, y, axis, 0, after))
            y = b.op("Concat", *parts, axis=axis)
        return [y]


@register
class ResizeNearestIntegerRule(Rule):
    """Resize nearest with integer scales (asymmetric, floor): repeat each element s times per axis."""

    name = "resize-nearest-integer"
    family = "resize_pad"
    op_type = "Resize"
    since = 11

    def check(self, site: Site) -> str | None:
        mode = site.attr("mode", "nearest")
        if mode != "nearest":
            return f"Resize mode {mode!r} has no exact rewrite into simpler ops"
        if site.attr("coordinate_transformation_mode", "half_pixel") != "asymmetric" or \
                site.attr("nearest_mode", "round_prefer_floor") != "floor":
            return "only asymmetric coordinates with floor rounding are rewritten"
        scales = site.constant(2)
        if scales is None or scales.size == 0:
            return "scales are not constant (sizes-based Resize is not rewritten)"
        if not np.all(scales >= 1) or not np.all(np.equal(np.mod(scales, 1), 0)):
            return f"scales {scales.tolist()} are not integers >= 1"
        shape = site.shape(0)
        if shape is None or any(d is None for d in shape):
            return "the input shape is dynamic"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        scales = site.constant(2)
        shape = site.shape(0)
        assert scales is not None and shape is not None
        y = site.inputs[0]
        assert y is not None
        current = [int(d) for d in shape]  # type: ignore[arg-type]
        for axis, scale in enumerate(int(s) for s in scales):
            if scale == 1:
                continue
            expanded = b.unsqueeze(y, [axis + 1])  # (..., n, 1, ...) -> (..., n, s, ...)
            target = [*current[:axis + 1], scale, *current[axis + 1:]]
            y = b.op("Expand", expanded, b.ints(target))
            current[axis] *= scale
            y = b.op("Reshape", y, b.ints(current))
        return [y]
