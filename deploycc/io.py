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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    notes: list[str] = field(default_factory=list)  # e.g. why shape inference failed


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


def _walk_value_infos(graph: onnx.GraphProto, where: str = "graph"):
    for kind, values in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for value in values:
            yield value, f"{where} {kind} '{value.name}'"
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subgraphs:
                yield from _walk_value_infos(sub, f"node '{node.name or node.op_type}' subgraph")


def validate_declared_dims(proto: onnx.ModelProto, path: Path) -> list[str]:
    """Negative tensor dims and absurdly large declared dims are refused before anything sizes a
    buffer by them. A negative dim declared on a value (PaddlePaddle exports write -1 for a
    dynamic one; ONNX Runtime reads it so) becomes an unnamed dynamic dim; a note says so."""
    for tensor, where in _walk_all_tensors(proto):
        if any(d < 0 for d in tensor.dims):
            raise _fail(path, f"{where} declares a negative dim {list(tensor.dims)}")
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
            raise _fail(path, f"{where} declares {math.prod(dims):.3g} elements ({dims}), more than any "
                              f"real model holds")
    if not relaxed:
        return []
    return [f"negative dims read as dynamic on {len(set(relaxed))} value(s), e.g. {relaxed[0]}"]


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _names_read(node: onnx.NodeProto) -> set[str]:
    """What a node reads: its inputs and, through its subgraphs, any outer-scope value."""
    names = {name for name in node.input if name}
    for sub in _subgraphs(node):
        inner = {o for n in sub.node for o in n.output} | {v.name for v in sub.input} | \
            {t.name for t in sub.initializer}
        for child in sub.node:
            names |= _names_read(child) - inner
    return names


