"""Shape ops whose output rank depends on a run-time value, for targets that need a static rank.

- Unsqueeze(x, axes) with axes computed at run time (of static length k): the output rank is
  rank(x) + k all the same, so it is a Reshape to a shape computed from the axes: 1 at each
  inserted position, x's dims in order elsewhere. OpenVINO's CPU plugin refuses the original
  ("Unsqueeze operation with dynamic rank").
- Reduce*(x, axes, keepdims=0) with several run-time axes: the rank is rank(x) - k, so it is the
  keepdims=1 reduction reshaped to the dims not reduced (OpenVINO's plugin refuses the original
  with two or more run-time axes).
- TopK(x, K) with K computed at run time but bounded by a constant (K = Min(c, n)): a TopK of
  constant c on x padded with c sorting-last values, then the first K (TensorRT needs a constant K).
- MaxPool / AveragePool over one spatial axis: the 2-D pooling over an added axis of size 1, which
  is squeezed out again (TensorRT pools 2-D and 3-D only; Canine's downsampling is 1-D).
- A Constant with no element as ConstantOfShape of its dims: the same empty tensor, from a
  one-element shape (OpenVINO reads an empty constant that an If branch returns with one element).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


def distinct_axes(rank: int, count: int, seed: int) -> np.ndarray:
    """`count` different axes of a rank-`rank` tensor, some written negative: the op's domain."""
    rng = np.random.default_rng(seed)
    axes = rng.permutation(rank)[:count]
    return np.where(rng.random(count) < 0.5, axes - rank, axes).astype(np.int64)


def positions_in(b: Builder, axes: ir.Value | None, rank: int) -> ir.Value:
    """int64 [rank]: 1 at each position the (possibly negative) run-time axes name, else 0."""
    wrapped = b.op("Mod", b.op("Add", axes, b.ints([rank])), b.ints([rank]))
    hits = b.op("Equal", b.unsqueeze(wrapped, [1]), b.ints(list(range(rank))))  # [k, rank]
    return b.reduce("ReduceMax", b.op("Cast", hits, to=7), [0], keepdims=0)


@register
class UnsqueezeRuntimeAxesRule(Rule):
    """Unsqueeze(x, axes) = Reshape(x, s): s[p] = 1 for p in axes mod R, else x's next dim (R = rank + k)."""

    name = "unsqueeze-runtime-axes"
    family = "shapes"
    op_type = "Unsqueeze"
    since = 13

    def check(self, site: Site) -> str | None:
        if site.constant(1) is not None:
            return "the axes are constant already"
        rank, axes = site.rank(0), site.shape(1)
        if rank is None:
            return "the input rank is unknown"
        if axes is None or len(axes) != 1 or axes[0] is None:
            return "the number of axes is not static"
        return None

    def proof_values(self, site: Site, seed: int) -> dict[int, Any]:
        rank, axes = site.rank(0), site.shape(1)
        assert rank is not None and axes is not None and axes[0] is not None
        return {1: distinct_axes(rank + axes[0], axes[0], seed)}

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, axes = site.input(0), site.input(1)
        count = site.shape(1)[0]  # type: ignore[index]
        out_rank = int(site.rank(0)) + int(count)  # type: ignore[arg-type]
        inserted = positions_in(b, axes, out_rank)
        kept = b.op("Sub", b.ints([1]), inserted)
        source = b.op("Max", b.op("Sub", b.op("CumSum", kept, b.const(np.array(0, np.int64))), b.ints([1])),
                      b.ints([0]))
        dims = b.op("Gather", b.op("Shape", x), source, axis=0)
        shape = b.op("Where", b.op("Cast", inserted, to=9), b.ints([1]), dims)
        return [b.op("Reshape", x, shape)]


REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


