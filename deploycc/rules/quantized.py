"""Q/DQ forms a target refuses, as the float arithmetic they stand for.

ONNX Runtime's static quantizer writes uint8 activations with a zero point (asymmetric) and an
int32 bias, forms TensorRT's parser refuses (it takes symmetric int8 only). Where the target
refuses a DequantizeLinear:

- DequantizeLinear of constants (weights, biases): the float tensor (x - zero_point) * scale,
  per tensor or per axis, computed here in float32 as ONNX Runtime computes it.
- DequantizeLinear(Gather(table, ids)) of a constant table: Gather of the dequantized table.
- DequantizeLinear(QuantizeLinear(x, s, z), s', z'), per tensor: the fake quantization
  (clip(round(x / s) + z, qmin, qmax) - z') * s' in float ops the target has (Div, Round, Add,
  Max, Min, Sub, Mul). Round is half to even, as QuantizeLinear's rounding.
- DynamicQuantizeLinear -> MatMulInteger/ConvInteger -> Cast (ORT's dynamic quantization): the
  scale and zero point computed in float as the op defines them, the integer ops on the
  centred levels in float (exact: integer sums below 2**24).

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


def _gathered_table(node: ir.Node, b: Builder) -> ir.Value | None:
    """DequantizeLinear(Gather(table, ids)) of a constant table, per tensor: Gather(float table,
    ids) (a quantized embedding: the rows dequantized before they are picked, the same values)."""
    gathered = node.inputs[0]
    gather = gathered.producer() if gathered is not None else None
    if gather is None or not _default_domain(gather, "Gather") or constant_tensor(gather.inputs[0]) is None:
        return None
    parameters = _scalar_parameters(node)
    table = constant_tensor(gather.inputs[0])
    if parameters is None or table is None or table.size > MAX_CONSTANT_ELEMENTS:
        return None
    scale, zero = parameters
    floats = ((table.astype(np.int64) - np.int64(zero)).astype(np.float32) * scale).astype(np.float32)
    axis = int(gather.attributes["axis"].value) if "axis" in gather.attributes else 0
    return b.op("Gather", b.const(floats), gather.inputs[1], axis=axis)


def dequantize_to_float(model: ir.Model, refused: Callable[[ir.Node], bool]) -> int:
    """Replace every refused DequantizeLinear of the forms above; returns how many."""
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
        value = b.const(constant) if constant is not None else \
            _fake_quantization(node, b) or _gathered_table(node, b)
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



def _integer_consumers(value: ir.Value, index: int) -> bool:
    """Every reader of `value` is a MatMulInteger or ConvInteger taking it at `index`."""
    uses = list(value.uses())
    return bool(uses) and all(_default_domain(node, "MatMulInteger") or _default_domain(node, "ConvInteger")
                              for node, at in uses) and all(at == index for _, at in uses)


def _centered_weights(node: ir.Node) -> np.ndarray | None:
    """B - b_zero_point (MatMulInteger, per column) or W - w_zero_point (ConvInteger, per output
    channel), as float32: exact, every value is a small integer."""
    weights = constant_tensor(node.inputs[1])
    zero = constant_tensor(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None \
        else np.zeros((), np.int64)
    if weights is None or zero is None or weights.size > MAX_CONSTANT_ELEMENTS:
        return None
    if node.op_type == "ConvInteger" and zero.size > 1:
        zero = zero.reshape([-1] + [1] * (weights.ndim - 1))
    return (weights.astype(np.int64) - zero.astype(np.int64)).astype(np.float32)


def _float_integer_op(node: ir.Node, centered_input: ir.Value, b: Builder) -> ir.Value | None:
    """MatMulInteger/ConvInteger on (A - a_zero_point) in float: integer products and sums below
    2**24 are exact in float32, so the result equals the int32 one."""
    weights = _centered_weights(node)
    if weights is None:
        return None
    if node.op_type == "MatMulInteger":
        return b.op("MatMul", centered_input, b.const(weights))
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    return b.op("Conv", centered_input, b.const(weights), **attributes)


def _saturate(b: Builder, value: ir.Value, low: ir.Value, high: ir.Value) -> ir.Value:
    return b.op("Min", b.op("Max", value, low), high)


def dynamic_quantization_to_float(model: ir.Model, refused: Callable[[ir.Node], bool]) -> int:
    """DynamicQuantizeLinear(x) -> MatMulInteger/ConvInteger -> Cast(float), ORT's dynamic
    quantization, as the float arithmetic it is: the scale (max(x, 0) - min(x, 0)) / 255, the zero
    point clip(round(-min / scale), 0, 255), the quantized clip(round(x / scale) + zp, 0, 255), and
    each integer op on (q - zp) in float. Returns how many DynamicQuantizeLinear nodes were replaced."""
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    opset = model.opset_imports.get("", 13)
    replaced = 0
    graph = model.graph
    for node in list(graph):
        if not _default_domain(node, "DynamicQuantizeLinear") or not refused(node):
            continue
        x = node.inputs[0]
        quantized, scale_out, zero_out = node.outputs
        readers = [reader for reader, _ in quantized.uses()]
        casts_only = all(all(_default_domain(use, "Cast") and int(use.attributes["to"].value) == 1
                             for use, _ in reader.outputs[0].uses()) for reader in readers)
        own_zero_point = all(len(reader.inputs) > 2 and reader.inputs[2] is zero_out for reader in readers)
        if x is None or not _integer_consumers(quantized, 0) or not _integer_consumers(zero_out, 2) \
                or not own_zero_point or not casts_only or \
                any(_centered_weights(reader) is None for reader in readers):
            continue
        b = Builder(opset, f"{node.name or 'dql'}/float")
        zero_f, top = b.const(np.float32(0)), b.const(np.float32(255))
        low = b.op("Min", b.reduce("ReduceMin", x, None, keepdims=0), zero_f)
        high = b.op("Max", b.reduce("ReduceMax", x, None, keepdims=0), zero_f)
        scale = b.op("Div", b.op("Sub", high, low), top)
        zero_point = b.op("Round", _saturate(b, b.op("Neg", b.op("Div", low, scale)), zero_f, top))
        levels = _saturate(b, b.op("Add", b.op("Round", b.op("Div", x, scale)), zero_point), zero_f, top)
        centered = b.op("Sub", levels, zero_point)
        results = [_float_integer_op(reader, centered, b) for reader in readers]
        for value, reader in zip(results, readers, strict=True):
            assert value is not None
            value.name = f"{reader.outputs[0].name}/float"
            value.type = ir.TensorType(ir.DataType.FLOAT)
        scale.name, scale.type = f"{scale_out.name}/float", ir.TensorType(ir.DataType.FLOAT)
        graph.insert_before(node, b.nodes)
        scale_out.replace_all_uses_with(scale)
        for value, reader in zip(results, readers, strict=True):
            assert value is not None
            reader.outputs[0].replace_all_uses_with(value)
        replaced += 1
    if replaced:
        RemoveUnusedNodesPass()(model)  # the integer nodes and DynamicQuantizeLinear, now unread
    return replaced


