"""Weight-only quantization (`--precision int4` and `int8-weights`, where the target's backend runs
it): the constant weights of the MatMuls in 4 or 8 bits, the activations in float; no calibration
data, a model about a quarter (int4) or half (int8) of its float weights' size. Each backend's own
tool, as its recipe names it (BackendStages.weight_only):

  WeightQuantizer.ORT_MATMUL_NBITS  ONNX Runtime's matmul_nbits_quantizer: MatMulNBits (4 or 8 bits,
                                    symmetric blocks of BLOCK_SIZE), which the CPU provider computes
                                    with int8 activations inside the kernel (accuracy level 4)
  WeightQuantizer.NNCF_COMPRESS     NNCF's compress_weights on the OpenVINO model (INT4_SYM in groups
                                    of BLOCK_SIZE; INT8_ASYM per output channel, NNCF's default and
                                    Optimum-Intel's for decoders past a billion parameters), written
                                    as the IR the backend builds as it is
  WeightQuantizer.ORT_BLOCKWISE_QDQ ONNX Runtime's quantizer in its Q/DQ form, for TensorRT 10 (int4
                                    only): each weight an int4 DequantizeLinear (opset 21, symmetric
                                    blocks, the zero point 0 its parser asks) into the MatMul, which
                                    TensorRT builds as INT4 weight-only GEMMs with fp16 activations

Judged like int8 (its verification's tolerances and the budget's cosine). Past protobuf's 2 GB the
ONNX Runtime forms are written one weight at a time by ONNX Runtime's own packing kernel (the
quantizer's output bit for bit), in a process of their own: its quantizer holds the whole model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploycc.backends.base import WeightQuantizer

INT4_ONNX = "model.int4.onnx"
WEIGHTS_ONNX = {4: INT4_ONNX, 8: "model.int8-weights.onnx"}  # by the bits a weight keeps
BLOCKWISE_OPSET = 21  # DequantizeLinear's block_size and the int4 type both came in opset 21
OPENVINO_IR = "model.xml"  # the OpenVINO artifact's own name: the backend builds this IR as it is
BLOCK_SIZE = 32  # weights per scale, along the reduced axis: ORT's model builder's default for CPU
MIN_GROUP = 8  # NNCF: the smallest group a weight BLOCK_SIZE does not divide may take instead
# 4: int8 activations inside the kernel, the fastest on x86 (1: float32 activations)
ACCURACY_LEVEL = 4


class NoWeightsToQuantize(ValueError):
    """The model has no MatMul reading a constant 2-D weight: weight-only quantization changes nothing."""


def _what(bits: int) -> str:
    return f"int{bits} weight-only"


def quantize_weights(quantizer: WeightQuantizer, model: Path, outdir: Path, bits: int) -> tuple[Path, str]:
    """The model with its constant MatMul weights in `bits` (4 or 8), written in `outdir` by the
    backend's tool, and what was done; NoWeightsToQuantize where it has none."""
    from deploycc import io
    from deploycc.quantize.dynamic import quantizable_weights
    from deploycc.quantize.isolated import quantized_in_own_process_if_large

    graph = io.peek(model).model.graph
    if quantizable_weights(graph) == 0 and not any(_lowerable(node) for node in graph):
        raise NoWeightsToQuantize(f"{_what(bits)} quantizes MatMul weights, and this model has no MatMul "
                                  "(or Gemm inside the graph) that reads a constant weight")
    if quantizer in (WeightQuantizer.ORT_MATMUL_NBITS, WeightQuantizer.ORT_BLOCKWISE_QDQ):
        # ONNX Runtime's quantizer loads the whole model with onnx
        return quantized_in_own_process_if_large(WEIGHT_QUANTIZERS[quantizer], model, outdir, bits)
    return WEIGHT_QUANTIZERS[quantizer](model, outdir, bits)


