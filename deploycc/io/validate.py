"""Vetting a parsed model before anything maps it: external-data references, inline tensors and
declared dims, each refused with a one-line error that names the tensor or value.

Nothing here reads a weight: external data is checked by its file's size and the tensor's shape.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from deploycc.errors import ModelInputError
from deploycc.io.node_order import subgraphs

if TYPE_CHECKING:
    import onnx

EXTERNAL_DATA_KEYS = {"location", "offset", "length", "checksum", "basepath"}
MAX_DECLARED_ELEMENTS = 2**40  # a tensor declaring more elements than this is not a real model


@dataclass(frozen=True)
class ExternalFile:
    location: str
    size_bytes: int
    tensors: int


def model_error(path: Path, problem: str, hint: str | None = None) -> ModelInputError:
    return ModelInputError(f"{path}: {problem}", hint=hint)


def _walk_tensors(graph: onnx.GraphProto, where: str = "graph"):
    """Every TensorProto in a graph and its subgraphs, with a label saying where it is."""
    for tensor in graph.initializer:
        yield tensor, f"{where} initializer '{tensor.name}'"
    for sparse in graph.sparse_initializer:
        yield sparse.values, f"{where} sparse initializer '{sparse.values.name}'"
        yield sparse.indices, f"{where} sparse initializer indices '{sparse.indices.name}'"
    for node in graph.node:
        label = f"node '{node.name or node.op_type}'"
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, f"{label} attribute '{attr.name}'"
            for tensor in attr.tensors:
                yield tensor, f"{label} attribute '{attr.name}'"
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values, f"{label} attribute '{attr.name}'"
            if attr.HasField("g"):
                yield from _walk_tensors(attr.g, f"{label} subgraph '{attr.name}'")
            for sub in attr.graphs:
                yield from _walk_tensors(sub, f"{label} subgraph '{attr.name}'")


def _walk_all_tensors(proto: onnx.ModelProto):
    yield from _walk_tensors(proto.graph)
    for function in proto.functions:
        for node in function.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t, f"function '{function.name}' node '{node.name}'"


def _element_bits(data_type: int) -> int | None:
    import onnx

    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, ValueError, TypeError):
        return None
    if data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.FLOAT4E2M1):
        return 4
    if np_dtype.kind in ("O", "U", "S"):
        return None
    return np_dtype.itemsize * 8


def safe_location(location: str, base: Path) -> Path | str:
    """The resolved file for an external-data location, or a reason it is refused.

    Refused: absolute paths (POSIX or Windows), drive letters, backslashes, any '..' part,
    and anything whose real path (symlinks followed) is not inside the model's folder.
    """
    if not location or "\x00" in location:
        return "empty or NUL-containing location"
    if "\\" in location or PureWindowsPath(location).drive or re.match(r"^[A-Za-z]:", location):
        return "Windows-style path"
    posix = PurePosixPath(location)
    if posix.is_absolute():
        return "absolute path"
    if any(part == ".." for part in posix.parts):
        return "path climbs out with '..'"
    base_real = Path(os.path.realpath(base))
    target = Path(os.path.realpath(base / location))
    if target != base_real and base_real not in target.parents:
        return "resolves (through a symbolic link) outside the model's folder"
    return target


def validate_external_data(proto: onnx.ModelProto, path: Path) -> list[ExternalFile]:
    """Refuse unsafe or inconsistent external-data references before anything is read."""
    import onnx

    base = path.parent
    files: dict[str, list[int]] = {}
    for tensor, where in _walk_all_tensors(proto):
        dims = list(tensor.dims)
        if any(d < 0 for d in dims):
            raise model_error(path, f"{where} declares a negative dimension {dims}")
        elements = math.prod(dims) if dims else 1
        if elements > MAX_DECLARED_ELEMENTS:
            raise model_error(path, f"{where} declares {elements} elements, beyond any real model")
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {item.key: item.value for item in tensor.external_data}
        unknown = set(entries) - EXTERNAL_DATA_KEYS
        if unknown:
            raise model_error(path, f"{where} has unknown external-data key '{sorted(unknown)[0]}'")
        location = entries.get("location", "")
        resolved = safe_location(location, base)
        if isinstance(resolved, str):
            raise model_error(path, f"{where} external data location {location!r} refused: {resolved}",
                              "external data must be a file inside the model's folder")
        if not resolved.is_file():
            raise model_error(path, f"{where} external data file {location!r} not found beside the model")
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise model_error(path, f"{where} has a non-numeric external-data offset or length") from None
        file_size = resolved.stat().st_size
        if offset < 0 or (length is not None and length < 0):
            raise model_error(path, f"{where} has a negative external-data offset or length")
        bits = _element_bits(tensor.data_type)
        expected = None if bits is None else (elements * bits + 7) // 8
        if length is not None and expected is not None and length != expected:
            raise model_error(path, f"{where} external-data length {length} does not match its shape "
                                    f"{dims} ({expected} bytes)")
        needed = length if length is not None else (expected or 0)
        if offset + needed > file_size:
            raise model_error(path, f"{where} reads bytes {offset}..{offset + needed} of {location!r}, "
                                    f"which has only {file_size}")
        record = files.setdefault(location, [file_size, 0])
        record[1] += 1
    return [ExternalFile(loc, size, count) for loc, (size, count) in sorted(files.items())]


def validate_inline_tensors(proto: onnx.ModelProto, path: Path) -> None:
    """Initializers whose raw data size disagrees with their declared shape are refused."""
    import onnx

    for tensor, where in _walk_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
            continue
        bits = _element_bits(tensor.data_type)
        if bits is None:
            continue
        elements = math.prod(tensor.dims) if tensor.dims else 1
        expected = (elements * bits + 7) // 8
        if len(tensor.raw_data) != expected:
            raise model_error(path, f"{where} holds {len(tensor.raw_data)} bytes but its shape "
                                    f"{list(tensor.dims)} needs {expected}")


def _walk_value_infos(graph: onnx.GraphProto, where: str = "graph"):
    for kind, values in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for value in values:
            yield value, f"{where} {kind} '{value.name}'"
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subgraphs:
                yield from _walk_value_infos(sub, f"node '{node.name or node.op_type}' subgraph")


def validate_names(proto: onnx.ModelProto, path: Path) -> None:
    """ONNX names are UTF-8 text; protobuf hands a name that is not as bytes, which nothing can
    write back (onnx-ir's serializer failed: an internal error) and ONNX Runtime's Python cannot
    name as an input or output. Refused here, naming the bytes."""

    def refuse(name: object, where: str) -> None:
        if isinstance(name, bytes):
            raise model_error(path, f"{where} is named {name[:40]!r}, which is not UTF-8 text "
                                    f"(ONNX names are UTF-8)")

    def walk(graph: onnx.GraphProto, where: str) -> None:
        refuse(graph.name, f"{where} itself")
        for values in (graph.input, graph.output, graph.value_info, graph.initializer):
            for value in values:
                refuse(value.name, f"{where}: a value")
        for node in graph.node:
            refuse(node.name, f"{where}: a node")
            for name in (*node.input, *node.output, node.op_type, node.domain):
                refuse(name, f"{where}: node '{node.name}'")
            for attr in node.attribute:
                refuse(attr.name, f"{where}: node '{node.name}' attribute")
            for sub in subgraphs(node):
                walk(sub, f"{where}: node '{node.name}' subgraph")

    walk(proto.graph, "graph")
    for function in proto.functions:
        refuse(function.name, "a function")
        for node in function.node:
            for name in (node.name, *node.input, *node.output, node.op_type):
                refuse(name, f"function '{function.name}'")


def validate_declared_dims(proto: onnx.ModelProto, path: Path) -> list[str]:
    """Negative tensor dims and absurdly large declared dims are refused before anything sizes a
    buffer by them. A negative dim declared on a value (PaddlePaddle exports write -1 for a
    dynamic one; ONNX Runtime reads it so) becomes an unnamed dynamic dim; a note says so."""
    for tensor, where in _walk_all_tensors(proto):
        if any(d < 0 for d in tensor.dims):
            raise model_error(path, f"{where} declares a negative dim {list(tensor.dims)}")
    relaxed = []
    for value, where in _walk_value_infos(proto.graph):
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type" or not value.type.tensor_type.HasField("shape"):
            continue
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.ClearField("dim_value")
                relaxed.append(where)
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim if d.HasField("dim_value")]
        if dims and math.prod(dims) > MAX_DECLARED_ELEMENTS:
            raise model_error(path, f"{where} declares {math.prod(dims):.3g} elements ({dims}), more than "
                                    f"any real model holds")
    if not relaxed:
        return []
    return [f"negative dims read as dynamic on {len(set(relaxed))} value(s), e.g. {relaxed[0]}"]

