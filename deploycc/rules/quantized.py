"""Q/DQ forms a target refuses, as the float arithmetic they stand for.

ONNX Runtime's static quantizer writes uint8 activations with a zero point (asymmetric) and an
int32 bias, forms TensorRT's parser refuses (it takes symmetric int8 only). Where the target
refuses a DequantizeLinear:

- DequantizeLinear of constants (weights, biases): the float tensor (x - zero_point) * scale,
  per tensor or per axis, computed here in float32 as ONNX Runtime computes it.
- DequantizeLinear(Gather(table, ids)) of a constant table: Gather of the dequantized table,
  layout ops between them (an LSTM's Transpose) run on the floats.
- DequantizeLinear(QuantizeLinear(x, s, z), s', z'), per tensor: the fake quantization
  (clip(round(x / s) + z, qmin, qmax) - z') * s' in float ops the target has (Div, Round, Add,
  Max, Min, Sub, Mul). Round is half to even, as QuantizeLinear's rounding.
- QLinearConv, QLinearMatMul and com.microsoft's QLinear*/QGemm (ORT's QOperator form): the QDQ
  form they are defined to mean, DequantizeLinear -> the float op -> QuantizeLinear, which the
  forms above then make float where the target refuses DequantizeLinear too.
- DynamicQuantizeLinear -> MatMulInteger/ConvInteger -> [Add(int32 bias) ->] Cast (ORT's dynamic
  quantization; the bias an older ORT quantized at run time): the scale and zero point computed
  in float as the op defines them, the integer ops on the centred levels and the bias in float
  (exact: integer sums below 2**24). Where the target refuses the integer ops only (ORT's CUDA
  provider: MatMulInteger on int8 activations, not uint8), the same.

The QuantizeLinear nodes left without readers are removed. A whole-graph change, proven by
running the graph before and after it (like float64 narrowing). The model then computes what
its quantized form computes, in float: it deploys, without int8 speed; `--precision int8`
with calibration data (the INT8 work) is how to get that back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from deploycc.graph.graphs import constant_tensor
from deploycc.rules.base import Builder, GraphRule
from deploycc.rules.catalog import register_graph
from deploycc.taxonomy import Legality, Precision

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import Target

QUANTIZED_RANGES = {"UINT8": (0, 255), "INT8": (-128, 127), "UINT16": (0, 65535), "INT16": (-32768, 32767)}
MAX_CONSTANT_ELEMENTS = 64 << 20


def _unique_name(node: ir.Node, graph: ir.Graph) -> str:
    """The node's name, or one made from its op and place: exporters leave names empty, and the
    replacement nodes are named after it (ONNX Runtime refuses two nodes of one name)."""
    return node.name or f"{node.op_type}_{graph.index(node)}"


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


# Ops that only move elements: with a per-tensor scale, DQ(Flatten(q)) = Flatten(DQ(q)).
_LAYOUT_OPS = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose"}


def _through_layout_ops(value: ir.Value | None) -> tuple[ir.Value | None, list[ir.Node]]:
    """The value before a chain of layout ops, and the chain in the order it runs."""
    chain: list[ir.Node] = []
    producer = value.producer() if value is not None else None
    while value is not None and producer is not None and producer.op_type in _LAYOUT_OPS \
            and producer.domain in ("", "ai.onnx"):
        chain.insert(0, producer)
        value = producer.inputs[0]
        producer = value.producer() if value is not None else None
    return value, chain


def _fake_quantization(node: ir.Node, b: Builder) -> ir.Value | None:
    """The float form of DequantizeLinear(QuantizeLinear(x)), per tensor, with layout ops
    between them run on the float values; None when not that."""
    quantized, layout = _through_layout_ops(node.inputs[0])
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
    value = b.op("Mul", b.op("Sub", clipped, b.const(zero_dq)), b.const(scale_dq))
    for op in layout:
        value = b.op(op.op_type, value, *op.inputs[1:], **{k: a.value for k, a in op.attributes.items()})
    return value


def _gathered_table(node: ir.Node, b: Builder) -> ir.Value | None:
    """DequantizeLinear(Gather(table, ids)) of a constant table, per tensor: Gather(float table,
    ids) (a quantized embedding: the rows dequantized before they are picked, the same values).
    Layout ops between them (an LSTM's Transpose of the embedded sequence) run on the floats:
    a per-tensor dequantization commutes with them."""
    gathered, layout = _through_layout_ops(node.inputs[0])
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
    value = b.op("Gather", b.const(floats), gather.inputs[1], axis=axis)
    for op in layout:
        value = b.op(op.op_type, value, *op.inputs[1:], **{k: a.value for k, a in op.attributes.items()})
    return value


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
        b = Builder(opset, f"{_unique_name(node, graph)}/float")
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


def _to_float(node: ir.Node) -> bool:
    return _default_domain(node, "Cast") and int(node.attributes["to"].value) == 1


def _int32_bias(node: ir.Node, at: int) -> ir.Value | None:
    """The int32 bias an Add puts on the integer result at input `at` (ORT's dynamic quantization
    of a Conv with a bias: ConvInteger -> Add(bias / (x_scale * w_scale), as int32) -> Cast, the
    bias quantized at run time with the activation's scale); None if not that."""
    if not _default_domain(node, "Add") or len(node.inputs) != 2:
        return None
    bias = node.inputs[1 - at]
    return bias if bias is not None and bias.dtype is not None and bias.dtype.name == "INT32" else None


def _read_as_float(value: ir.Value) -> bool:
    """Every reader of an integer op's result casts it to float, directly or after an int32 bias."""
    return all(_to_float(use) or (_int32_bias(use, at) is not None and all(_to_float(cast) for cast, _ in
                                                                            use.outputs[0].uses()))
               for use, at in value.uses())


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
        casts_only = all(_read_as_float(reader.outputs[0]) for reader in readers)
        own_zero_point = all(len(reader.inputs) > 2 and reader.inputs[2] is zero_out for reader in readers)
        if x is None or not _integer_consumers(quantized, 0) or not _integer_consumers(zero_out, 2) \
                or not own_zero_point or not casts_only or \
                any(_centered_weights(reader) is None for reader in readers):
            continue
        b = Builder(opset, f"{_unique_name(node, graph)}/float")
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
            for use, at in list(reader.outputs[0].uses()):
                bias = _int32_bias(use, at)
                if bias is not None:  # the bias added in float: integers below 2**24, exact
                    bias_b = Builder(opset, f"{_unique_name(use, graph)}/float")
                    use.replace_input_with(1 - at, bias_b.op("Cast", bias, to=1))
                    use.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
                    graph.insert_before(use, bias_b.nodes)
            reader.outputs[0].replace_all_uses_with(value)
        replaced += 1
    if replaced:
        RemoveUnusedNodesPass()(model)  # the integer nodes and DynamicQuantizeLinear, now unread
    return replaced




# ONNX Runtime's QOperator form: each op reads (tensor, scale, zero point) triplets and writes a
# quantized tensor. Where the target refuses one, it becomes DequantizeLinear -> the float op ->
# QuantizeLinear (the QDQ form the backends consume and that ONNX defines it to mean), or float
# arithmetic when DequantizeLinear is refused too. The layouts, as the op schemas give them:
# op -> (indices of the (x, scale, zero point) triplets read, output scale/zero point indices,
#        index of an int32 bias quantized at scale_a * scale_b, the float op)
_QOPERATOR_FORMS: dict[tuple[str, str], tuple[tuple[int, ...], tuple[int, int] | None, int | None, str]] = {
    ("", "QLinearConv"): ((0, 3), (6, 7), 8, "Conv"),
    ("", "QLinearMatMul"): ((0, 3), (6, 7), None, "MatMul"),
    ("com.microsoft", "QLinearAdd"): ((0, 3), (6, 7), None, "Add"),
    ("com.microsoft", "QLinearMul"): ((0, 3), (6, 7), None, "Mul"),
    ("com.microsoft", "QLinearGlobalAveragePool"): ((0,), (3, 4), None, "GlobalAveragePool"),
    ("com.microsoft", "QLinearAveragePool"): ((0,), (3, 4), None, "AveragePool"),
    ("com.microsoft", "QLinearSigmoid"): ((0,), (3, 4), None, "Sigmoid"),
    ("com.microsoft", "QLinearLeakyRelu"): ((0,), (3, 4), None, "LeakyRelu"),
    ("com.microsoft", "QGemm"): ((0, 3), (7, 8), 6, "Gemm"),
}
QOPERATOR_OPS = set(_QOPERATOR_FORMS)
# Attributes of the QOperator op that are not the float op's.
_QOPERATOR_ONLY_ATTRIBUTES = {"channels_last"}


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _dequantize(b: Builder, node: ir.Node, at: int, axis: int | None) -> ir.Value | None:
    """DequantizeLinear of the triplet at `at`; None when it cannot be written (no scale)."""
    x, scale, zero = _input(node, at), _input(node, at + 1), _input(node, at + 2)
    if x is None or scale is None:
        return None
    per_axis = scale.shape is not None and len(scale.shape) == 1 and scale.shape[0] != 1
    if not per_axis:
        return b.op("DequantizeLinear", x, scale, zero)
    if axis is None or b.opset < 13:
        return None
    return b.op("DequantizeLinear", x, scale, zero, axis=axis)


def _bias(node: ir.Node, at: int | None, b: Builder) -> ir.Value | bool | None:
    """The int32 bias at `at` as float32 (bias * scale_a * scale_b); None when there is none,
    False when it cannot be made (not constant)."""
    bias = _input(node, at) if at is not None else None
    if bias is None:
        return None
    values = constant_tensor(bias)
    scale_a, scale_b = constant_tensor(node.inputs[1]), constant_tensor(node.inputs[4])
    if values is None or scale_a is None or scale_b is None:
        return False
    return b.const((values.astype(np.float64) * scale_a.astype(np.float64) * scale_b.astype(np.float64)
                    .reshape(-1)).astype(np.float32).reshape(values.shape))


def _weight_axis(node: ir.Node, float_op: str) -> int | None:
    """The axis of a per-channel weight scale: Conv's output channels, MatMul's columns, Gemm's
    output columns (1, or 0 when B is transposed)."""
    if float_op == "Conv":
        return 0
    if float_op == "MatMul":
        return 1
    if float_op == "Gemm":
        return 0 if "transB" in node.attributes and int(node.attributes["transB"].value) else 1
    return None


def qoperator_to_qdq(model: ir.Model, refused: Callable[[ir.Node], bool]) -> int:
    """Replace every refused QOperator node of the forms above by its QDQ form; returns how many."""
    import onnx_ir as ir

    opset = model.opset_imports.get("", 13)
    replaced = 0
    graph = model.graph
    for node in list(graph):
        form = _QOPERATOR_FORMS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
        if form is None or not refused(node) or ("channels_last" in node.attributes
                                                 and int(node.attributes["channels_last"].value)):
            continue
        triplets, output_at, bias_at, float_op = form
        b = Builder(opset, f"{_unique_name(node, graph)}/qdq")
        operands = [_dequantize(b, node, at, None if at == 0 else _weight_axis(node, float_op))
                    for at in triplets]
        bias = _bias(node, bias_at, b)
        if any(v is None for v in operands) or bias is False:
            continue
        attributes = {name: attr.value for name, attr in node.attributes.items()
                      if name not in _QOPERATOR_ONLY_ATTRIBUTES}
        inputs = [*operands, bias] if bias is not None else operands
        value = b.op(float_op, *inputs, **attributes)
        scale, zero = (_input(node, output_at[0]), _input(node, output_at[1])) if output_at else (None, None)
        output = node.outputs[0]
        if scale is not None:  # QGemm without an output scale writes float
            value = b.op("QuantizeLinear", value, scale, zero)
        value.name = f"{output.name}/qdq"
        value.type, value.shape = output.type, output.shape
        ir.convenience.replace_nodes_and_values(graph, node, [node], b.nodes, [output], [value])
        replaced += 1
    return replaced


class _RefusedForm(GraphRule):
    """Nodes of one quantized form the target refuses, rewritten together (they share scales): a
    node of `ops` refused itself, or one whose first output a refused node of `readers` reads."""

    ops: ClassVar[frozenset[str]]
    readers: ClassVar[frozenset[str]] = frozenset()

    def refused(self, model: ir.Model, target: Target) -> list[ir.Node] | None:
        from deploycc.graph.graphs import opset_map
        from deploycc.legality.conversion_target import ConversionTarget

        judge, opsets = ConversionTarget(target), opset_map(model)

        def illegal(node: ir.Node) -> bool:
            return judge.judge(node, opsets).status == Legality.ILLEGAL

        nodes = [node for node in model.graph if node.op_type in self.ops and (illegal(node) or any(
            reader.op_type in self.readers and illegal(reader) for reader, _ in node.outputs[0].uses()))]
        return nodes or None


# In this order: the QOperator form's QDQ nodes may then be refused in turn.
@register_graph
class QOperatorToQdqRule(_RefusedForm):
    """<graph> QLinear*/QGemm -> DequantizeLinear, the float op, QuantizeLinear: ORT's QOperator
    form in the QDQ form TensorRT and OpenVINO read, the same scales and zero points."""

    name = "qoperator-to-qdq"
    family = "quantized"
    done = "in QDQ form"
    proof_precision = Precision.INT8  # ORT's QLinear kernels requantize in fixed point, the QDQ form in float
    ops = frozenset(op for _, op in QOPERATOR_OPS)

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        return qoperator_to_qdq(model, set(nodes).__contains__)


@register_graph
class DynamicQuantizationToFloatRule(_RefusedForm):
    """<graph> DynamicQuantizeLinear + MatMulInteger/ConvInteger -> float MatMul/Conv on the
    dequantized values: ORT's dynamic quantization as the arithmetic it stands for."""

    name = "dynamic-quantization-to-float"
    family = "quantized"
    done = "made float"
    ops = frozenset({"DynamicQuantizeLinear"})

    # ORT's CUDA provider has MatMulInteger for int8 activations only: the uint8 ones dynamic
    # quantization writes would run on the CPU though DynamicQuantizeLinear itself is taken
    readers = frozenset({"MatMulInteger", "ConvInteger"})

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        return dynamic_quantization_to_float(model, set(nodes).__contains__)


@register_graph
class DequantizeToFloatRule(_RefusedForm):
    """<graph> DequantizeLinear (a form the target refuses: asymmetric uint8 on TensorRT) ->
    (x - zero_point) * scale in float, constant weights dequantized once."""

    name = "dequantize-to-float"
    family = "quantized"
    done = "made float"
    ops = frozenset({"DequantizeLinear"})

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        return dequantize_to_float(model, set(nodes).__contains__)