def _matmul_nbits(model: Path, outdir: Path, bits: int) -> tuple[Path, str]:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from deploycc import io
    from deploycc.quantize.isolated import past_protobuf_limit
    from deploycc.quantize.ort_qdq import quiet

    quantized = outdir / WEIGHTS_ONNX[bits]
    if past_protobuf_limit(model):
        lowered = _matmul_nbits_streamed(model, quantized, bits)
    else:
        proto, lowered = _gemms_as_matmuls(model)
        with quiet():  # the quantizer logs each weight it writes
            quantizer = MatMulNBitsQuantizer(proto, bits=bits, block_size=BLOCK_SIZE, is_symmetric=True,
                                             accuracy_level=ACCURACY_LEVEL, op_types_to_quantize=("MatMul",))
            quantizer.process()
            quantizer.model.save_model_to_file(str(quantized), use_external_data_format=False)
    blocks = sum(1 for node in io.peek(quantized).model.graph if node.op_type == "MatMulNBits")
    if blocks == 0:  # every weight's shape was one the quantizer skips (not 2-D, too narrow)
        raise NoWeightsToQuantize(f"{_what(bits)}: ONNX Runtime's quantizer took none of the model's "
                                  "MatMul weights (their shapes are not 2-D blocks of "
                                  f"{BLOCK_SIZE})")
    gemms = f" ({lowered} of them Gemms, written as MatMul and Add first)" if lowered else ""
    return quantized, (f"{_what(bits)}: ONNX Runtime's MatMulNBits, {blocks} MatMul weight(s) in {bits} bits"
                       f"{gemms}, symmetric blocks of {BLOCK_SIZE}, accuracy level {ACCURACY_LEVEL}; "
                       "activations in float")


def _matmul_nbits_streamed(model: Path, quantized: Path, bits: int) -> int:
    """The model past protobuf's limit as ONNX Runtime's quantizer writes it, one weight at a time:
    each MatMul reading a constant 2-D float weight becomes MatMulNBits, its blocks packed by the
    quantizer's own kernel (DefaultWeightOnlyQuantizer.qbits_block_quant). The quantizer itself
    holds the whole model as protobuf, and past 2 GB copies of it (quantize_dynamic, the same
    design, held 12.5 GB of TinyLlama-1.1B's 4.2 GB); this holds the packed weights and one float
    weight. Returns how many Gemms were lowered to MatMuls first."""
    import onnx_ir as ir
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        DefaultWeightOnlyQuantizer,
    )

    from deploycc import io
    from deploycc.quantize.dynamic import float_matmul_weights, put_in_place

    loaded = io.load(model, check=False)
    graph = loaded.model.graph
    lowered = _lower_gemms(graph)
    packer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=ACCURACY_LEVEL, bits=bits))
    suffix = f"_Q{bits}"  # the quantizer's own names
    for node, weight, tensor in float_matmul_weights(graph):
        values = tensor.numpy()
        rows, columns = values.shape
        packed, scales, _ = packer.qbits_block_quant(values)  # symmetric: no zero point
        del values  # one float weight at a time
        name = weight.name or f"{node.name}/weight"
        parts = [ir.Value(name=f"{name}{suffix}", const_value=ir.tensor(packed, name=f"{name}{suffix}")),
                 ir.Value(name=f"{name}_scales", const_value=ir.tensor(scales, name=f"{name}_scales"))]
        attributes = {"K": rows, "N": columns, "bits": bits, "block_size": BLOCK_SIZE,
                      "accuracy_level": ACCURACY_LEVEL}
        replacement = ir.node("MatMulNBits", [node.inputs[0], *parts], domain="com.microsoft",
                              attributes=attributes, name=f"{node.name or name}{suffix}")
        put_in_place(graph, node, weight, parts, replacement)
    loaded.model.opset_imports.setdefault("com.microsoft", 1)
    io.save(loaded.model, quantized, protect=(model,), force_external=True)
    return lowered


def _gemms_as_matmuls(model: Path) -> tuple[Any, int]:
    """The model's protobuf with its Gemms lowered (_lower_gemms), and how many were."""
    from deploycc import io

    loaded = io.load(model, check=False)
    lowered = _lower_gemms(loaded.model.graph)
    return io.to_proto(loaded.model), lowered


def _lower_gemms(graph: Any) -> int:
    """Each Gemm that reads a constant 2-D weight (alpha 1, A as it is, beta 1) written as MatMul
    (the weight transposed where transB) and Add, in place: ORT's MatMulNBits quantizer takes
    MatMuls only, and GPT-2's TorchScript export writes its projections as Gemm. A Gemm whose
    output is a graph output stays (its name is the model's interface). Returns how many."""
    import numpy as np
    import onnx_ir as ir

    from deploycc.quantize.dynamic import drop_if_unread

    lowered = 0
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
        drop_if_unread(graph, b)  # where this Gemm alone read it
        lowered += 1
    return lowered


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


