"""Tensors a runtime's Python bindings cannot take or give as numpy: the exotic element types
(bfloat16, float8, int4, int2, float4), which the ONNX conformance cases store as ml_dtypes arrays.
They travel as their raw storage bits (sub-byte types packed low bits first, as ONNX Runtime and
OpenVINO store them) and are decoded back by the ONNX element type, so a case fails only for
what the backend does, never for what the harness could not feed. The backends' conformance
runners (`Backend.runners.conformance`) use these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnx import TensorProto

# element type -> bits per element, for the types stored several to a byte
SUB_BYTE_BITS: dict[int, int] = {
    TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2, TensorProto.UINT2: 2}
# the ml_dtypes element types, which travel as raw storage bits (bits per element)
RAW_BITS: dict[int, int] = {
    **SUB_BYTE_BITS, TensorProto.BFLOAT16: 16, TensorProto.FLOAT8E4M3FN: 8, TensorProto.FLOAT8E4M3FNUZ: 8,
    TensorProto.FLOAT8E5M2: 8, TensorProto.FLOAT8E5M2FNUZ: 8, TensorProto.FLOAT8E8M0: 8}


class Refused(Exception):
    """The backend has no way to take or give this element type at all."""


def is_exotic(value: Any) -> bool:
    """An ml_dtypes array (bfloat16, float8, int4...): runtimes take those only as raw bits."""
    return isinstance(value, np.ndarray) and value.dtype.type.__module__ == "ml_dtypes"


def elem_type(array: np.ndarray) -> int:
    return int(ir.DataType.from_numpy(array.dtype))


def storage_bytes(array: np.ndarray) -> bytes:
    """The array as a runtime stores it: one code per element, or packed for sub-byte types."""
    kind = elem_type(array)
    codes = np.ascontiguousarray(array).reshape(-1).view(np.uint8 if array.dtype.itemsize == 1 else np.uint16)
    bits = SUB_BYTE_BITS.get(kind)
    if bits is None:
        return codes.tobytes()
    per_byte = 8 // bits
    padded = np.zeros(-(-codes.size // per_byte) * per_byte, dtype=np.uint8)
    padded[:codes.size] = codes.astype(np.uint8) & ((1 << bits) - 1)
    grouped = padded.reshape(-1, per_byte).astype(np.uint16)
    packed = sum(grouped[:, slot] << (slot * bits) for slot in range(per_byte))
    return np.asarray(packed, dtype=np.uint8).tobytes()


def decode(raw: bytes, shape: list[int], kind: int) -> np.ndarray:
    """Raw storage bytes of an element type back into an (ml_dtypes) array."""
    dtype = ir.DataType(kind).numpy()
    count = int(np.prod(shape, dtype=np.int64))
    bits = SUB_BYTE_BITS.get(kind)
    stored = np.frombuffer(raw, dtype=np.uint8)
    if bits is not None:
        slots = [(stored >> (slot * bits)) & ((1 << bits) - 1) for slot in range(8 // bits)]
        codes = np.stack(slots, axis=1).reshape(-1)[:count].astype(np.uint8)
    else:
        codes = stored.view(np.uint8 if dtype.itemsize == 1 else np.uint16)[:count]
    return codes.view(dtype).reshape(shape)