def sort_topologically(graph: onnx.GraphProto) -> int:
    """Put the nodes of a graph (and its subgraphs) in an order where each reads only what comes
    before it, keeping the given order wherever it already works; returns the nodes moved.

    ONNX Runtime's float16 converter leaves graphs unsorted and ORT sorts them on load, so such a
    model is valid input. A cycle is left as it is, for the checker to name."""
    import heapq

    moved = sum(sort_topologically(sub) for node in graph.node for sub in _subgraphs(node))
    nodes = list(graph.node)
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    waits_on = [{producer[name] for name in _names_read(node) if name in producer} - {index}
                for index, node in enumerate(nodes)]
    if all(all(p < index for p in deps) for index, deps in enumerate(waits_on)):
        return moved
    readers: dict[int, list[int]] = {}
    for index, deps in enumerate(waits_on):
        for dep in deps:
            readers.setdefault(dep, []).append(index)
    pending = [len(deps) for deps in waits_on]
    ready = [index for index, count in enumerate(pending) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for reader in readers.get(index, []):
            pending[reader] -= 1
            if pending[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) != len(nodes):
        return moved  # a cycle: not ours to fix
    del graph.node[:]
    graph.node.extend(nodes[index] for index in order)
    return moved + sum(1 for position, index in enumerate(order) if position != index)


# ------------------------------------------------------------------ types onnx-ir cannot hold

MAP_TYPES = "deploycc.map_types"  # model.meta key: value name -> serialized TypeProto


def _holds_map(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return _holds_map(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _holds_map(type_proto.optional_type.elem_type)
    return False


def strip_map_types(graph: onnx.GraphProto, kept: dict[str, bytes]) -> None:
    """onnx-ir has no map type (ZipMap's sequence(map(...)) output in scikit-learn classifiers):
    such a graph input or output loses its type while deploycc holds the graph, and gets it back
    when the graph is written (restore_map_types); a value_info of one is dropped."""
    for value in [*graph.input, *graph.output]:
        if value.HasField("type") and _holds_map(value.type):
            kept[value.name] = value.type.SerializeToString()
            value.ClearField("type")
    keep = [v for v in graph.value_info if not _holds_map(v.type)]
    if len(keep) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(keep)
    for node in graph.node:
        for sub in _subgraphs(node):
            strip_map_types(sub, kept)


def restore_map_types(proto: onnx.ModelProto, kept: dict[str, bytes] | None) -> None:
    import onnx

    if not kept:
        return
    for value in [*proto.graph.input, *proto.graph.output]:
        if value.name in kept and not value.HasField("type"):
            value.type.CopyFrom(onnx.TypeProto.FromString(kept[value.name]))


def from_proto(proto: onnx.ModelProto) -> ir.Model:
    """The IR of a protobuf model (types onnx-ir lacks are kept aside in model.meta)."""
    import onnx_ir as ir

    kept: dict[str, bytes] = {}
    strip_map_types(proto.graph, kept)
    model = ir.serde.deserialize_model(proto)
    if kept:
        model.meta[MAP_TYPES] = kept
    return model


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
        onnx.checker.check_model(str(path) if has_external_data else _without_weights(proto),
                                 full_check=False)
    except Exception as error:  # ValidationError, and other types the C++ checker raises
        raise _fail(path, f"fails the ONNX checker: {_one_line(error)}") from None


CHECK_COPY_LIMIT = 8 << 20


def _without_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large initializers declared as graph inputs instead, for the checker:
    given a proto it serializes it and parses it again in C++, two more copies of every weight.
    What it checks of an initializer beyond its type and shape (a data size that fits the dims)
    validate_inline_tensors has checked already. Small models go as they are."""
    import onnx

    if proto.ByteSize() < CHECK_COPY_LIMIT:
        return proto
    light = onnx.ModelProto()
    for descriptor, value in proto.ListFields():
        if descriptor.name == "graph":
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(light, descriptor.name).extend(value)
        elif descriptor.message_type:
            getattr(light, descriptor.name).CopyFrom(value)
        else:
            setattr(light, descriptor.name, value)
    graph = proto.graph
    for descriptor, value in graph.ListFields():
        if descriptor.name == "initializer":
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(light.graph, descriptor.name).extend(value)
        elif descriptor.message_type:
            getattr(light.graph, descriptor.name).CopyFrom(value)
        else:
            setattr(light.graph, descriptor.name, value)
    inputs = {value.name for value in graph.input}
    if light.ir_version < 4:
        light.ir_version = 4  # an initializer that became an input alone is no longer listed twice
    for tensor in graph.initializer:
        if tensor.ByteSize() <= LARGE_TENSOR_BYTES + 256 and not tensor.HasField("data_location"):
            light.graph.initializer.append(tensor)
        elif tensor.name not in inputs:
            light.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                                        list(tensor.dims)))
    return light


def onnxruntime_loads(path: Path) -> bool:
    """Whether ONNX Runtime loads the model file as it is. Asked only when the checker refuses a
    model: the checker is stricter than the runtime (it wants a shape on every graph output, even
    where an exporter declares none), and a model ONNX Runtime loads is never "bad input".
    In a child process: ORT may crash on a model the checker refused, and that must not end us."""
    import subprocess
    import sys

    script = ("import sys, onnxruntime as ort\n"
              "options = ort.SessionOptions()\n"
              "options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
              "options.log_severity_level = 4\n"
              "ort.InferenceSession(sys.argv[1], options, providers=['CPUExecutionProvider'])\n")
    try:
        child = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False
    return child.returncode == 0


def inline_branch(proto: onnx.ModelProto, index: int, branch_name: str) -> onnx.ModelProto:
    """A copy of the model with the If at top-level position `index` replaced by the nodes of
    one branch (`then_branch` or `else_branch`), its outputs named as the If's."""
    import onnx

    candidate = onnx.ModelProto()
    candidate.CopyFrom(proto)
    graph = candidate.graph
    node = graph.node[index]
    branch = next(a.g for a in node.attribute if a.name == branch_name)
    renames = {out.name: name for out, name in zip(branch.output, node.output, strict=True)}
    produced = {name for inner in branch.node for name in inner.output}
    nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.output[:] = [renames.get(name, name) for name in copy.output]
        copy.input[:] = [renames.get(name, name) for name in copy.input]
        nodes.append(copy)
    for out in branch.output:  # an output passed straight from outer scope or a branch constant
        if out.name not in produced:
            nodes.append(onnx.helper.make_node("Identity", [out.name], [renames[out.name]]))
    graph.initializer.extend(branch.initializer)
    del graph.node[index]
    for offset, inner in enumerate(nodes):
        graph.node.insert(index + offset, inner)
    return candidate


def _one_line(error: BaseException, limit: int = 300) -> str:
    """The checker's message, which spans lines ("...of node:\nname: OpType: Add\n is not..."), as one."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    text = text or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
    validate_inline_tensors(proto, model_path)
    notes = validate_declared_dims(proto, model_path)
    moved = sort_topologically(proto.graph)
    if moved:
        notes.append(f"the graph was not topologically sorted: {moved} node(s) put in order")
    if check:
        try:
            check_proto(proto, model_path, has_external_data=bool(external_files))
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
        raise _fail(read.path, f"cannot be read as a graph: {first}") from None
    ir.external_data.set_base_dir(model.graph, read.path.parent)
    return LoadedModel(model, read.path, read.path.stat().st_size, read.external_files, read.notes)


def load(path: str | os.PathLike[str], *, check: bool = True) -> LoadedModel:
    """Load a model safely into onnx-ir, weights memory-mapped and never read here (with shapes
    inferred: graph.shapes.load_inferred)."""
    return to_loaded(read_checked(path, check=check))


def to_proto(model: ir.Model) -> Any:
    import onnx_ir as ir

    proto = ir.serde.serialize_model(model)
    restore_map_types(proto, model.meta.get(MAP_TYPES))
    return proto


def copy_model(model: ir.Model) -> ir.Model:
    """An independent copy of the model (a protobuf round trip; sequence/map types kept)."""
    return from_proto(to_proto(model))


# ------------------------------------------------------------------ protobuf-only operations

LARGE_TENSOR_BYTES = 1024  # initializers above this are kept out of protobuf round trips
HOLD_DOMAIN = "deploycc.hold"


@contextmanager
def held_back(model: ir.Model, nodes: Sequence[ir.Node]) -> Iterator[None]:
    """`nodes` moved into a private domain while a tool that would mishandle them runs (onnx's
    converter, onnxscript's folder): it passes over ops it does not know. Restored after."""
    domains = [node.domain for node in nodes]
    for node in nodes:
        node.domain = HOLD_DOMAIN
    model.opset_imports[HOLD_DOMAIN] = 1
    try:
        yield
    finally:
        model.opset_imports.pop(HOLD_DOMAIN, None)
        for node, domain in zip(nodes, domains, strict=True):
            node.domain = domain


def refuse_overwrite(output: Path, protect: tuple[Path, ...]) -> None:
    """Refuse an output path that is a directory or would replace an input file or its data."""
    resolved = output.resolve()
    for guarded in protect:
        if guarded.resolve() in (resolved, resolved.with_name(output.name + ".data")):
            raise ModelInputError(f"{output}: refusing to overwrite the input model or its data",
                                  hint="choose another output path with -o")
    if output.is_dir():
        raise ModelInputError(f"{output}: output path is a directory")


def save(model: ir.Model, path: str | os.PathLike[str], *, protect: tuple[Path, ...] = (),
         external_threshold_bytes: int = 1 << 30, force_external: bool = False) -> list[Path]:
    """Write `model` atomically: into a temporary folder beside `path`, then renamed into place.

    Weights go to `<name>.data` (a name deploycc chooses, never one taken from the input
    model) when they exceed the threshold or `force_external` is set. `protect` lists files
    that must never be overwritten (the input model and its data). Returns the files written.
    """
    import shutil
    import tempfile

    import onnx_ir as ir

    target = Path(path)
    data_name = target.name + ".data"
    refuse_overwrite(target, protect)
    target.parent.mkdir(parents=True, exist_ok=True)
    weight_bytes = sum(v.const_value.nbytes for v in model.graph.initializers.values()
                       if v.const_value is not None)
    external = force_external or weight_bytes > external_threshold_bytes
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        staged = staging / target.name
        if external:
            ir.save(model, staged, external_data=data_name, size_threshold_bytes=1024)
        else:
            write_streamed(model, staged)
        if model.meta.get(MAP_TYPES):  # the weights stay where ir.save put them
            import onnx

            proto = onnx.load(str(staged), load_external_data=False)
            restore_map_types(proto, model.meta[MAP_TYPES])
            onnx.save(proto, str(staged))
        written = []
        staged_data = staging / data_name
        if staged_data.exists():
            os.replace(staged_data, target.with_name(data_name))
            written.append(target.with_name(data_name))
        os.replace(staged, target)  # the model last: it is what makes the output visible
        written.insert(0, target)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


STREAM_TENSOR_BYTES = 1 << 16


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def write_streamed(model: ir.Model, path: Path) -> None:
    """ir.save for one file, without the two extra copies of every weight it makes (a ModelProto
    holding them, then its serialized bytes): the model is serialized without its large
    initializers, and each of those is written after it, one at a time, as more entries of the
    graph's `initializer` field (protobuf merges repeated fields across a message's bytes). The
    graph's length prefix counts them in, so the file parses as the one ir.save writes."""
    import onnx
    import onnx_ir as ir

    graph = model.graph
    order = list(graph.initializers.values())
    streamed = [v for v in order if v.const_value is not None and v.const_value.nbytes > STREAM_TENSOR_BYTES
                and v.const_value.dtype not in (ir.DataType.STRING,)]
    if not streamed:
        ir.save(model, path)
        return
    for value in streamed:
        graph.initializers.pop(value.name)  # type: ignore[arg-type]
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        graph.initializers.clear()
        for value in order:
            graph.initializers.add(value)
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    heads = []
    for value in streamed:  # TensorProto: name, data_type, dims, then raw_data (field 9)
        tensor = value.const_value
        assert tensor is not None
        head = onnx.TensorProto(name=value.name, data_type=int(tensor.dtype), dims=list(tensor.shape.numpy()))
        heads.append(head.SerializeToString() + b"\x4a" + _varint(tensor.nbytes))
    # graph field 7 (tag 0x3a) holds: what serialized, then each initializer as field 5 (0x2a).
    entries = [len(head) + tensor_bytes for head, tensor_bytes in
               zip(heads, (v.const_value.nbytes for v in streamed), strict=True)]  # type: ignore[union-attr]
    graph_length = len(graph_bytes) + sum(1 + len(_varint(n)) + n for n in entries)
    with path.open("wb") as handle:
        handle.write(proto.SerializeToString())
        handle.write(b"\x3a" + _varint(graph_length) + graph_bytes)
        for value, head, entry in zip(streamed, heads, entries, strict=True):
            handle.write(b"\x2a" + _varint(entry) + head)
            handle.write(value.const_value.tobytes())  # type: ignore[union-attr]


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file through a temporary file in the same folder and a rename."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it private; a report is not
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------ output directories

PARTIAL_MARK = ".partial-"


def _terminated(signum: int, frame: Any) -> None:
    from deploycc.errors import Terminated

    raise Terminated(f"terminated by signal {signum}")


def _remove_stale(parent: Path, name: str) -> None:
    """Staging folders left by a killed build (its pid is gone) are removed."""
    import shutil

    for candidate in parent.glob(f".{name}{PARTIAL_MARK}*"):
        pid_text = candidate.name[len(f".{name}{PARTIAL_MARK}"):].split("-")[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(candidate, ignore_errors=True)
        except PermissionError:
            continue


class StagedDirectory:
    """Build an output directory in a hidden sibling and rename it into place at the end.

    An existing directory is refused unless `force`; on any exception, Ctrl-C or SIGTERM the
    staging folder is removed; a SIGKILLed build's staging folder is removed by the next run.
    """

    def __init__(self, outdir: Path, *, force: bool = False, protect: tuple[Path, ...] = ()) -> None:
        """`protect`: inputs that must survive, so an OUTDIR holding one is never replaced."""
        from deploycc.errors import OptionError

        self.outdir = outdir
        if outdir.exists() and not force:
            raise OptionError(f"{outdir}: already exists", hint="pass --force to replace it")
        if outdir.exists() and not outdir.is_dir():
            raise OptionError(f"{outdir}: exists and is not a directory")
        inside = [p for p in protect if p.resolve().is_relative_to(outdir.resolve())]
        if inside:
            raise OptionError(f"{outdir}: holds the input {inside[0]}, which replacing it would delete",
                              hint="choose another output directory")
        self.force = force
        self.path: Path | None = None
        self._previous_handler: Any = None

    def __enter__(self) -> StagedDirectory:
        import signal
        import tempfile
        import threading

        parent = self.outdir.parent
        parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(parent, self.outdir.name)
        self.path = Path(tempfile.mkdtemp(prefix=f".{self.outdir.name}{PARTIAL_MARK}{os.getpid()}-",
                                          dir=parent))
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, _terminated)
        return self

    @property
    def staging(self) -> Path:
        assert self.path is not None, "the directory was committed already"
        return self.path

    def commit(self) -> None:
        """Put the staged directory in place (replacing the old one under --force)."""
        import shutil

        assert self.path is not None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)  # mkdtemp made it private; the result is not
        old = None
        if self.outdir.exists():
            old = self.outdir.with_name(f".{self.outdir.name}.old-{os.getpid()}")
            os.rename(self.outdir, old)
        os.rename(self.path, self.outdir)
        self.path = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        import shutil
        import signal

        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def sha256_file(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tar_folder(folder: Path) -> bytes:
    """A folder as an uncompressed tar, under its own name (for ssh's stdin or a Ray object)."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(folder, arcname=folder.name)
    return buffer.getvalue()
