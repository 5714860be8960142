"""Old op forms that converters and newer runtimes no longer accept, into their modern forms.

- Upsample (deprecated at opset 10): Resize with the same scales and mode.
- Clip with min/max attributes (opset < 11): Max/Min against constants, valid at any opset.
- Shape with start/end (opset 15): Shape then Slice, for models going below opset 15.
- Reshape with allowzero=1 (opset 14, set by dynamo exports) where the shape holds no constant 0.
- Split with num_outputs (opset 18) on a static axis: the chunk sizes as an input.
- Ops whose attribute became an input (ReduceX axes at 13/18, Squeeze/Unsqueeze/Split at 13)
  are moved by the opset converter's adapters; the builder emits the right form for new nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


@register
class UpsampleRule(Rule):
    """Upsample(x, scales) = Resize(x, roi=[], scales) with mode nearest (asymmetric, floor) or linear."""

    name = "upsample-to-resize"
    family = "old_forms"
    op_type = "Upsample"
    since = 10  # below 10 Upsample is current; the opset converter's adapters replace it

    def check(self, site: Site) -> str | None:
        if site.constant(1) is None:
            return "scales is not a constant"
        mode = site.attr("mode", "nearest")
        if mode not in ("nearest", "linear", "bilinear"):
            return f"mode {mode!r} has no Resize equivalent"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        mode = "linear" if site.attr("mode", "nearest") in ("linear", "bilinear") else "nearest"
        scale_values = b.const(np.asarray(site.constant(1), dtype=np.float32))
        if site.opset == 10:
            return [b.op("Resize", site.inputs[0], scale_values, mode=mode)]
        attributes = {"mode": mode}
        if mode == "nearest":
            attributes.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        else:
            attributes.update(coordinate_transformation_mode="asymmetric")
        return [b.op("Resize", site.inputs[0], b.const(np.zeros(0, np.float32)), scale_values,
                     **attributes)]


@register
class ClipAttributesRule(Rule):
    """Clip-6 (min/max attributes): min(max(x, min), max), the bounds as constants."""

    name = "clip-attributes"
    family = "old_forms"
    op_type = "Clip"
    until = 10

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if dtype is not None and not dtype.is_floating_point():
            return "Clip-6 is defined for floating point only"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, dtype = site.inputs[0], site.dtype(0)
        low = site.attr("min", float(np.finfo(np.float32).min))
        high = site.attr("max", float(np.finfo(np.float32).max))
        return [b.op("Min", b.op("Max", x, b.scalar_like(low, dtype)), b.scalar_like(high, dtype))]


@register
class ShapeStartEndRule(Rule):
    """Shape<start=s, end=e>(x) = Slice(Shape(x), [s], [e], [0]): the same clamping and wrapping,
    so a model can go below opset 15, where Shape has no start and end."""

    name = "shape-start-end"
    family = "old_forms"
    op_type = "Shape"
    since = 15

    def check(self, site: Site) -> str | None:
        if site.attr("start", 0) == 0 and site.attr("end") is None:
            return "Shape takes the whole shape; it means the same at every opset"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        end = site.attr("end")
        whole = b.op("Shape", site.inputs[0])
        return [b.op("Slice", whole, b.ints([site.attr("start", 0)]),
                     b.ints([end if end is not None else np.iinfo(np.int64).max]), b.ints([0]))]


def _holds_a_written_zero(value: ir.Value | None) -> bool:
    """The shape tensor holds a 0 written as a constant (directly, or as a part of a Concat)."""
    from deploycc.graph.graphs import constant_tensor

    if value is None:
        return False
    constant = constant_tensor(value)
    if constant is not None:
        return bool(np.any(np.asarray(constant) == 0))
    producer = value.producer()
    if producer is not None and producer.op_type == "Concat" and producer.domain in ("", "ai.onnx"):
        return any(_holds_a_written_zero(part) for part in producer.inputs)
    return False


@register
class ReshapeAllowzeroRule(Rule):
    """Reshape<allowzero=1>(x, shape) = Reshape(x, shape) wherever the original runs on an x with
    an element: allowzero only changes what a 0 in shape means, and a shape with a 0 keeps no
    element, so on such an x the original fails. A model can then go below opset 14 (dynamo
    exports set it, on shapes computed from dims: wav2vec2's (length // 10) - 1). Only an empty
    x, with a 0 computed at run time, would be reshaped otherwise; a 0 written as a constant
    says an empty tensor is meant, and is declined."""

    name = "reshape-allowzero"
    family = "old_forms"
    op_type = "Reshape"
    since = 14

    def check(self, site: Site) -> str | None:
        if site.attr("allowzero", 0) == 0:
            return "allowzero is 0: Reshape means the same at every opset"
        if _holds_a_written_zero(site.input(1)):
            return "the shape holds a constant 0 (an empty tensor, whose meaning allowzero changes)"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Reshape", site.inputs[0], site.inputs[1])]

    def proof_values(self, site: Site, seed: int) -> dict[int, np.ndarray]:
        """A shape that fits any data: ones, then -1 for the rest."""
        if site.constant(1) is not None:
            return {}
        length = (site.shape(1) or [1])[0] or 1
        return {1: np.array([1] * (length - 1) + [-1], dtype=np.int64)}


@register
class SplitNumOutputsRule(Rule):
    """Split<num_outputs=n>(x) = Split(x, sizes) with sizes = [c] * (n - 1) + [d - c * (n - 1)],
    c = ceil(d / n), d the static size of the axis: the spec's chunks, named, so a model can go
    below opset 18."""

    name = "split-num-outputs"
    family = "old_forms"
    op_type = "Split"
    since = 18

    def check(self, site: Site) -> str | None:
        if site.attr("num_outputs") is None:
            return "the split sizes are given: Split means the same at every opset"
        shape = site.shape(0)
        axis = site.attr("axis", 0)
        if shape is None or shape[axis % len(shape)] is None:
            return "the size of the split axis is not static"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        count = int(site.attr("num_outputs"))
        axis = site.attr("axis", 0)
        shape = site.shape(0)
        assert shape is not None
        size = int(shape[axis % len(shape)])  # type: ignore[arg-type]
        chunk = -(-size // count)
        sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
        return b.ops("Split", site.inputs[0], b.ints(sizes), outputs=count, axis=axis)
