"""Reading a model file: parsed with its weights left on disk, vetted (validate.py, node_order.py,
checker.py), and handed on as an `onnx_ir.Model` whose large tensors stay memory-mapped; and the
protobuf <-> IR conversions, which keep the types onnx-ir lacks aside (map_types.py).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc import budget
from deploycc.errors import ModelInputError
from deploycc.io.checker import check_proto, onnxruntime_loads
from deploycc.io.map_types import MAP_TYPES, restore_map_types, strip_map_types
from deploycc.io.node_order import rename_redefinitions, sort_topologically
from deploycc.io.validate import (
    ExternalFile,
    model_error,
    validate_declared_dims,
    validate_external_data,
    validate_inline_tensors,
    validate_names,
)

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir


@dataclass
class LoadedModel:
    """An IR model and what the loader learned about its files."""

    model: ir.Model
    path: Path
    file_size: int
    external_files: list[ExternalFile]
    notes: list[str] = field(default_factory=list)  # e.g. why shape inference failed


ZIP_MAGIC = b"PK\x03\x04"


def read_proto(path: Path) -> onnx.ModelProto:
    """Parse the model file, weights left on disk, with a one-line error for every bad file."""
    import onnx
    from google.protobuf.message import DecodeError

    if not path.exists():
        raise model_error(path, "no such file")
    if path.is_dir():
        raise model_error(path, "is a directory, not an ONNX model file")
    try:
        size = path.stat().st_size
        if size == 0:
            raise model_error(path, "is empty (0 bytes)")
        with path.open("rb") as handle:
            data = handle.read()
    except PermissionError:
        raise model_error(path, "cannot be read (permission denied)") from None
    if data.startswith(ZIP_MAGIC):  # never an ONNX protobuf's first bytes (field 10 is not ModelProto's)
        raise model_error(path, "is a zip archive (as torch's .pt and .pt2 files are), not an ONNX model",
                          "a torch model goes to build, legalize or check as model.pt2 or model.pt")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        if "alloc failed" in detail:  # protobuf's arena ran out (a large model under a memory limit)
            raise MemoryError(f"{path}: no memory to parse its {size} bytes ({detail})") from None
        raise model_error(path, f"not an ONNX model: protobuf parse failed ({detail})",
                          "is the file truncated or not an .onnx file?") from None
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise model_error(path, "not an ONNX model: it parses as protobuf but has no graph or IR version")
    if not proto.opset_import:
        raise model_error(path, "not a valid ONNX model: it declares no opset_import")
    return proto


def from_proto(proto: onnx.ModelProto, *, like: ir.Model | None = None) -> ir.Model:
    """The IR of a protobuf model (types onnx-ir lacks are kept aside in model.meta). `like`: the
    model the protobuf was serialized from, whose weights kept in an external file are found where
    its were (a protobuf names the file relative to a folder it does not record: torch's exports
    keep every weight outside)."""
    import onnx_ir as ir

    kept: dict[str, bytes] = {}
    strip_map_types(proto.graph, kept)
    model = ir.serde.deserialize_model(proto)
    if kept:
        model.meta[MAP_TYPES] = kept
    folder = external_folder(like) if like is not None else None
    if folder is not None:
        ir.external_data.set_base_dir(model.graph, folder)
    return model


def external_folder(model: ir.Model) -> str | os.PathLike[str] | None:
    """The folder a model's external weights are read from (None when it keeps none outside)."""
    import onnx_ir as ir

    for value in model.graph.initializers.values():  # where load set it (set_base_dir, below)
        if isinstance(value.const_value, ir.ExternalTensor) and value.const_value.base_dir:
            return value.const_value.base_dir
    return None


@dataclass
class ReadProto:
    """A model file read and vetted, still protobuf: what `load` makes an IR model of, and what
    shape inference may first work on (graph.shapes.load_inferred)."""

    proto: Any
    path: Path
    external_files: list[ExternalFile]
    notes: list[str]