class _ReduceRuntimeAxes(Rule):
    """Reduce(x, axes, keepdims=0) = Reshape(Reduce(x, axes, keepdims=1), the dims not reduced):
    the rank is rank(x) - k whatever the axes hold; the kept dims come in order from a TopK
    over p + R * reduced[p] (R = rank(x))."""

    family = "shapes"
    since = 18

    def check(self, site: Site) -> str | None:
        if int(site.attr("keepdims", 1)) == 1:
            return "keepdims=1 keeps the rank static already"
        if not site.has_input(1) or site.constant(1) is not None:
            return "the axes are constant (or absent)"
        rank, axes = site.rank(0), site.shape(1)
        if rank is None:
            return "the input rank is unknown"
        if axes is None or len(axes) != 1 or not axes[0]:
            return "the number of axes is not static, or it is zero"
        return None

    def proof_values(self, site: Site, seed: int) -> dict[int, Any]:
        rank, axes = site.rank(0), site.shape(1)
        assert rank is not None and axes is not None and axes[0] is not None
        return {1: distinct_axes(rank, axes[0], seed)}

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank, axes = site.rank(0), site.shape(1)
        assert rank is not None and axes is not None and axes[0] is not None
        count = axes[0]
        attributes: dict[str, Any] = {name: attr for name, attr in site.node.attributes.items()
                                      if name != "keepdims"}
        kept = b.op(site.op_type, site.input(0), site.input(1), keepdims=1, **attributes)
        reduced = positions_in(b, site.input(1), rank)
        keys = b.op("Add", b.ints(list(range(rank))), b.op("Mul", reduced, b.ints([rank])))
        order = b.ops("TopK", keys, b.ints([rank - count]), outputs=2, largest=0, sorted=1)[0]
        return [b.op("Reshape", kept, b.op("Gather", b.op("Shape", kept), order, axis=0))]


def _reduce_rule(op: str) -> type[Rule]:
    rule = type(f"{op}RuntimeAxesRule", (_ReduceRuntimeAxes,), {
        "name": f"{op.lower().replace('reduce', 'reduce-')}-runtime-axes", "op_type": op,
        "__doc__": _ReduceRuntimeAxes.__doc__.replace("Reduce(", f"{op}(")})  # type: ignore[union-attr]
    return register(rule)


for _op in REDUCE_OPS:
    _reduce_rule(_op)


INT32_MAX = 2**31 - 1  # "to the end" for Slice, within int32 for TensorRT 8.x


def _upper_bound(value: ir.Value | None, depth: int = 0) -> int | None:
    """A constant c with value <= c everywhere, read from a Min(c, ...) or ReduceMin(Concat(c, ...))
    it comes from (through Cast, Reshape, Unsqueeze, Squeeze, Identity): detection heads take
    K = min(candidates, n)."""
    from deploycc.graph.graphs import constant_tensor

    if value is None or depth > 6:
        return None
    producer = value.producer()
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type in ("Cast", "Reshape", "Unsqueeze", "Squeeze", "Identity"):
        return _upper_bound(producer.inputs[0], depth + 1)
    operands = list(producer.inputs)
    if producer.op_type == "ReduceMin":  # ReduceMin(Concat(c, n)): torchvision's min() on 1-D sizes
        concat = producer.inputs[0].producer() if producer.inputs[0] is not None else None
        if concat is None or concat.op_type != "Concat":
            return None
        operands = list(concat.inputs)
    elif producer.op_type != "Min":
        return None
    bounds = [constant_tensor(operand) for operand in operands]
    found = [int(np.min(bound)) for bound in bounds if bound is not None and np.asarray(bound).size]
    return min(found) if found else None


@register
class TopKBoundedRule(Rule):
    """TopK(x, K) with K computed at run time but K <= c for a constant c (K = Min(c, n)):
    values, indices = TopK(Concat(x, fill), c), then the first K of each (Slice). fill is the
    lowest float (highest when largest=0) in c positions along the axis, so the padding sorts
    last and the sorted top K of x come first, in the same order. For targets whose TopK needs a
    constant K (TensorRT: the score filtering of torchvision's SSD and Faster R-CNN)."""

    name = "topk-bounded"
    family = "shapes"
    op_type = "TopK"
    since = 10

    def check(self, site: Site) -> str | None:
        if site.constant(1) is not None:
            return "K is a constant already"
        if _upper_bound(site.node.inputs[1]) is None:
            return "K is computed at run time with no constant bound (Min(c, ...))"
        dtype = site.dtype(0)
        if dtype is None or not dtype.is_floating_point():
            return "only float inputs are padded"
        if int(site.attr("sorted", 1)) != 1:
            return "unsorted TopK: its first K need not be the top K"
        if site.rank(0) is None and int(site.attr("axis", -1)) < -1:
            return "the rank of x is not known and the axis counts from the end"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, k = site.inputs[0], site.inputs[1]
        assert x is not None and k is not None
        bound = _upper_bound(site.node.inputs[1])  # read in the model (a proof re-homes the inputs)
        if bound is None:
            raise Decline("K has no constant bound")
        rank = site.rank(0)
        axis = int(site.attr("axis", -1))
        axis = axis % rank if rank is not None else axis  # unknown rank: -1, or counted from the front
        largest = int(site.attr("largest", 1))
        dtype = site.dtype(0)
        limits = np.finfo(dtype.numpy() if dtype is not None else np.float32)
        fill = b.scalar_like(float(limits.min if largest else limits.max), dtype)
        shape = b.op("Shape", x)
        if axis == -1:  # the last axis of x, whatever its rank
            parts = [b.op("Slice", shape, b.ints([0]), b.ints([-1])), b.ints([bound])]
        else:
            parts = [b.op("Slice", shape, b.ints([0]), b.ints([axis]))] if axis > 0 else []
            parts.append(b.ints([bound]))
            if rank is None or axis < rank - 1:  # the dims after the axis (none, past the rank)
                parts.append(b.op("Slice", shape, b.ints([axis + 1]), b.ints([INT32_MAX])))
        padding = b.op("Expand", fill, b.op("Concat", *parts, axis=0) if len(parts) > 1 else parts[0])
        padded = b.op("Concat", x, padding, axis=axis)
        values, indices = b.ops("TopK", padded, b.ints([bound]), outputs=2, axis=axis, largest=largest,
                                sorted=1)
        count = b.op("Reshape", b.op("Cast", k, to=7), b.ints([1]))
        return [b.op("Slice", values, b.ints([0]), count, b.ints([axis])),
                b.op("Slice", indices, b.ints([0]), count, b.ints([axis]))]


