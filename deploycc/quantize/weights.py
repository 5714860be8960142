"""INT4 weight-only (`--precision int4`, where the target's backend runs it): the constant weights of
the MatMuls in 4 bits, blockwise with a scale per block, the activations in float; ONNX Runtime's
own quantizer writes them as its MatMulNBits, which its CPU provider computes with int8 activations
inside the kernel (accuracy level 4). What a user of a generative model gets from onnxruntime's
`matmul_nbits_quantizer` today: no calibration data, a model a quarter of its float weights' size.
Judged like int8 (its verification's tolerances and the budget's cosine)."""

from __future__ import annotations

from pathlib import Path

INT4_ONNX = "model.int4.onnx"
BLOCK_SIZE = 32  # weights per scale, along the reduced axis: ORT's model builder's default for CPU
# 4: int8 activations inside the kernel, the fastest on x86 (1: float32 activations)
ACCURACY_LEVEL = 4
LARGE_MODEL = 1 << 31  # protobuf's limit: beyond it the quantized weights go to external data


class NoWeightsToQuantize(ValueError):
    """The model has no MatMul reading a constant 2-D weight: int4 weight-only changes nothing."""


def quantize_weights_int4(model: Path, outdir: Path) -> tuple[Path, str]:
    """The model with its constant MatMul weights in int4 blocks, written in `outdir`, and what was
    done; NoWeightsToQuantize where it has none."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from deploycc import io
    from deploycc.quantize.dynamic import quantizable_weights
    from deploycc.quantize.ort_qdq import quiet

    if quantizable_weights(model) == 0:
        raise NoWeightsToQuantize("int4 weight-only quantizes MatMul weights, and this model has no MatMul "
                                  "that reads a constant weight")
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
