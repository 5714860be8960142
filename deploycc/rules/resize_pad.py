"""Pad and Resize modes a target lacks, where an exact rewrite exists; a clear refusal otherwise.

- Pad mode 'wrap' (opset 19) with constant pads: each padded axis becomes
  Concat(x[-before:], x, x[:after]) (the input seen as a ring), exact when pads do not exceed
  the axis.
- Resize 'nearest' with integer scale factors >= 1 and asymmetric/floor rounding: each output
  pixel copies input pixel floor(i / s), which is Expand-based tiling (Unsqueeze, Expand,
  Reshape) per spatial axis.
- Resize with static resized axes and constant scales/sizes, any mode: separable per axis, so it
  is one MatMul (linear, cubic, antialias) or Gather (nearest) per resized axis, with the 1-D
  weights computed by running the Resize itself (ONNX Runtime's, else onnx's reference); a
  dynamic axis it does not resize (the batch, at scale 1) stays as it is.
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


OWN_LENGTH = -1  # in sizes read by _own_sizes: the entry is the input's own length on that axis


def _own_dims_read(part: ir.Value | None, x: ir.Value, rank: int) -> tuple[int, int] | None:
    """(start, end) when `part` is dims start..end of x's shape, read as Shape(x, start, end)
    (the dynamo exporter) or Slice(Shape(x), start, end, axis 0) (TorchScript); else None."""
    from deploycc.graph.graphs import constant_tensor

    read = part.producer() if part is not None else None
    if read is None or read.domain not in ("", "ai.onnx"):
        return None
    if read.op_type == "Shape" and read.inputs[0] is x:
        start, end = read.attributes.get_int("start", 0), read.attributes.get_int("end", rank)
    elif read.op_type == "Slice" and len(read.inputs) in (3, 4) and read.inputs[0] is not None:
        shape = read.inputs[0].producer()
        bounds = [constant_tensor(v) for v in read.inputs[1:]]
        if shape is None or shape.op_type != "Shape" or shape.inputs[0] is not x or shape.attributes or \
                any(b is None or np.asarray(b).size != 1 for b in bounds):
            return None
        start, end, *axis = (int(np.asarray(b).reshape(-1)[0]) for b in bounds)
        if axis and axis[0] not in (0, -1):
            return None
    else:
        return None
    start, end = (min(max(i + rank if i < 0 else i, 0), rank) for i in (start, end))
    return (start, end) if end > start else None


def _own_sizes(site: Site) -> np.ndarray | None:
    """Sizes that are a Concat of constants and of the input's own dims read through Shape, with
    OWN_LENGTH where an entry is the input's length on its own axis: the exporters write
    F.interpolate(x, size=(224, 224)) so, and with a dynamic batch it is not a constant. None
    for anything else."""
    from deploycc.graph.graphs import constant_tensor

    # The node's own inputs, not the site's: a proof runs the rule on copies without producers.
    inputs = site.node.inputs
    sizes, x = (inputs[3], inputs[0]) if len(inputs) > 3 else (None, None)
    concat = sizes.producer() if sizes is not None else None
    rank = len(x.shape) if x is not None and x.shape is not None else None
    if concat is None or concat.op_type != "Concat" or rank is None or x is None:
        return None
    entries: list[int] = []
    for part in concat.inputs:
        known = constant_tensor(part)
        if known is not None:
            entries += [int(v) for v in np.asarray(known).reshape(-1)]
            continue
        dims = _own_dims_read(part, x, rank)
        if dims is None or dims[0] != len(entries):  # dims read onto other axes: not their own
            return None
        entries += [OWN_LENGTH] * (dims[1] - dims[0])
    return np.array(entries, np.int64) if OWN_LENGTH in entries and len(entries) == rank else None


def _resize_inputs(site: Site) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(roi, scales, sizes) as constants over every axis (None where absent or not constant);
    sizes may hold OWN_LENGTH (_own_sizes)."""
    def constant(index: int) -> np.ndarray | None:
        value = site.constant(index) if site.has_input(index) else None
        return None if value is None or value.size == 0 else np.asarray(value)

    sizes = constant(3)
    return constant(1), constant(2), sizes if sizes is not None or not site.has_input(3) else _own_sizes(site)


