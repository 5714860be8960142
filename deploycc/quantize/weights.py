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

from deploycc.backends.base import WeightQuantizer

INT4_ONNX = "model.int4.onnx"
OPENVINO_IR = "model.xml"  # the OpenVINO artifact's own name: the backend builds this IR as it is
BLOCK_SIZE = 32  # weights per scale, along the reduced axis: ORT's model builder's default for CPU
MIN_GROUP = 8  # NNCF: the smallest group a weight BLOCK_SIZE does not divide may take instead
# 4: int8 activations inside the kernel, the fastest on x86 (1: float32 activations)
ACCURACY_LEVEL = 4
LARGE_MODEL = 1 << 31  # protobuf's limit: beyond it the quantized weights go to external data


class NoWeightsToQuantize(ValueError):
    """The model has no MatMul reading a constant 2-D weight: int4 weight-only changes nothing."""


def quantize_weights_int4(quantizer: WeightQuantizer, model: Path, outdir: Path) -> tuple[Path, str]:
    """The model with its constant MatMul weights in int4 blocks, written in `outdir` by the backend's
    tool, and what was done; NoWeightsToQuantize where it has none."""
    from deploycc.quantize.dynamic import quantizable_weights

    if quantizable_weights(model) == 0:
        raise NoWeightsToQuantize("int4 weight-only quantizes MatMul weights, and this model has no MatMul "
                                  "that reads a constant weight")  # (a Gemm's are not taken either)
    return WEIGHT_QUANTIZERS[quantizer](model, outdir)


def _matmul_nbits(model: Path, outdir: Path) -> tuple[Path, str]:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from deploycc import io
    from deploycc.quantize.ort_qdq import quiet

    quantized = outdir / INT4_ONNX
    large = sum(f.stat().st_size for f in model.parent.glob(f"{model.name}*")) > LARGE_MODEL
    with quiet():  # the quantizer logs each weight it writes
        quantizer = MatMulNBitsQuantizer(onnx.load(model), bits=4, block_size=BLOCK_SIZE, is_symmetric=True,
                                         accuracy_level=ACCURACY_LEVEL, op_types_to_quantize=("MatMul",))
        quantizer.process()
        quantizer.model.save_model_to_file(str(quantized), use_external_data_format=large)
    blocks = sum(1 for node in io.peek(quantized).model.graph if node.op_type == "MatMulNBits")
    if blocks == 0:  # every weight's shape was one the quantizer skips (not 2-D, too narrow)
        raise NoWeightsToQuantize("int4 weight-only: ONNX Runtime's quantizer took none of the model's "
                                  "MatMul weights (their shapes are not 2-D blocks of "
                                  f"{BLOCK_SIZE})")
    return quantized, (f"int4 weight-only: ONNX Runtime's MatMulNBits, {blocks} MatMul weight(s) in 4 bits, "
                       f"symmetric blocks of {BLOCK_SIZE}, accuracy level {ACCURACY_LEVEL}; activations "
                       "in float")


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
