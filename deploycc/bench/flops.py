"""FLOPs of one inference, counted from the graph with shapes inferred for the actual inputs,
so a latency can be read against the machine's peak (achieved GFLOP/s).

A multiply-add counts 2. Convolutions and matrix products dominate; elementwise ops count one
per output element, normalisations and softmax a few; data movement (Reshape, Transpose,
Gather, Concat, ...) counts 0. Ops with unknown shapes are listed as uncounted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

PER_ELEMENT = {
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Relu": 1, "LeakyRelu": 2, "PRelu": 2, "Sigmoid": 4, "Tanh": 4,
    "Erf": 4, "Exp": 4, "Log": 4, "Sqrt": 1, "Reciprocal": 1, "Pow": 4, "Max": 1, "Min": 1, "Clip": 2,
    "Where": 1, "Neg": 1, "Abs": 1, "HardSigmoid": 3, "HardSwish": 4, "Gelu": 8, "Mish": 8, "Softplus": 4,
    "Elu": 4, "Selu": 5, "Celu": 5, "BatchNormalization": 2, "Softmax": 5, "LogSoftmax": 5,
    "LayerNormalization": 8, "GroupNormalization": 8, "InstanceNormalization": 8, "RMSNormalization": 5,
    "Cast": 0, "Equal": 1, "Less": 1, "Greater": 1, "Not": 1, "And": 1, "Or": 1,
}
MOVEMENT = {"Reshape", "Transpose", "Concat", "Gather", "GatherElements", "Slice", "Split", "Squeeze",
            "Unsqueeze", "Flatten", "Identity", "Expand", "Tile", "Shape", "Constant", "ConstantOfShape",
            "Pad", "Resize", "DepthToSpace", "SpaceToDepth", "Range", "Dropout", "Size"}
REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare",
          "GlobalAveragePool", "GlobalMaxPool", "ArgMax", "ArgMin"}


@dataclass
class FlopCount:
    total: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    uncounted: dict[str, int] = field(default_factory=dict)


def node_flops(node: ir.Node, unknown_dim: int | None = None) -> int | None:
    """The node's FLOPs; None when a shape it needs is not static, unless `unknown_dim` says how
    many a symbolic dim counts for (the partitioner's estimate for a dynamic batch)."""
    def _dims(value: ir.Value | None) -> list[int] | None:
        if value is None or value.shape is None:
            return None
        if unknown_dim is None and not value.shape.is_static():
            return None
        return [d if isinstance(d, int) else unknown_dim for d in value.shape]  # type: ignore[misc]

    def _elements(value: ir.Value | None) -> int | None:
        dims = _dims(value)
        return None if dims is None else math.prod(dims)

    op = node.op_type
    out = _elements(node.outputs[0]) if node.outputs else None
    if op in MOVEMENT:
        return 0
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        weight = _dims(node.inputs[1])
        if out is None or weight is None:
            return None
        return 2 * out * math.prod(weight[1:]) + (out if len(node.inputs) > 2 and node.inputs[2] else 0)
    if op == "ConvTranspose":
        weight, source = _dims(node.inputs[1]), _elements(node.inputs[0])
        if weight is None or source is None:
            return None
        return 2 * source * math.prod(weight[1:])
    if op in ("MatMul", "MatMulInteger", "Gemm"):
        first = _dims(node.inputs[0])
        if out is None or first is None:
            return None
        inner = first[0] if op == "Gemm" and (node.attributes.get_int("transA") or 0) else first[-1]
        return 2 * out * inner + (out if op == "Gemm" and len(node.inputs) > 2 else 0)
    if op in ("AveragePool", "MaxPool", "LpPool"):
        kernel = node.attributes.get_ints("kernel_shape")
        return None if out is None or kernel is None else out * math.prod(kernel)
    if op in REDUCE:
        return _elements(node.inputs[0])
    if op in PER_ELEMENT:
        return None if out is None else out * PER_ELEMENT[op]
    return None


def count(model: ir.Model) -> FlopCount:
    from deploycc.graph.graphs import all_nodes

    result = FlopCount()
    for node in all_nodes(model.graph):
        flops = node_flops(node)
        if flops is None:
            result.uncounted[node.op_type] = result.uncounted.get(node.op_type, 0) + 1
            continue
        result.total += flops
        result.by_op[node.op_type] = result.by_op.get(node.op_type, 0) + flops
    return result


def count_for_inputs(model_path: Path, feeds: dict[str, np.ndarray]) -> FlopCount:
    """FLOPs of the model at the shapes of `feeds` (symbolic dims fixed, shapes re-inferred)."""
    import onnx_ir as ir

    from deploycc import io
    from deploycc.graph.shapes import infer_shapes

    model = io.load(model_path, check=False).model
    for value in model.graph.inputs:
        if value.name in feeds:
            value.shape = ir.Shape(list(feeds[value.name].shape))
    infer_shapes(model)
    return count(model)
