"""INT8 without calibration data, where the backend runs it: the weights of the MatMuls that read a
constant quantized ahead (per tensor, signed), the activations at run time by the engine itself
(ONNX Runtime's quantize_dynamic, whose DynamicQuantizeMatMul its CPU provider fuses). What a
transformer's user gets from `quantize_dynamic` today; a `--precision auto` candidate, judged
like any other by its verification and the budget's cosine.

Past protobuf's limit the same quantization is written weight by weight instead (streamed_dynamic_int8):
quantize_dynamic holds about three copies of the model (12.5 GB for TinyLlama-1.1B's 4.2 GB, which
the memory ceiling killed), this one the int8 weights and one float weight at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.quantize.isolated import past_protobuf_limit, quantized_in_own_process_if_large

if TYPE_CHECKING:
    import onnx_ir as ir

DYNAMIC_INT8_ONNX = "model.int8-dynamic.onnx"
# The ops whose constant weights are quantized: the MatMuls of a transformer's projections and
# feed-forward layers (ORT's quantizer takes a Gemm with them; a Conv's dynamic int8 is slower than
# fp32 on ORT's CPU provider). A model without such a MatMul (a CNN and its Gemm head) is no candidate.
WEIGHT_OPS = ("MatMul",)
QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul")  # what the quantized model computes them with


def quantizable_weights(graph: ir.Graph) -> int:
    """How many of WEIGHT_OPS read a constant second input (0: no dynamic int8 candidate)."""
    return sum(1 for node in graph
               if node.op_type in WEIGHT_OPS and node.domain == "" and len(node.inputs) > 1
               and node.inputs[1] is not None and node.inputs[1].const_value is not None)


def quantize_dynamically(model: Path, outdir: Path) -> tuple[Path, str]:
    """The model with its constant MatMul weights in int8, written beside it, and what was done;
    past protobuf's limit streamed, in a process of its own (quantize/isolated.py)."""
    if past_protobuf_limit(model):
        return quantized_in_own_process_if_large(streamed_dynamic_int8, model, outdir)
    return _quantize_dynamically(model, outdir)


def _quantize_dynamically(model: Path, outdir: Path) -> tuple[Path, str]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from deploycc import io
    from deploycc.quantize.ort_qdq import quiet

    quantized = outdir / DYNAMIC_INT8_ONNX
    large = past_protobuf_limit(model)
    with quiet():  # its advice to pre-process, on the root logger, is not deploycc's finding
        quantize_dynamic(model, quantized, weight_type=QuantType.QInt8, op_types_to_quantize=list(WEIGHT_OPS),
                         use_external_data_format=large, extra_options={"MatMulConstBOnly": True})
    weights = sum(1 for node in io.peek(quantized).model.graph if node.op_type in QUANTIZED_OPS)
    return quantized, (f"int8 dynamic: ONNX Runtime's quantize_dynamic, {weights} weight(s) of MatMul or "
                       "Gemm in int8 per tensor, activations quantized at run time")


def streamed_dynamic_int8(model: Path, outdir: Path) -> tuple[Path, str]:
    """quantize_dynamic's result, as ONNX Runtime's optimizer fuses it, written one weight at a
    time: each MatMul reading a constant 2-D float weight becomes com.microsoft's
    DynamicQuantizeMatMul with that weight in int8, per tensor and symmetric as quantize_dynamic's
    QInt8 takes it (scale = max |w| / 127, zero point 0). The other weights stay on disk until
    written (the loaded model maps them)."""
    import numpy as np
    import onnx_ir as ir

    from deploycc import io

    loaded = io.load(model, check=False)
    graph, quantized = loaded.model.graph, 0
    for node, weight, tensor in float_matmul_weights(graph):
        values = tensor.numpy()
        scale = np.float32(max(float(np.abs(values).max()), 1e-12) / 127.0)
        codes = np.clip(np.rint(values / scale), -127, 127).astype(np.int8)
        del values  # one float weight at a time
        name = weight.name or f"{node.name}/weight"
        parts = [ir.Value(name=f"{name}/int8", const_value=ir.tensor(codes, name=f"{name}/int8")),
                 ir.Value(name=f"{name}/scale", const_value=ir.tensor(np.array(scale), name=f"{name}/scale")),
                 ir.Value(name=f"{name}/zero_point",
                          const_value=ir.tensor(np.array(0, np.int8), name=f"{name}/zero_point"))]
        replacement = ir.node("DynamicQuantizeMatMul", [node.inputs[0], *parts], domain="com.microsoft",
                              name=f"{node.name or name}/dynamic_int8")
        put_in_place(graph, node, weight, parts, replacement)
        quantized += 1
    loaded.model.opset_imports.setdefault("com.microsoft", 1)
    io.save(loaded.model, outdir / DYNAMIC_INT8_ONNX, protect=(model,), force_external=True)
    return outdir / DYNAMIC_INT8_ONNX, (
        f"int8 dynamic: {quantized} MatMul weight(s) in int8 per tensor (symmetric, as quantize_dynamic's "
        "QInt8), written one weight at a time as DynamicQuantizeMatMul, activations quantized at run time "
        "(the model passes protobuf's 2 GB: ONNX Runtime's quantize_dynamic holds about three copies of it)")


def float_matmul_weights(graph: ir.Graph) -> Iterator[tuple[ir.Node, ir.Value, ir.TensorProtocol]]:
    """Each MatMul of the default domain that reads a constant 2-D float32 weight, with the weight
    and its tensor (taken from a copy of the node list: the caller may replace each as it goes)."""
    import onnx_ir as ir

    for node in list(graph):
        weight = node.inputs[1] if node.op_type == "MatMul" and node.domain == "" and len(node.inputs) > 1 \
            else None
        tensor = weight.const_value if weight is not None else None
        if weight is not None and tensor is not None and weight.dtype == ir.DataType.FLOAT and \
                len(tensor.shape) == 2:
            yield node, weight, tensor


def put_in_place(graph: ir.Graph, node: ir.Node, weight: ir.Value, parts: list[ir.Value],
                 replacement: ir.Node) -> None:
    """`replacement` (a quantized MatMul reading `parts`) in `node`'s place, its float output under
    `node`'s output's name (a graph output keeps its name); `node` removed, and its float weight
    where nothing else reads it."""
    import onnx_ir as ir

    for part in parts:
        graph.register_initializer(part)
    graph.insert_before(node, replacement)
    product, before = replacement.outputs[0], node.outputs[0]
    before.replace_all_uses_with(product, replace_graph_outputs=True)
    product.name, before.name = before.name, f"{before.name}/float"
    product.dtype, product.shape = ir.DataType.FLOAT, before.shape
    graph.remove(node, safe=True)
    drop_if_unread(graph, weight)


def drop_if_unread(graph: ir.Graph, weight: ir.Value) -> None:
    """`weight`'s initializer out of the graph where nothing reads it any more (its quantized form
    took its place)."""
    if not weight.uses() and weight.name is not None and weight.name in graph.initializers:
        del graph.initializers[weight.name]