def _nncf_compress(model: Path, outdir: Path, bits: int) -> tuple[Path, str]:
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters

    from deploycc.io.files import save_openvino_ir
    from deploycc.quantize.openvino_nncf import _nncf
    from deploycc.quantize.ort_qdq import quiet

    nncf = _nncf()
    # a weight whose reduced dim BLOCK_SIZE does not divide takes the largest group that does (at
    # least MIN_GROUP); NNCF refuses the whole model otherwise (the corpus Llama's 344-wide MLP)
    fallback = AdvancedCompressionParameters(group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST,
                                             min_adjusted_group_size=MIN_GROUP)
    with quiet():  # its progress bars and statistics table
        source = ov.Core().read_model(str(model))
        if bits == 4:
            compressed = nncf.compress_weights(source, mode=nncf.CompressWeightsMode.INT4_SYM, ratio=1.0,
                                               group_size=BLOCK_SIZE, advanced_parameters=fallback)
        else:  # one scale and zero point per output channel: NNCF takes no group or ratio for int8
            compressed = nncf.compress_weights(source, mode=nncf.CompressWeightsMode.INT8_ASYM)
    types = ("i4", "u4") if bits == 4 else ("i8", "u8")
    # the weights, not their zero points (INT8_ASYM's are u8 too, one per output channel: a dim of 1)
    blocks = sum(1 for op in compressed.get_ops() if op.get_type_name() == "Constant"
                 and op.get_element_type().get_type_name() in types
                 and sum(dim > 1 for dim in op.get_output_shape(0)) >= 2)
    if blocks == 0:
        raise NoWeightsToQuantize(f"{_what(bits)}: NNCF compressed none of the model's MatMul weights")
    save_openvino_ir(compressed, outdir / OPENVINO_IR)
    how = (f"INT4_SYM, groups of {BLOCK_SIZE}; NNCF keeps the embedding and the last layer in int8 unless "
           "asked" if bits == 4 else "INT8_ASYM, a scale and zero point per output channel")
    return outdir / OPENVINO_IR, (f"{_what(bits)}: NNCF's compress_weights, {blocks} weight(s) in {bits} "
                                  f"bits ({how}); activations in float")


def _blockwise_qdq(model: Path, outdir: Path, bits: int) -> tuple[Path, str]:
    """TensorRT 10's INT4 weight-only form: the model at opset 21 (converted as legalize converts),
    then ONNX Runtime's quantizer writing DequantizeLinear + MatMul. A weight TensorRT's importer
    would refuse stays float: its reduced dim not a whole number of blocks (the importer infers the
    block from the scales' shape) or an odd last dim (INT4 packs two values a byte). TensorRT's
    weight-only type is INT4 (its INT8 quantizes the activations too): the targets' data refuses
    int8-weights before it comes here."""
    if bits != 4:
        raise ValueError(f"TensorRT's weight-only quantization is INT4, not int{bits}")
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from deploycc import io
    from deploycc.quantize.isolated import past_protobuf_limit
    from deploycc.quantize.ort_qdq import quiet

    quantized = outdir / WEIGHTS_ONNX[bits]
    if past_protobuf_limit(model):
        lowered, converted, skipped = _blockwise_qdq_streamed(model, quantized)
    else:
        proto, lowered, converted = _prepared(model, opset=BLOCKWISE_OPSET)
        skipped = _not_blockwise(proto)
        with quiet():
            quantizer = MatMulNBitsQuantizer(proto, bits=4, block_size=BLOCK_SIZE, is_symmetric=True,
                                             quant_format=QuantFormat.QDQ, op_types_to_quantize=("MatMul",),
                                             nodes_to_exclude=skipped)
            quantizer.process()
            quantizer.model.save_model_to_file(str(quantized), use_external_data_format=False)
    blocks = sum(1 for node in io.peek(quantized).model.graph if node.op_type == "DequantizeLinear"
                 and "block_size" in node.attributes)
    if blocks == 0:
        raise NoWeightsToQuantize("int4 weight-only: none of the model's MatMul weights is a 2-D block of "
                                  f"{BLOCK_SIZE} rows with an even width, the form TensorRT's INT4 takes")
    gemms = f" ({lowered} of them Gemms, written as MatMul and Add first)" if lowered else ""
    kept = f"; {len(skipped)} kept float (not whole blocks of {BLOCK_SIZE}, or an odd width)" if skipped \
        else ""
    opset = f", the model converted from opset {converted} to {BLOCKWISE_OPSET}" if converted else ""
    return quantized, (f"int4 weight-only: blockwise INT4 Q/DQ for TensorRT 10 (ONNX Runtime's quantizer), "
                       f"{blocks} MatMul weight(s) as int4 DequantizeLinear, symmetric blocks of {BLOCK_SIZE}"
                       f"{gemms}{kept}{opset}; fp16 activations on the device")


