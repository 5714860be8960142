"""INT4 weight-only (`--precision int4`, where the target's backend runs it): the constant weights of
the MatMuls in 4 bits, blockwise with a scale per block of BLOCK_SIZE, the activations in float; no
calibration data, a model about a quarter of its float weights' size. Each backend's own tool, as
its recipe names it (BackendStages.int4):

  WeightQuantizer.ORT_MATMUL_NBITS  ONNX Runtime's matmul_nbits_quantizer: MatMulNBits, which the CPU
                                    provider computes with int8 activations inside the kernel
                                    (accuracy level 4)
  WeightQuantizer.NNCF_COMPRESS     NNCF's compress_weights on the OpenVINO model (INT4_SYM), written
                                    as the IR the backend builds as it is

Judged like int8 (its verification's tolerances and the budget's cosine)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploycc.backends.base import WeightQuantizer

INT4_ONNX = "model.int4.onnx"
OPENVINO_IR = "model.xml"  # the OpenVINO artifact's own name: the backend builds this IR as it is
BLOCK_SIZE = 32  # weights per scale, along the reduced axis: ORT's model builder's default for CPU
MIN_GROUP = 8  # NNCF: the smallest group a weight BLOCK_SIZE does not divide may take instead
# 4: int8 activations inside the kernel, the fastest on x86 (1: float32 activations)
ACCURACY_LEVEL = 4


class NoWeightsToQuantize(ValueError):
    """The model has no MatMul reading a constant 2-D weight: int4 weight-only changes nothing."""


def quantize_weights_int4(quantizer: WeightQuantizer, model: Path, outdir: Path) -> tuple[Path, str]:
    """The model with its constant MatMul weights in int4 blocks, written in `outdir` by the backend's
    tool, and what was done; NoWeightsToQuantize where it has none."""
    from deploycc import io
    from deploycc.quantize.dynamic import quantizable_weights
    from deploycc.quantize.isolated import quantized_in_own_process_if_large

    if quantizable_weights(model) == 0 and not any(_lowerable(node) for node in io.peek(model).model.graph):
        raise NoWeightsToQuantize("int4 weight-only quantizes MatMul weights, and this model has no MatMul "
                                  "(or Gemm inside the graph) that reads a constant weight")
    if quantizer == WeightQuantizer.ORT_MATMUL_NBITS:  # it loads the whole model with onnx
        return quantized_in_own_process_if_large(_matmul_nbits, model, outdir)
    return WEIGHT_QUANTIZERS[quantizer](model, outdir)


def _matmul_nbits(model: Path, outdir: Path) -> tuple[Path, str]:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from deploycc import io
    from deploycc.quantize.isolated import past_protobuf_limit
    from deploycc.quantize.ort_qdq import quiet

    quantized = outdir / INT4_ONNX
    large = past_protobuf_limit(model)
    # the Gemms are lowered on the IR, whose protobuf holds every weight inline: past the limit they
    # stay Gemms (and float), which the note's count shows
    proto, lowered = _gemms_as_matmuls(model) if not large else (onnx.load(model), 0)
    with quiet():  # the quantizer logs each weight it writes
        quantizer = MatMulNBitsQuantizer(proto, bits=4, block_size=BLOCK_SIZE, is_symmetric=True,
                                         accuracy_level=ACCURACY_LEVEL, op_types_to_quantize=("MatMul",))
        quantizer.process()
        quantizer.model.save_model_to_file(str(quantized), use_external_data_format=large)
    blocks = sum(1 for node in io.peek(quantized).model.graph if node.op_type == "MatMulNBits")
    if blocks == 0:  # every weight's shape was one the quantizer skips (not 2-D, too narrow)
        raise NoWeightsToQuantize("int4 weight-only: ONNX Runtime's quantizer took none of the model's "
                                  "MatMul weights (their shapes are not 2-D blocks of "
                                  f"{BLOCK_SIZE})")
    gemms = f" ({lowered} of them Gemms, written as MatMul and Add first)" if lowered else ""
    return quantized, (f"int4 weight-only: ONNX Runtime's MatMulNBits, {blocks} MatMul weight(s) in 4 bits"
                       f"{gemms}, symmetric blocks of {BLOCK_SIZE}, accuracy level {ACCURACY_LEVEL}; "
                       "activations in float")


def _gemms_as_matmuls(model: Path) -> tuple[Any, int]:
    """The model's protobuf with each Gemm that reads a constant 2-D weight (alpha 1, A as it is,
    beta 1) written as MatMul (the weight transposed where transB) and Add: ORT's MatMulNBits
    quantizer takes MatMuls only, and GPT-2's TorchScript export writes its projections as Gemm.
    A Gemm whose output is a graph output stays (its name is the model's interface)."""
    import numpy as np
    import onnx_ir as ir

    from deploycc import io

    loaded = io.load(model, check=False)
    graph, lowered = loaded.model.graph, 0
    for node in list(graph):
        if not _lowerable(node):
            continue
        a, b = node.inputs[0], node.inputs[1]
        c = node.inputs[2] if len(node.inputs) > 2 else None
        assert a is not None and b is not None and b.const_value is not None
        weight = b.const_value.numpy()
        weight = np.ascontiguousarray(weight.T if node.attributes.get_int("transB", 0) else weight)
        name = f"{node.name or node.outputs[0].name}/matmul"
        transposed = ir.Value(name=f"{name}/weight", const_value=ir.tensor(weight, name=f"{name}/weight"))
        graph.register_initializer(transposed)
        tape = ir.tape.Tape()
        result = tape.op("MatMul", [a, transposed], name=name)
        if c is not None:
            result = tape.op("Add", [result, c], name=f"{name}/bias")
        graph.insert_before(node, tape.nodes)
        node.outputs[0].replace_all_uses_with(result)
        result.name = node.outputs[0].name
        node.outputs[0].name = f"{result.name}/gemm"
        graph.remove(node, safe=True)
        if not b.uses() and b.name is not None and b.name in graph.initializers:  # read by this Gemm only
            del graph.initializers[b.name]
        lowered += 1
    return io.to_proto(loaded.model), lowered


def _lowerable(node: Any) -> bool:
    """A Gemm that is a MatMul and an Add: its weight a constant 2-D tensor, alpha 1, A as it is,
    beta 1 where there is a C, its output not the graph's."""
    inputs, attributes = node.inputs, node.attributes
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or len(inputs) < 2 or inputs[0] is None:
        return False
    b, c = inputs[1], inputs[2] if len(inputs) > 2 else None
    return (b is not None and b.const_value is not None and len(b.const_value.shape) == 2
            and not node.outputs[0].is_graph_output() and not attributes.get_int("transA", 0)
            and attributes.get_float("alpha", 1.0) == 1.0
            and (c is None or attributes.get_float("beta", 1.0) == 1.0))


def _nncf_compress(model: Path, outdir: Path) -> tuple[Path, str]:
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters

    from deploycc.quantize.openvino_nncf import _nncf
    from deploycc.quantize.ort_qdq import quiet

    nncf = _nncf()
    # a weight whose reduced dim BLOCK_SIZE does not divide takes the largest group that does (at
    # least MIN_GROUP); NNCF refuses the whole model otherwise (the corpus Llama's 344-wide MLP)
    fallback = AdvancedCompressionParameters(group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST,
                                             min_adjusted_group_size=MIN_GROUP)
    with quiet():  # its progress bars and statistics table
        source = ov.Core().read_model(str(model))
        compressed = nncf.compress_weights(source, mode=nncf.CompressWeightsMode.INT4_SYM, ratio=1.0,
                                           group_size=BLOCK_SIZE, advanced_parameters=fallback)
    blocks = sum(1 for op in compressed.get_ops() if op.get_type_name() == "Constant"
                 and op.get_element_type().get_type_name() in ("i4", "u4"))
    if blocks == 0:
        raise NoWeightsToQuantize("int4 weight-only: NNCF compressed none of the model's MatMul weights")
    ov.save_model(compressed, str(outdir / OPENVINO_IR), compress_to_fp16=False)
    return outdir / OPENVINO_IR, (f"int4 weight-only: NNCF's compress_weights, {blocks} weight(s) in 4 bits "
                                  f"(INT4_SYM, groups of {BLOCK_SIZE}; NNCF keeps the embedding and the last "
                                  "layer in int8 unless asked); activations in float")


# The quantizers a backend's recipe names, and the function here that runs each
WEIGHT_QUANTIZERS: dict[WeightQuantizer, Callable[[Path, Path], tuple[Path, str]]] = {
    WeightQuantizer.ORT_MATMUL_NBITS: _matmul_nbits, WeightQuantizer.NNCF_COMPRESS: _nncf_compress}
