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

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

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
    from deploycc.analysis.graphs import all_nodes

    graph = model.graph
    for value in graph.initializers.values():
        if value.const_value is not None and value.const_value.dtype.name == "DOUBLE":
            return True
    return any(v.dtype is not None and v.dtype.name == "DOUBLE"
               for node in all_nodes(graph) for v in [*node.inputs, *node.outputs] if v is not None)


def narrow_float64(model: ir.Model) -> int:
    """Rewrite every float64 tensor, constant and dtype attribute to float32; the count changed."""
    import onnx_ir as ir

    from deploycc.analysis.graphs import all_graphs

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