def _blockwise_qdq_streamed(model: Path, quantized: Path) -> tuple[int, int | None, list[str]]:
    """_blockwise_qdq's model past protobuf's limit, one weight at a time: the quantizer's own kernel
    packs each weight's blocks, an int4 DequantizeLinear of them takes the float weight's place as
    the MatMul's input. Returns the Gemms lowered, the opset converted from, the weights kept float."""
    import onnx_ir as ir
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        DefaultWeightOnlyQuantizer,
    )

    from deploycc import io
    from deploycc.quantize.dynamic import drop_if_unread, float_matmul_weights

    loaded, lowered, converted = _loaded_at_opset(model, BLOCKWISE_OPSET)
    graph, skipped = loaded.graph, []
    packer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE, is_symmetric=True, quant_format=QuantFormat.QDQ, bits=4))
    for node, weight, tensor in float_matmul_weights(graph):
        values = tensor.numpy()
        rows, columns = values.shape
        if not _int4_blocks(rows, columns):
            skipped.append(node.name or "")
            continue
        packed, scales, _ = packer.qbits_block_quant(values)  # symmetric: no zero point
        del values  # one float weight at a time
        name = weight.name or f"{node.name}/weight"
        codes = ir.Value(name=f"{name}_DQ_Q4", const_value=ir.PackedTensor(
            packed, ir.DataType.INT4, shape=ir.Shape([rows, columns]), name=f"{name}_DQ_Q4"))
        scale = ir.Value(name=f"{name}_DQ_scales", const_value=ir.tensor(scales, name=f"{name}_DQ_scales"))
        graph.register_initializer(codes)
        graph.register_initializer(scale)
        dequantized = ir.node("DequantizeLinear", [codes, scale], name=f"{node.name or name}_DQ_Q4",
                              attributes={"axis": 0, "block_size": BLOCK_SIZE})
        graph.insert_before(node, dequantized)
        node.replace_input_with(1, dequantized.outputs[0])
        drop_if_unread(graph, weight)
    io.save(loaded, quantized, protect=(model,), force_external=True)
    return lowered, converted, skipped


def _prepared(model: Path, opset: int) -> tuple[Any, int, int | None]:
    """The model's protobuf with its Gemms lowered (as _gemms_as_matmuls) and at `opset` or newer,
    every MatMul named (the quantizer excludes nodes by name); with how many Gemms were lowered
    and the opset it was converted from (None: it was at `opset` already)."""
    from deploycc import io

    loaded, lowered, converted = _loaded_at_opset(model, opset)
    for position, node in enumerate(loaded.graph):
        if node.op_type == "MatMul" and not node.name:
            node.name = f"matmul_{position}"
    return io.to_proto(loaded), lowered, converted


def _loaded_at_opset(model: Path, opset: int) -> tuple[Any, int, int | None]:
    """The model (onnx-ir) with its Gemms lowered (_lower_gemms) and at `opset` or newer, converted
    as legalize converts; with how many Gemms were lowered and the opset it was converted from
    (None: it was at `opset` already)."""
    from deploycc import io
    from deploycc.passes.opset import convert_opset

    loaded = io.load(model, check=False).model
    lowered = _lower_gemms(loaded.graph)
    current = loaded.opset_imports.get("", loaded.opset_imports.get("ai.onnx", opset))
    if current >= opset:
        return loaded, lowered, None
    return convert_opset(loaded, opset), lowered, current


def _int4_blocks(rows: int, columns: int) -> bool:
    """Whether TensorRT's INT4 importer takes a [rows, columns] weight as blocks: whole blocks of
    BLOCK_SIZE along the reduced axis (it infers the block from the scales' shape) and an even width
    (INT4 packs two values a byte)."""
    return rows % BLOCK_SIZE == 0 and columns % 2 == 0


def _not_blockwise(proto: Any) -> list[str]:
    """The MatMuls whose constant 2-D weight TensorRT's INT4 importer would refuse as blocks."""
    weights = {tensor.name: tuple(tensor.dims) for tensor in proto.graph.initializer}
    return [node.name for node in proto.graph.node if node.op_type == "MatMul" and len(node.input) > 1
            and len(shape := weights.get(node.input[1], ())) == 2 and not _int4_blocks(*shape)]


# The quantizers a backend's recipe names, and the function here that runs each
WEIGHT_QUANTIZERS: dict[WeightQuantizer, Callable[[Path, Path, int], tuple[Path, str]]] = {
    WeightQuantizer.ORT_MATMUL_NBITS: _matmul_nbits, WeightQuantizer.NNCF_COMPRESS: _nncf_compress,
    WeightQuantizer.ORT_BLOCKWISE_QDQ: _blockwise_qdq}
