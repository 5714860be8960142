"""Q/DQ forms a target refuses, as the float arithmetic they stand for.

ONNX Runtime's static quantizer writes uint8 activations with a zero point (asymmetric) and an
int32 bias, forms TensorRT's parser refuses (it takes symmetric int8 only). Where the target
refuses a DequantizeLinear:

- DequantizeLinear of constants (weights, biases): the float tensor (x - zero_point) * scale,
  per tensor or per axis, computed here in float32 as ONNX Runtime computes it.
- DequantizeLinear(QuantizeLinear(x, s, z), s', z'), per tensor: the fake quantization
  (clip(round(x / s) + z, qmin, qmax) - z') * s' in float ops the target has (Div, Round, Add,
  Max, Min, Sub, Mul). Round is half to even, as QuantizeLinear's rounding.

The QuantizeLinear nodes left without readers are removed. A whole-graph change, proven by
running the graph before and after it (like float64 narrowing). The model then computes what
its quantized form computes, in float: it deploys, without int8 speed; `--precision int8`
with calibration data (the INT8 work) is how to get that back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from deploycc.analysis.graphs import constant_tensor
from deploycc.rules.base import Builder

if TYPE_CHECKING:
    import onnx_ir as ir

QUANTIZED_RANGES = {"UINT8": (0, 255), "INT8": (-128, 127), "UINT16": (0, 65535), "INT16": (-32768, 32767)}
MAX_CONSTANT_ELEMENTS = 64 << 20


def _default_domain(node: ir.Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _broadcast(array: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A per-axis scale or zero point shaped to broadcast against a rank-`rank` tensor."""
    if array.ndim == 0 or rank == 0:
        return array
    shape = [1] * rank
    shape[axis % rank] = array.size
    return array.reshape(shape)


def _dequantized_constant(node: ir.Node) -> np.ndarray | None:
    if "block_size" in node.attributes and int(node.attributes["block_size"].value) != 0:
        return None
    x, scale = constant_tensor(node.inputs[0]), constant_tensor(node.inputs[1])
    zero = constant_tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if x is None or scale is None or x.size > MAX_CONSTANT_ELEMENTS or scale.dtype != np.float32:
        return None
    axis = int(node.attributes["axis"].value) if "axis" in node.attributes else 1
    zero = np.zeros((), x.dtype) if zero is None else zero
    shifted = (x.astype(np.int64) - _broadcast(zero.astype(np.int64), axis, x.ndim)).astype(np.float32)
    return (shifted * _broadcast(scale, axis, x.ndim)).astype(np.float32)


def _scalar_parameters(node: ir.Node) -> tuple[np.float32, np.float32] | None:
    """A Q or DQ node's constant per-tensor scale and zero point, as float32."""
    scale = constant_tensor(node.inputs[1])
    zero = constant_tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
        else np.zeros(())
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    return np.float32(scale.reshape(())), np.float32(zero.reshape(()))


def _fake_quantization(node: ir.Node, b: Builder) -> ir.Value | None:
    """The float form of DequantizeLinear(QuantizeLinear(x)), per tensor; None when not that."""
    quantized = node.inputs[0]
    quantize = quantized.producer() if quantized is not None else None
    if quantized is None or quantize is None or not _default_domain(quantize, "QuantizeLinear"):
        return None
    x = quantize.inputs[0]
    if x is None or x.dtype is None or x.dtype.name != "FLOAT" or quantized.dtype is None:
        return None
    bounds = QUANTIZED_RANGES.get(quantized.dtype.name)
    parameters = [_scalar_parameters(q) for q in (quantize, node)]
    if bounds is None or parameters[0] is None or parameters[1] is None:
        return None
    (scale_q, zero_q), (scale_dq, zero_dq) = parameters[0], parameters[1]
    rounded = b.op("Round", b.op("Div", x, b.const(scale_q)))
    clipped = b.op("Min", b.op("Max", b.op("Add", rounded, b.const(zero_q)), b.const(np.float32(bounds[0]))),
                   b.const(np.float32(bounds[1])))
    return b.op("Mul", b.op("Sub", clipped, b.const(zero_dq)), b.const(scale_dq))


def dequantize_to_float(model: ir.Model, refused: Callable[[ir.Node], bool]) -> int:
    """Replace every refused DequantizeLinear of the two forms above; returns how many."""
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    opset = model.opset_imports.get("", 13)
    replaced = 0
    graph = model.graph
    for node in list(graph):
        if not _default_domain(node, "DequantizeLinear") or not refused(node):
            continue
        b = Builder(opset, f"{node.name or 'dq'}/float")
        constant = _dequantized_constant(node)
        value = b.const(constant) if constant is not None else _fake_quantization(node, b)
        if value is None:
            continue
        output = node.outputs[0]
        value.name = f"{output.name}/float"
        value.type, value.shape = ir.TensorType(ir.DataType.FLOAT), output.shape
        ir.convenience.replace_nodes_and_values(graph, node, [node], b.nodes, [output], [value])
        replaced += 1
    if replaced:
        RemoveUnusedNodesPass()(model)  # the QuantizeLinear nodes only the replaced ones read
    return replaced


def holds_quantization(model: ir.Model) -> bool:
    return any(_default_domain(node, "DequantizeLinear") for node in model.graph)
