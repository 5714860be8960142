"""The one place that touches ONNX protobuf: load, validate, save.

Loading never reads weights: the protobuf is parsed with external data left on disk, every
external-data reference is validated (it must stay inside the model's folder, name a real file,
and agree with the tensor's shape) before onnx-ir maps anything, and the graph is handed to
the rest of deploycc as an `onnx_ir.Model` whose large tensors stay memory-mapped.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from deploycc.errors import ModelInputError

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

EXTERNAL_DATA_KEYS = {"location", "offset", "length", "checksum", "basepath"}
MAX_DECLARED_ELEMENTS = 2**40  # a tensor declaring more elements than this is not a real model


@dataclass(frozen=True)
class ExternalFile:
    location: str
    size_bytes: int
    tensors: int


@dataclass
class LoadedModel:
    """An IR model and what the loader learned about its files."""

    model: ir.Model
    path: Path
    file_size: int
    external_files: list[ExternalFile]


def _fail(path: Path, problem: str, hint: str | None = None) -> ModelInputError:
    return ModelInputError(f"{path}: {problem}", hint=hint)


def read_proto(path: Path) -> onnx.ModelProto:
    """Parse the model file, weights left on disk, with a one-line error for every bad file."""
    import onnx
    from google.protobuf.message import DecodeError

    if not path.exists():
        raise _fail(path, "no such file")
    if path.is_dir():
        raise _fail(path, "is a directory, not an ONNX model file")
    try:
        size = path.stat().st_size
        if size == 0:
            raise _fail(path, "is empty (0 bytes)")
        with path.open("rb") as handle:
            data = handle.read()
    except PermissionError:
        raise _fail(path, "cannot be read (permission denied)") from None
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(path, f"not an ONNX model: protobuf parse failed ({detail})",
                    "is the file truncated or not an .onnx file?") from None
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise _fail(path, "not an ONNX model: it parses as protobuf but has no graph or IR version")
    if not proto.opset_import:
        raise _fail(path, "not a valid ONNX model: it declares no opset_import")
    return proto


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
            raise _fail(path, f"{where} declares a negative dimension {dims}")
        elements = math.prod(dims) if dims else 1
        if elements > MAX_DECLARED_ELEMENTS:
            raise _fail(path, f"{where} declares {elements} elements, beyond any real model")
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {item.key: item.value for item in tensor.external_data}
        unknown = set(entries) - EXTERNAL_DATA_KEYS
        if unknown:
            raise _fail(path, f"{where} has unknown external-data key '{sorted(unknown)[0]}'")
        location = entries.get("location", "")
        resolved = safe_location(location, base)
        if isinstance(resolved, str):
            raise _fail(path, f"{where} external data location {location!r} refused: {resolved}",
                        "external data must be a file inside the model's folder")
        if not resolved.is_file():
            raise _fail(path, f"{where} external data file {location!r} not found beside the model")
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise _fail(path, f"{where} has a non-numeric external-data offset or length") from None
        file_size = resolved.stat().st_size
        if offset < 0 or (length is not None and length < 0):
            raise _fail(path, f"{where} has a negative external-data offset or length")
        bits = _element_bits(tensor.data_type)
        expected = None if bits is None else (elements * bits + 7) // 8
        if length is not None and expected is not None and length != expected:
            raise _fail(path, f"{where} external-data length {length} does not match its shape "
                              f"{dims} ({expected} bytes)")
        needed = length if length is not None else (expected or 0)
        if offset + needed > file_size:
            raise _fail(path, f"{where} reads bytes {offset}..{offset + needed} of {location!r}, "
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
            raise _fail(path, f"{where} holds {len(tensor.raw_data)} bytes but its shape "
                              f"{list(tensor.dims)} needs {expected}")


def check_proto(proto: onnx.ModelProto, path: Path, has_external_data: bool = False) -> None:
    """onnx.checker as a one-line error; weights are not loaded, so it works past 2 GB.

    With external data the checker is given the path: given a proto, it would look for the
    data files relative to the current directory instead of beside the model. The locations
    were vetted by validate_external_data before this runs.
    """
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            raise _fail(path, f"declares opset {opset.version} of the default domain, newer than "
                              f"the {newest} the installed onnx {onnx.__version__} knows",
                        "upgrade onnx, or export the model at a lower opset")
    try:
        onnx.checker.check_model(str(path) if has_external_data else proto, full_check=False)
    except onnx.checker.ValidationError as error:
        first = next((line for line in str(error).splitlines() if line.strip()), "invalid model")
        raise _fail(path, f"fails the ONNX checker: {first.strip()}") from None
    except Exception as error:  # the C++ checker raises other types for broken protos
        first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
        raise _fail(path, f"fails the ONNX checker: {first.strip()}") from None


def load(path: str | os.PathLike[str], *, check: bool = True) -> LoadedModel:
    """Load a model safely into onnx-ir, weights memory-mapped and never read here."""
    import onnx_ir as ir

    model_path = Path(path)
    proto = read_proto(model_path)
    external_files = validate_external_data(proto, model_path)
    validate_inline_tensors(proto, model_path)
    if check:
        check_proto(proto, model_path, has_external_data=bool(external_files))
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as error:  # onnx-ir's own complaints about a broken graph
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(model_path, f"cannot be read as a graph: {first}") from None
    ir.external_data.set_base_dir(model.graph, model_path.parent)
    return LoadedModel(model, model_path, model_path.stat().st_size, external_files)


def to_proto(model: ir.Model) -> Any:
    import onnx_ir as ir

    return ir.serde.serialize_model(model)