@register
class ResizeSeparableRule(Rule):
    """Resize = per resized axis a, y = W_a x along a: W_a is the 1-D interpolation matrix (out x
    in), built by running the Resize on the identity (_matrix says which). The resized axes must
    be static; an axis at scale 1 may be dynamic (CrossViT's bicubic 240 -> 224 with a dynamic
    batch, which TensorRT cannot run: it has no cubic mode).

    Linear and cubic interpolation, antialias, exclude_outside and every coordinate transform are
    separable per axis, so the N-D Resize is a MatMul per axis; nearest picks one input per output,
    a Gather. Declined: keep_aspect_ratio_policy (its scale couples the axes) and a non-zero
    extrapolation value.
    """

    name = "resize-separable"
    family = "resize_pad"
    op_type = "Resize"
    since = 11
    MAX_AXIS = 4096

    def _dims(self, site: Site) -> tuple[list[int | None], list[int | None]] | None:
        """Input and output dims (None where dynamic), or None when a rank is unknown."""
        shape, out = site.shape(0), site.node.outputs[0].shape
        if shape is None or out is None or len(out) != len(shape):
            return None
        return shape, [d if isinstance(d, int) else None for d in out]

    def _unscaled(self, site: Site, axis: int) -> bool:
        """Whether the axis keeps every element where it is: not listed in `axes`, or a scale of
        exactly 1 (then every coordinate transform but tf_crop_and_resize maps x to x). A dynamic
        batch is such an axis, and needs no matrix."""
        if site.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
            return False
        _, scales, sizes = _resize_inputs(site)
        axes = site.attr("axes")
        rank = len(site.shape(0) or [])
        listed = [int(a) % rank for a in axes] if axes is not None else list(range(rank))
        if axis not in listed:
            return True
        if sizes is not None:
            return int(sizes[listed.index(axis)]) == OWN_LENGTH
        return scales is not None and float(scales[listed.index(axis)]) == 1.0

    def check(self, site: Site) -> str | None:
        dims = self._dims(site)
        if dims is None:
            return "the input or output rank is unknown"
        dynamic = [axis for axis, (i, o) in enumerate(zip(*dims, strict=True)) if i is None or o is None]
        if any(not self._unscaled(site, axis) for axis in dynamic):
            return "a resized axis is dynamic (a dynamic axis is taken only with a scale of 1)"
        shape, out = dims
        dtype = site.dtype(0)
        mode = site.attr("mode", "nearest")
        if mode != "nearest" and (dtype is None or not dtype.is_floating_point()):
            return "linear/cubic interpolation of a non-float input rounds; not rewritten"
        if site.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            return "keep_aspect_ratio_policy couples the axes' scales"
        if float(site.attr("extrapolation_value", 0.0)) != 0.0 and \
                site.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
            return "a non-zero extrapolation value is not a linear map"
        roi, scales, sizes = _resize_inputs(site)
        if scales is None and sizes is None:
            return "scales and sizes are not constant"
        if site.has_input(1) and site.input(1) is not None and roi is None and \
                site.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
            return "roi is not constant"
        if max((d for d in [*shape, *out] if d is not None), default=0) > self.MAX_AXIS:
            return f"an axis is longer than {self.MAX_AXIS}"
        return None

    def _matrix(self, site: Site, axis: int, in_len: int, out_len: int) -> np.ndarray:
        """W (out_len x in_len): column j is the 1-D Resize of the j-th unit vector, as ONNX Runtime
        computes it (its float32 cubic weights differ from the spec's exact ones by 1e-5: times
        inputs in the thousands and 16 taps, 0.05 apart, against 0.001 with its own), or as onnx's
        reference computes it where ORT does not run the node."""
        import onnx_ir as ir

        from deploycc.verify.runner import run_ort, run_reference

        attributes = [ir.Attr(a.name, a.type, a.value) for a in site.node.attributes.values()
                      if a.name not in ("axes", "keep_aspect_ratio_policy")]
        roi, scales, sizes = _resize_inputs(site)
        axes = site.attr("axes")
        rank = len(site.shape(0) or [])
        position = list(np.asarray(axes) % rank).index(axis) if axes is not None else axis
        count = len(axes) if axes is not None else rank
        # a 2-D problem [in_len, in_len] resized along its last axis only: row j is Resize(e_j)
        inputs = ["x", "roi", "scales", "sizes"]
        feeds: dict[str, np.ndarray] = {}
        feeds["roi"] = np.array([0.0, float(roi[position]), 1.0, float(roi[position + count])], np.float32) \
            if roi is not None else np.zeros(0, np.float32)
        if sizes is not None:
            feeds["scales"] = np.zeros(0, np.float32)
            feeds["sizes"] = np.array([in_len, out_len], np.int64)
        else:
            assert scales is not None
            feeds["scales"] = np.array([1.0, float(scales[position])], np.float32)
            feeds["sizes"] = np.zeros(0, np.int64)

        def model(dtype: type) -> tuple[bytes, dict[str, np.ndarray]]:
            used = {"x": np.eye(in_len, dtype=dtype), **{n: feeds[n] for n in inputs[1:] if feeds[n].size}}
            values = {n: ir.Value(name=n, type=ir.TensorType(ir.DataType.from_numpy(a.dtype)),
                                  shape=ir.Shape(a.shape)) for n, a in used.items()}
            node = ir.Node("", "Resize", [values.get(n) for n in inputs], attributes=attributes,
                           num_outputs=1)
            node.outputs[0].name = "y"
            graph = ir.Graph(list(values.values()), node.outputs, nodes=[node],
                             opset_imports={"": max(site.opset, 18)})
            return ir.serde.serialize_model(ir.Model(graph, ir_version=10)).SerializeToString(), used

        try:
            rows = np.asarray(next(iter(run_ort(*model(np.float32)).values())))
        except Exception:  # ORT raises its own exception types for a node it cannot run
            proto, used = model(np.float64)  # the reference, in float64
            rows = np.asarray(next(iter(run_reference(proto, used).values())))
        if rows.shape != (in_len, out_len):
            raise ValueError(f"the 1-D resize of axis {axis} gives {rows.shape}, not {(in_len, out_len)}")
        return np.asarray(rows, dtype=np.float64).T

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        dims = self._dims(site)
        assert dims is not None
        shape, out = dims
        rank = len(shape)
        nearest = site.attr("mode", "nearest") == "nearest"
        dtype = site.dtype(0)
        y = site.input(0)
        assert y is not None
        for axis in range(rank):
            length, out_length = shape[axis], out[axis]
            if length is None or out_length is None:
                continue  # unscaled (check): every element stays
            if length == out_length and self._is_identity(site, axis, length):
                continue
            weights = self._matrix(site, axis, length, out_length)
            if nearest:
                picks = weights.argmax(axis=1)
                if not np.array_equal(weights, np.eye(length)[picks]):
                    raise ValueError("nearest weights are not a selection")
                y = b.op("Gather", y, b.ints(picks.tolist()), axis=axis)
                continue
            matrix = b.const(weights.astype(dtype.numpy() if dtype is not None else np.float32))
            if axis == rank - 1:
                y = b.op("MatMul", y, b.op("Transpose", matrix, perm=[1, 0]))
            elif axis == rank - 2:
                y = b.op("MatMul", matrix, y)
            else:
                perm = [a for a in range(rank) if a != axis] + [axis]
                back = [perm.index(a) for a in range(rank)]
                moved = b.op("MatMul", b.op("Transpose", y, perm=perm),
                             b.op("Transpose", matrix, perm=[1, 0]))
                y = b.op("Transpose", moved, perm=back)
        return [y]

    def proof_values(self, site: Site, seed: int) -> dict[int, np.ndarray]:
        """Sizes that read the input's own dims (_own_sizes) are an input of the proof's copy:
        it gets the sizes the original computes at the proof's shape."""
        own, shape = _own_sizes(site), site.shape(0)
        if own is None or shape is None or site.constant(3) is not None:
            return {}
        return {3: np.array([shape[axis] if size == OWN_LENGTH else size for axis, size in enumerate(own)],
                            np.int64)}

    def _is_identity(self, site: Site, axis: int, length: int) -> bool:
        return bool(np.array_equal(self._matrix(site, axis, length, length), np.eye(length)))