POOL_ATTRIBUTES = ("kernel_shape", "strides", "dilations")


class _Pool1dAs2d(Rule):
    """A 1-D pooling as the 2-D one over [N, C, 1, L]: its attributes with 1 (or a zero pad) for
    the added axis, then that axis squeezed out (TensorRT pools 2-D and 3-D only)."""

    family = "shapes"

    def check(self, site: Site) -> str | None:
        if site.rank(0) != 3:
            return "only a 1-D pooling (a rank-3 input) is rewritten" if site.rank(0) is not None \
                else "the input's rank is unknown"
        if site.output_count > 1 and site.output_used(1):
            return "the Indices output is used"
        if site.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return "auto_pad SAME_* is not rewritten (explicit pads are)"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        attributes: dict[str, Any] = {
            name: [1, *site.attr(name)] for name in POOL_ATTRIBUTES if site.attr(name) is not None}
        pads = site.attr("pads")
        if pads is not None:
            attributes["pads"] = [0, pads[0], 0, pads[1]]
        for name in ("ceil_mode", "count_include_pad", "p", "storage_order", "auto_pad"):
            if site.attr(name) is not None:
                attributes[name] = site.attr(name)
        x = site.input(0)
        assert x is not None
        pooled = b.op(self.op_type, b.unsqueeze(x, [2]), **attributes)
        return [b.squeeze(pooled, [2])]


@register
class MaxPool1dRule(_Pool1dAs2d):
    """MaxPool over [N, C, L] = Squeeze(MaxPool over [N, C, 1, L], axis 2), kernel [1, k]."""

    name = "maxpool-1d-as-2d"
    op_type = "MaxPool"


@register
class AveragePool1dRule(_Pool1dAs2d):
    """AveragePool over [N, C, L] = Squeeze(AveragePool over [N, C, 1, L], axis 2), kernel [1, k]."""

    name = "averagepool-1d-as-2d"
    op_type = "AveragePool"


# ConstantOfShape's value types at opsets 9-19 (20 adds the bfloat16 and float8 types)
CONSTANT_OF_SHAPE_DTYPES = frozenset({"FLOAT16", "FLOAT", "DOUBLE", "INT8", "INT16", "INT32", "INT64",
                                      "UINT8", "UINT16", "UINT32", "UINT64", "BOOL"})


@register
class EmptyConstantRule(Rule):
    """Constant(value: empty tensor of dims d) = ConstantOfShape(d, value=0): no element either way,
    and the dims are a constant with one element per axis. torchvision's batched_nms returns
    `torch.empty((0,))` from an If branch, which OpenVINO 2026.4 returns with one element."""

    name = "empty-constant-of-shape"
    family = "shapes"
    op_type = "Constant"
    since = 9

    def check(self, site: Site) -> str | None:
        tensor = site.attr("value")
        if tensor is None:
            return "not a tensor constant"
        if 0 not in tuple(tensor.shape):
            return "the constant has elements"
        if tensor.dtype.name not in CONSTANT_OF_SHAPE_DTYPES:
            return f"ConstantOfShape holds no {tensor.dtype.name.lower()} value before opset 20"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import onnx_ir as ir

        tensor = site.attr("value")
        zero = ir.tensor(np.zeros((1,), dtype=tensor.dtype.numpy()))
        return [b.op("ConstantOfShape", b.ints([int(d) for d in tensor.shape]), value=zero)]
