"""Integer arithmetic as the ONNX spec defines it, on a CPU whose ONNX Runtime kernels saturate.

On an x86 CPU without AVX-VNNI, ONNX Runtime multiplies uint8 activations by int8 weights with
vpmaddubsw, whose pairwise int16 sums saturate: MatMulInteger, ConvInteger and the QLinearConv /
QLinearMatMul that its level-2 optimizer fuses Q/DQ graphs into return other values than the
spec's (ORT's quantization guide names the hazard; measured here, a 64-long uint8 x int8 dot
product off by 652,590 of 1,701,134). A GPU computes them exactly (int32 accumulation), so a
model bound for one is judged against the spec's values:

- MatMulInteger / ConvInteger with a constant int8 B (W): the same integer products with B + 128
  as uint8 and its zero point + 128, which ORT's uint8 x uint8 kernel computes without
  saturating. (B - zb) is unchanged, so the result is the spec's to the last bit. The same for
  com.microsoft's DynamicQuantizeLSTM (W and R), whose recurrent products saturate alike.
- Optimization at ORT's basic level, short of the Q/DQ fusion.

A CPU target runs ORT's (or OpenVINO's) own kernels, and is judged against what ORT computes.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir

EXACT = contextvars.ContextVar("deploycc_exact_integers", default=False)
# (domain, op) -> the (weight, its zero point) input indices of each uint8 x int8 product; each
# op accepts uint8 weights with a uint8 zero point (its schema's T2)
INTEGER_OPS: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {
    ("", "MatMulInteger"): ((1, 3),),
    ("", "ConvInteger"): ((1, 3),),
    ("com.microsoft", "DynamicQuantizeLSTM"): ((1, 9), (2, 11)),  # W, R and their zero points
}


@contextlib.contextmanager
def exact_integers(on: bool) -> Iterator[None]:
    """Within: every ORT run deploycc makes computes integer ops as the spec defines them."""
    token = EXACT.set(on)
    try:
        yield
    finally:
        EXACT.reset(token)


def _names_an_integer_op(source: bytes | Path) -> bool:
    """Whether the model's bytes hold the name of an op in INTEGER_OPS. A file is searched where
    it is mapped, not read into memory: every session of a proof asks, and reading a 350 MB model
    to find none took 0.5 s, twice the search."""
    import mmap

    names = [op.encode() for _, op in INTEGER_OPS]
    if isinstance(source, bytes):
        return any(name in source for name in names)
    with open(source, "rb") as file:
        if not os.fstat(file.fileno()).st_size:
            return False
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return any(mapped.find(name) >= 0 for name in names)


def has_integer_ops(model: ir.Model) -> bool:
    """Whether a model in memory has an op that with_exact_integers rewrites: a caller that knows
    it has none spares its sessions the search of the file (0.1 s per session of a 100 MB
    DenseNet, four sessions in an fp16 analysis)."""
    from deploycc.graph.graphs import all_nodes

    return any(("" if node.domain == "ai.onnx" else node.domain, node.op_type) in INTEGER_OPS
               for node in all_nodes(model.graph))


def with_exact_integers(source: bytes | Path) -> bytes | Path:
    """The model with each constant int8 weight of MatMulInteger/ConvInteger read as uint8 + 128
    (zero point too); the model itself when it has none."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if not _names_an_integer_op(source):
        return source
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    model = onnx.load_from_string(data)
    graph = model.graph
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in graph.initializer):
        return source  # its weights live beside the file: ORT finds them only from the path
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    changed = 0
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        for weight_at, zero_at in INTEGER_OPS.get((domain, node.op_type), ()):
            weight = initializers.get(node.input[weight_at]) if len(node.input) > weight_at else None
            if weight is None or weight.data_type != onnx.TensorProto.INT8:
                continue
            has_zero = len(node.input) > zero_at and node.input[zero_at] != ""
            zero_tensor = initializers.get(node.input[zero_at]) if has_zero else None
            if has_zero and (zero_tensor is None or zero_tensor.data_type != onnx.TensorProto.INT8):
                continue  # a zero point computed at run time: left as written
            zero = numpy_helper.to_array(zero_tensor) if zero_tensor is not None else np.zeros((), np.int8)
            shifted = (numpy_helper.to_array(weight).astype(np.int16) + 128).astype(np.uint8)
            shifted_zero = (zero.astype(np.int16) + 128).astype(np.uint8)
            names = (f"{weight.name}/u8/{changed}", f"{weight.name}/u8_zero_point/{changed}")
            graph.initializer.extend([numpy_helper.from_array(shifted, names[0]),
                                      numpy_helper.from_array(shifted_zero, names[1])])
            inputs = list(node.input) + [""] * (zero_at + 1 - len(node.input))
            inputs[weight_at], inputs[zero_at] = names
            del node.input[:]
            node.input.extend(inputs)
            changed += 1
    return model.SerializeToString() if changed else source
