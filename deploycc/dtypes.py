"""deploycc's names for tensor element types, and the mapping from onnx_ir's enum.

Targets name dtypes the way users say them (float32, int64, bool), not by protobuf enum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir

# onnx_ir.DataType member name -> deploycc dtype name
_IR_TO_NAME = {
    "FLOAT": "float32", "DOUBLE": "float64", "FLOAT16": "float16", "BFLOAT16": "bfloat16",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "BOOL": "bool", "STRING": "string", "COMPLEX64": "complex64", "COMPLEX128": "complex128",
    "FLOAT8E4M3FN": "float8e4m3fn", "FLOAT8E4M3FNUZ": "float8e4m3fnuz",
    "FLOAT8E5M2": "float8e5m2", "FLOAT8E5M2FNUZ": "float8e5m2fnuz",
    "FLOAT8E8M0": "float8e8m0", "FLOAT4E2M1": "float4e2m1",
    "INT4": "int4", "UINT4": "uint4", "INT2": "int2", "UINT2": "uint2",
}

KNOWN_DTYPES = frozenset(_IR_TO_NAME.values())


def dtype_name(dtype: ir.DataType | None) -> str | None:
    """float32 for ir.DataType.FLOAT; None when the type is unknown."""
    if dtype is None or dtype.name == "UNDEFINED":
        return None
    return _IR_TO_NAME.get(dtype.name, dtype.name.lower())


def type_name(value: ir.Value) -> str | None:
    """The element type of a value as deploycc names it, including seq(...) and optional(...)."""
    value_type = value.type
    if value_type is None:
        return None
    kind = type(value_type).__name__
    element = dtype_name(value_type.dtype)
    if kind == "SequenceType":
        return f"seq({element})" if element else None
    if kind == "OptionalType":
        return f"optional({element})" if element else None
    return element


def stored_bytes(tensor: ir.TensorProtocol) -> int:
    """The bytes a tensor holds: onnx-ir's nbytes, which has no bit width for a STRING tensor
    (TypeError, an internal error on a model with a string initializer), where that is the
    strings' lengths."""
    try:
        return int(tensor.nbytes)
    except TypeError:
        return int(sum(len(item) for item in tensor.numpy().reshape(-1)))