def read_checked(path: str | os.PathLike[str], *, check: bool = True) -> ReadProto:
    """Read a model file and vet it (external data, inline tensors, declared dims, node order,
    the checker), weights memory-mapped and never read here."""
    model_path = Path(path)
    proto = read_proto(model_path)
    external_files = validate_external_data(proto, model_path)
    budget.note_model_bytes(model_path.stat().st_size + sum(file.size_bytes for file in external_files))
    validate_inline_tensors(proto, model_path)
    validate_names(proto, model_path)
    notes = validate_declared_dims(proto, model_path)
    split = rename_redefinitions(proto.graph)  # before the sort: it reads each name's writer
    if split:
        notes.append(f"{', '.join(repr(n) for n in split[:5])}{' and more' if len(split) > 5 else ''}: "
                     f"written by more than one node (torch's dynamo exporter names a graph output as "
                     f"output_names says even where a node has that name); each reader now reads the "
                     f"last writer before it, the graph's outputs the last one")
    moved = sort_topologically(proto.graph)
    if moved:
        notes.append(f"the graph was not topologically sorted: {moved} node(s) put in order")
    if check:
        try:
            check_proto(proto, model_path, has_external_data=bool(external_files),
                        size=model_path.stat().st_size)
        except ModelInputError as error:
            if not onnxruntime_loads(model_path):
                raise
            notes.append(f"the ONNX checker objects ({error.message.split(': ', 1)[-1]}), but ONNX Runtime "
                         f"loads the model: going on")
    return ReadProto(proto, model_path, external_files, notes)


def to_loaded(read: ReadProto) -> LoadedModel:
    """The IR model of a file read by read_checked."""
    import onnx_ir as ir

    try:
        model = from_proto(read.proto)
    except Exception as error:  # onnx-ir's own complaints about a broken graph
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise model_error(read.path, f"cannot be read as a graph: {first}") from None
    ir.external_data.set_base_dir(model.graph, read.path.parent)
    return LoadedModel(model, read.path, read.path.stat().st_size, read.external_files, read.notes)


def load(path: str | os.PathLike[str], *, check: bool = True) -> LoadedModel:
    """Load a model safely into onnx-ir, weights memory-mapped and never read here (with shapes
    inferred: graph.shapes.load_inferred)."""
    return to_loaded(read_checked(path, check=check))


# The models `peek` handed out last, by (path, size, mtime), and whether each was vetted: a build
# reads its legalized file's inputs, weights' types and external files seven times over (0.1-0.2 s
# each on a real model), and an audit's cell read its original five times (the check, its input
# names, the shape plan, the pipeline, the verification's float16 test).
_peeked: OrderedDict[tuple[str, int, int], tuple[LoadedModel, bool]] = OrderedDict()
KEPT_PEEKED = 4
# A larger file is read again each time: its weights are not held on to. A cell of a 244 MB AlexNet
# read it 9 times (0.3-0.5 s each). The files held add up to PEEKED_BYTES at most.
PEEK_KEPT_BYTES = 512 << 20
PEEKED_BYTES = 1 << 30


def peek(path: str | os.PathLike[str], *, check: bool = False) -> LoadedModel:
    """load(path, check=check) for a caller that only reads the model: the same object is
    handed to the next caller that peeks at the same, unchanged file (up to PEEK_KEPT_BYTES), so
    it must not be changed. A model peeked at unvetted is read again for a caller that asks
    `check`."""
    file = Path(path)
    try:
        stat = file.stat()
    except FileNotFoundError:
        raise model_error(file, "no such file") from None
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    kept, vetted = _peeked.get(key, (None, False))
    if kept is None or (check and not vetted):
        kept, vetted = load(file, check=check), check
        if stat.st_size <= PEEK_KEPT_BYTES:
            _peeked[key] = (kept, vetted)
    if key in _peeked:
        _peeked.move_to_end(key)  # the least recently used go first
    while len(_peeked) > KEPT_PEEKED or (len(_peeked) > 1 and sum(k[1] for k in _peeked) > PEEKED_BYTES):
        _peeked.popitem(last=False)
    return kept


def as_string_tensors(model: ir.Model) -> None:
    """A STRING constant that a fold made as a plain ir.Tensor (constant folding of an Identity of
    a string initializer), as the StringTensor that onnx-ir can serialize: saving it was an
    internal error."""
    import onnx_ir as ir

    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and tensor.dtype == ir.DataType.STRING and not isinstance(
                    tensor, (ir.StringTensor, ir.TensorProtoTensor)):
                value.const_value = ir.StringTensor(tensor.numpy(), shape=ir.Shape(tensor.shape.numpy()),
                                                    name=tensor.name)


def to_proto(model: ir.Model) -> Any:
    import onnx_ir as ir

    as_string_tensors(model)
    proto = ir.serde.serialize_model(model)
    restore_map_types(proto, model.meta.get(MAP_TYPES))
    return proto


def copy_model(model: ir.Model) -> ir.Model:
    """An independent copy of the model (a protobuf round trip; sequence/map types kept)."""
    return from_proto(to_proto(model), like=model)

