"""Running one ONNX conformance case on a backend and judging its outputs, for every element type
the cases use.

The cases store some inputs and expected outputs as TensorProto or numpy scalars, and the exotic
types (bfloat16, float8, int4, int2, float4) as ml_dtypes arrays, which neither ONNX Runtime's nor
OpenVINO's Python bindings accept as numpy. Those travel as their raw storage bits (sub-byte types
packed low bits first, as both runtimes store them) and are decoded back by the ONNX element type,
so a case fails only for what the backend does, never for what the harness could not feed.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, numpy_helper

RTOL, ATOL = 1e-3, 1e-4
REFUSAL_WORDS = ("NOT_IMPLEMENTED", "not supported", "Unsupported", "No conversion rule",
                 "Could not find an implementation", "has no element type")

# element type -> bits per element, for the types stored several to a byte
SUB_BYTE_BITS: dict[int, int] = {
    TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2, TensorProto.UINT2: 2}
# the ml_dtypes element types, which travel as raw storage bits (bits per element)
RAW_BITS: dict[int, int] = {
    **SUB_BYTE_BITS, TensorProto.BFLOAT16: 16, TensorProto.FLOAT8E4M3FN: 8, TensorProto.FLOAT8E4M3FNUZ: 8,
    TensorProto.FLOAT8E5M2: 8, TensorProto.FLOAT8E5M2FNUZ: 8, TensorProto.FLOAT8E8M0: 8}

OPENVINO_TYPE_NAMES: dict[int, str] = {
    TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT8E4M3FN: "f8e4m3", TensorProto.FLOAT8E5M2: "f8e5m2",
    TensorProto.FLOAT8E8M0: "f8e8m0", TensorProto.INT4: "i4", TensorProto.UINT4: "u4",
    TensorProto.FLOAT4E2M1: "f4e2m1"}


class Refused(Exception):
    """The backend has no way to take or give this element type at all."""


def as_value(value: Any) -> Any:
    """A case's input or expected output as numpy (sequences as lists, an empty optional as None)."""
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [as_value(item) for item in value]
    return value


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


def same(got: Any, want: Any) -> bool:
    """Output equality at the probe's tolerance: floats within rtol/atol, everything else exact."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if want is None:
        return got is None
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if is_exotic(want) or is_exotic(got):
        wide = np.int64 if "int" in want.dtype.name else np.float64
        got, want = got.astype(wide), want.astype(wide)
    if want.dtype.kind in "fc":
        return bool(np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(np.array_equal(got, want))


def _ort_value(array: np.ndarray) -> Any:
    import onnxruntime as ort

    raw = storage_bytes(array)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), elem_type(array))
    ctypes.memmove(value.data_ptr(), raw, len(raw))
    return value


def _ort_output(value: Any) -> Any:
    if not value.is_tensor():
        return value.numpy() if hasattr(value, "numpy") else value
    kind = value.element_type()
    if kind not in RAW_BITS:
        return value.numpy()
    shape = list(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    return decode(ctypes.string_at(value.data_ptr(), -(-count * RAW_BITS[kind] // 8)), shape, kind)


def run_onnxruntime(model_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    from deploycc.verify.runner import session as ort_session

    session = ort_session(model_bytes, optimize=True, threads=0)  # ORT's defaults, as a user gets them
    feeds = {name: _ort_value(value) if is_exotic(value) else value for name, value in feeds.items()}
    raw_names = {ir.DataType(kind).name.lower() for kind in RAW_BITS}  # ORT says tensor(bfloat16)
    if not any(o.type.startswith("tensor(") and o.type[7:-1] in raw_names for o in session.get_outputs()):
        return list(session.run(None, feeds))
    # an output numpy cannot hold: run on OrtValues and read its storage bits
    values = {name: value if not isinstance(value, np.ndarray) else ort.OrtValue.ortvalue_from_numpy(value)
              for name, value in feeds.items()}
    return [_ort_output(out) for out in session.run_with_ort_values(None, values)]



def _openvino_type(kind: int) -> Any:
    import openvino as ov

    name = OPENVINO_TYPE_NAMES.get(kind)
    if name is None:
        raise Refused(f"OpenVINO has no element type {TensorProto.DataType.Name(kind)}")
    return getattr(ov.Type, name)


def _openvino_output(tensor: Any) -> np.ndarray:
    import openvino as ov

    kind = {getattr(ov.Type, name): kind for kind, name in OPENVINO_TYPE_NAMES.items()}[tensor.element_type]
    raw = np.ascontiguousarray(tensor.data).view(np.uint8).tobytes()
    return decode(raw, list(tensor.shape), kind)


def run_openvino(model_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
    import openvino as ov

    from deploycc.backends.openvino import compile_model

    compiled = compile_model(model_bytes, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    # OpenVINO drops graph inputs nothing reads (a Shape folded to a constant): feed what it kept
    kept = {name for port in compiled.inputs for name in port.get_names()}
    tensors = {}
    for name, value in feeds.items():
        if name not in kept:
            continue
        if is_exotic(value):
            value = ov.Tensor(np.frombuffer(storage_bytes(value), dtype=np.uint8).copy(),
                              ov.Shape(list(value.shape)), _openvino_type(elem_type(value)))
        tensors[name] = value
    request = compiled.create_infer_request()
    results = request.infer(tensors)
    exotic = {getattr(ov.Type, name) for name in OPENVINO_TYPE_NAMES.values()}
    return [_openvino_output(request.get_output_tensor(index)) if port.element_type in exotic
            else results[port] for index, port in enumerate(compiled.outputs)]


def headline(error: Exception) -> str:
    """The informative part of a backend's message: OpenVINO's start with source-file lines."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    boilerplate = ("Summary:", "Model wasn't fully converted.", "Failed operations detailed log:")
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '", "src/"))
              and "FrontEnd API failed" not in line and line not in boilerplate]
    text = " ".join(useful[:2]) if useful else (lines[0] if lines else type(error).__name__)
    return text[:200]


RUNNERS = {"onnxruntime": run_onnxruntime, "openvino": run_openvino}


def outcome(kind: str, model_bytes: bytes, case: Any) -> tuple[str, str]:
    """pass | mismatch | refused | error, with the first line of the backend's message."""
    proto = onnx.load_from_string(model_bytes)
    constants = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in constants]
    for inputs, expected in case.data_sets:
        feeds = dict(zip(names, (as_value(x) for x in inputs), strict=False))
        try:
            actual = RUNNERS[kind](model_bytes, feeds)
        except Exception as error:
            text = headline(error)
            if isinstance(error, Refused) or any(word in text for word in REFUSAL_WORDS):
                return "refused", text
            return "error", text
        try:
            pairs = zip(actual, expected, strict=False)
            agree = all(same(as_value(got), as_value(want)) for got, want in pairs)
        except Exception as error:  # outputs of a kind the comparison cannot read
            return "error", f"harness: {type(error).__name__}: {str(error)[:100]}"
        if not agree:
            return "mismatch", f"outputs differ beyond rtol {RTOL:g} / atol {ATOL:g}"
    return "pass", ""
