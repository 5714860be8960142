"""INT8 without calibration data, where the backend runs it: the weights of the MatMuls that read a
constant quantized ahead (per tensor, signed), the activations at run time by the engine itself
(ONNX Runtime's quantize_dynamic, whose DynamicQuantizeMatMul its CPU provider fuses). What a
transformer's user gets from `quantize_dynamic` today; a `--precision auto` candidate, judged
like any other by its verification and the budget's cosine."""

from __future__ import annotations

from pathlib import Path

from deploycc.quantize.isolated import past_protobuf_limit, quantized_in_own_process_if_large

DYNAMIC_INT8_ONNX = "model.int8-dynamic.onnx"
# The ops whose constant weights are quantized: the MatMuls of a transformer's projections and
# feed-forward layers (ORT's quantizer takes a Gemm with them; a Conv's dynamic int8 is slower than
# fp32 on ORT's CPU provider). A model without such a MatMul (a CNN and its Gemm head) is no candidate.
WEIGHT_OPS = ("MatMul",)
QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul")  # what the quantized model computes them with


def quantizable_weights(model: Path) -> int:
    """How many of WEIGHT_OPS read a constant second input (0: no dynamic int8 candidate)."""
    from deploycc import io

    graph = io.peek(model).model.graph
    return sum(1 for node in graph
               if node.op_type in WEIGHT_OPS and node.domain == "" and len(node.inputs) > 1
               and node.inputs[1] is not None and node.inputs[1].const_value is not None)


def quantize_dynamically(model: Path, outdir: Path) -> tuple[Path, str]:
    """The model with its constant MatMul weights in int8, written beside it, and what was done;
    past protobuf's limit in a process of its own (quantize/isolated.py)."""
    return quantized_in_own_process_if_large(_quantize_dynamically, model, outdir)


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
