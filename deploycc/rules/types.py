"""Types a target cannot carry.

- float64 -> float32, for targets without float64 (TensorRT): initializers, Constant values,
  Cast(to=DOUBLE) and dtype attributes become float32, then types are inferred again. A whole
  -graph change, proven by running the graph before and after. Refused, with the value, when a
  float64 initializer holds a finite value beyond float32's range, and when a graph input or
  output is float64 (the signature is the user's contract).
- INT64 Slice bounds -> int32 range, for TensorRT 8.x (it carries int64 as int32, clamping):
  exporters write INT64_MAX as "to the end"; clamping to INT32_MAX is exact for every axis
  shorter than 2^31. Any other int64 value outside int32 is left for check to report, with its
  range; it is not silently clamped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.graph.graphs import cast_destination
from deploycc.rules.base import Builder, GraphRule, Rule, Site
from deploycc.rules.catalog import register, register_graph

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import Target

INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
FLOAT32_MAX = float(np.finfo(np.float32).max)
DOUBLE, FLOAT = 11, 1
DTYPE_ATTRIBUTES = {"Cast": "to", "ConstantOfShape": None, "EyeLike": "dtype", "RandomNormal": "dtype",
                    "RandomUniform": "dtype", "RandomNormalLike": "dtype", "RandomUniformLike": "dtype",
                    "CastLike": None}


def _overflows(array: np.ndarray | None) -> bool:
    if array is None or array.size == 0:
        return False
    return bool((array > INT32_MAX).any() or (array < INT32_MIN).any())


@register
class SliceBoundsInt32Rule(Rule):
    """Slice starts/ends beyond int32 clamped to int32: exact, since they are clamped to the axis anyway."""

    name = "slice-bounds-int32"
    family = "types"
    op_type = "Slice"
    since = 10

    def check(self, site: Site) -> str | None:
        starts, ends = site.constant(1), site.constant(2)
        if starts is None or ends is None:
            return "starts/ends are not constant"
        if not (_overflows(starts) or _overflows(ends)):
            return "starts/ends already fit int32"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        starts = np.clip(site.constant(1), INT32_MIN, INT32_MAX).astype(np.int64)  # type: ignore[arg-type]
        ends = np.clip(site.constant(2), INT32_MIN, INT32_MAX).astype(np.int64)  # type: ignore[arg-type]
        return [b.op("Slice", site.inputs[0], b.const(starts), b.const(ends), *site.inputs[3:])]


def float64_blockers(model: ir.Model) -> list[str]:
    """Why float64 cannot be narrowed here (empty when it can)."""
    graph = model.graph
    problems = [f"graph {kind} '{v.name}' is float64 (the model's signature; export it as float32)"
                for kind, values in (("input", graph.inputs), ("output", graph.outputs))
                for v in values if v.dtype is not None and v.dtype.name == "DOUBLE"
                and v.name not in graph.initializers]
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if tensor is None or tensor.dtype.name != "DOUBLE":
            continue
        array = tensor.numpy()
        finite = array[np.isfinite(array)]
        if finite.size and float(np.abs(finite).max()) > FLOAT32_MAX:
            problems.append(f"initializer '{name}' holds {float(np.abs(finite).max()):.3g}, beyond float32")
    return problems


def has_float64(model: ir.Model) -> bool:
    from deploycc.graph.graphs import all_nodes

    graph = model.graph
    for value in graph.initializers.values():
        if value.const_value is not None and value.const_value.dtype.name == "DOUBLE":
            return True
    return any(v.dtype is not None and v.dtype.name == "DOUBLE"
               for node in all_nodes(graph) for v in [*node.inputs, *node.outputs] if v is not None)


def narrow_float64(model: ir.Model) -> int:
    """Rewrite every float64 tensor, constant and dtype attribute to float32; the count changed."""
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    changed = 0
    graph = model.graph
    for value in graph.initializers.values():
        tensor = value.const_value
        if tensor is not None and tensor.dtype.name == "DOUBLE":
            value.const_value = ir.tensor(tensor.numpy().astype(np.float32), name=tensor.name)
            value.dtype = ir.DataType.FLOAT
            changed += 1
    for sub in all_graphs(graph):
        for node in sub:
            for attr in list(node.attributes.values()):
                if attr.type.name == "TENSOR" and attr.value.dtype.name == "DOUBLE":
                    node.attributes[attr.name] = ir.AttrTensor(
                        attr.name, ir.tensor(attr.value.numpy().astype(np.float32), name=attr.value.name))
                    changed += 1
                elif attr.type.name == "INT" and attr.value == DOUBLE and \
                        DTYPE_ATTRIBUTES.get(node.op_type) == attr.name:
                    node.attributes[attr.name] = ir.AttrInt64(attr.name, FLOAT)
                    changed += 1
            for value in node.outputs:
                if value.dtype is not None and value.dtype.name == "DOUBLE" and not value.is_graph_output():
                    value.dtype = ir.DataType.FLOAT
    return changed


@register_graph
class Float64ToFloat32Rule(GraphRule):
    """float64 -> float32 in the whole graph: every float64 tensor, constant and dtype attribute narrowed,
    for targets without float64 (TensorRT); refused when a value exceeds float32 or the model's
    own inputs or outputs are float64."""

    name = "float64-to-float32"
    family = "types"
    op_type = "float64"
    done = "tensor(s) or attribute(s) narrowed"

    def refused(self, model: ir.Model, target: Target) -> list[ir.Node] | None:
        return [] if "float64" in target.dtypes.unsupported and has_float64(model) else None

    def blockers(self, model: ir.Model) -> list[str]:
        return float64_blockers(model)

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        return narrow_float64(model)


SMALL_FLOATS = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1")


class _SaturatingCast(Rule):
    """Shared by Cast and CastLike: clip to the destination's finite range (NaN kept), then cast
    without saturating. Values in range round as before, so the result is the spec's saturation."""

    family = "types"
    since = 19

    def check(self, site: Site) -> str | None:
        if int(site.attr("saturate", 1)) == 0:
            return "the cast does not saturate"
        destination = cast_destination(site.node)
        if destination is None or destination.name not in SMALL_FLOATS:
            return "the destination is not a float8/float4 type"
        source = site.dtype(0)
        if source is None or not source.is_floating_point():
            return "the input is not floating point"
        return None

    def clipped(self, site: Site, b: Builder) -> ir.Value:
        import ml_dtypes

        destination = cast_destination(site.node)
        assert destination is not None
        largest = float(ml_dtypes.finfo(destination.numpy()).max)
        x = site.input(0)
        assert x is not None
        low, high = b.scalar_like(-largest, site.dtype(0)), b.scalar_like(largest, site.dtype(0))
        clipped = b.op("Clip", x, low, high)
        return b.op("Where", b.op("IsNaN", x), x, clipped)  # NaN stays NaN (OpenVINO's Clip gives -max)


@register
class SaturatingCastRule(_SaturatingCast):
    """Cast(x, to=T) with saturate=1 = Cast(Clip(x, -max(T), max(T)), to=T, saturate=0), T float8/float4."""

    name = "saturating-cast"
    op_type = "Cast"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Cast", self.clipped(site, b), to=int(site.attr("to")), saturate=0)]


@register
class SaturatingCastLikeRule(_SaturatingCast):
    """CastLike(x, like), saturate=1 = CastLike(Clip(x, -max, max), like, saturate=0), like float8/float4."""

    name = "saturating-castlike"
    op_type = "CastLike"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("CastLike", self.clipped(site, b), site.input(1), saturate=0)]


@register
class OptionalGetTensorRule(Rule):
    """OptionalGetElement(x) = x when x is a plain tensor: the spec returns a tensor input as it is."""

    name = "optional-get-tensor"
    family = "types"
    op_type = "OptionalGetElement"
    since = 18

    def check(self, site: Site) -> str | None:
        value = site.input(0)
        if value is None or value.type is None or type(value.type).__name__ != "TensorType":
            return "the input is an optional or a sequence, not a plain tensor"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Identity", site.input(0))]
