"""Writing: a model saved atomically (a temporary folder beside the output, then renamed into
place), weights streamed rather than copied; a text file written through a rename. What it
must never overwrite is outputs.py's to say.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.dtypes import stored_bytes
from deploycc.io.map_types import MAP_TYPES, restore_map_types
from deploycc.io.outputs import (
    PARTIAL_MARK,
    refuse_existing,
    refuse_inputs,
    remove_stale,
    staging_prefix,
    written_files,
)
from deploycc.io.read import as_string_tensors

if TYPE_CHECKING:
    import onnx_ir as ir


def save(model: ir.Model, path: str | os.PathLike[str], *, protect: tuple[Path, ...] = (),
         external_threshold_bytes: int = 1 << 30, force_external: bool = False) -> list[Path]:
    """Write `model` atomically: into a temporary folder beside `path`, then renamed into place.

    Weights go to `<name>.data` (a name deploycc chooses, never one taken from the input
    model) when they exceed the threshold, `force_external` is set, or the model holds weights
    read from an external file (a model loaded from `model.onnx` + `model.onnx.data`, as torch's
    dynamo exporter writes them): such a weight written as it is would keep its reference to the
    old file by a path relative to the old folder, and a copy saved elsewhere (the fp16
    analysis' scratch folder, a segment) would name a file that is not there. Its data goes with
    it instead. `protect` lists files that must never be overwritten (the input model and its
    data). Returns the files written.
    """
    import shutil
    import tempfile

    import onnx_ir as ir

    target = Path(path)
    data_name = target.name + ".data"
    refuse_inputs(written_files(target), protect)
    refuse_existing([target], force=True)  # a directory is never replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    as_string_tensors(model)
    external_attributes_read_in(model)
    weight_bytes = sum(stored_bytes(v.const_value) for v in model.graph.initializers.values()
                       if v.const_value is not None)
    external = force_external or weight_bytes > external_threshold_bytes or holds_external_data(model)
    remove_stale(target.parent, f".{target.name}{PARTIAL_MARK}")  # a killed save's copy of the weights
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(target), dir=target.parent))
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


def external_attributes_read_in(model: ir.Model) -> None:
    """Each attribute tensor (a Constant node's value) read from an external file, read into the
    model: ir.save writes the initializers' data to the new file but leaves such a tensor naming
    the old one, relative to the old folder (Optimum's OLMo-1B export keeps its norms' Constants
    so, and its int4 model named a file that was not beside it)."""
    import onnx_ir as ir

    for graph in model.graphs():
        for node in graph:
            for name, attribute in list(node.attributes.items()):
                tensor = attribute.value if attribute.type == ir.AttributeType.TENSOR else None
                if isinstance(tensor, ir.ExternalTensor):
                    node.attributes[name] = ir.AttrTensor(name, ir.tensor(tensor.numpy(), name=tensor.name))


def holds_external_data(model: ir.Model) -> bool:
    """Whether any initializer (of the graph or a subgraph) reads its data from an external file."""
    import onnx_ir as ir

    return any(isinstance(value.const_value, ir.ExternalTensor)
               for graph in model.graphs() for value in graph.initializers.values())


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
    streamed = [v for v in order if v.const_value is not None and v.const_value.dtype != ir.DataType.STRING
                and v.const_value.nbytes > STREAM_TENSOR_BYTES]
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
    handle, temporary = tempfile.mkstemp(prefix=staging_prefix(path), dir=path.parent)
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

