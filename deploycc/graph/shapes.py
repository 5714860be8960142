"""Shape and type inference before judging a model, tolerant of models it cannot fully infer."""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.io import LoadedModel
    from deploycc.io.read import ReadProto


def infer_shapes(model: ir.Model) -> str | None:
    """Run ONNX shape inference in place (onnx-ir strips large initializers meanwhile).

    Strict inference first; when it fails, the failure becomes the returned one-line note and
    a lenient pass infers what it can, so the model is judged on the best types available.
    """
    try:
        _infer_in_place(model, check_type=True, strict_mode=True)
        return None
    except Exception as error:
        lines = str(error).strip().splitlines()
        note = f"shape inference failed: {lines[-1] if lines else type(error).__name__}"
    try:
        _infer_in_place(model, check_type=False, strict_mode=False)
    except Exception:
        pass
    return note


def _infer_in_place(model: ir.Model, **settings: bool) -> None:
    """onnx's shape inference on the model without its large initializers (onnx-ir's way), the
    result merged back; types onnx-ir cannot hold (maps) are stripped from the result first."""
    import onnx

    from deploycc import io
    from deploycc.graph.private_api import call_onnx_api, merge_inferred_shapes

    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True, **settings)
        io.strip_map_types(inferred.graph, {})
        return inferred

    inferred = call_onnx_api(infer, model)
    if not merge_value_infos(model.graph, inferred.graph):
        merge_inferred_shapes(model, inferred)


def merge_value_infos(graph: ir.Graph, proto: Any) -> bool:
    """onnx's inferred types and shapes (an inferred GraphProto's inputs, value infos and outputs)
    onto the graph's values of the same names, its subgraphs node by node; what onnx-ir's own
    merge sets (shape and dtype, where inferred), without deserializing the inferred model whole,
    nodes and all, only to read its value infos: that was two thirds of an inference's time
    (CoaT: 4.3 of 6.5 s). False, and nothing changed, when the graphs' nodes do not pair up."""
    import onnx
    from onnx_ir import serde

    pairs: list[tuple[ir.Graph, Any]] = []

    def pair(graph: ir.Graph, proto: Any) -> bool:
        if len(graph) != len(proto.node):
            return False
        pairs.append((graph, proto))
        for node, node_proto in zip(graph, proto.node, strict=True):
            bodies = {attribute.name: attribute for attribute in node_proto.attribute
                      if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}
            for name, attribute in node.attributes.items():
                if attribute.type.name == "GRAPH" and name in bodies:
                    if not pair(attribute.as_graph(), bodies[name].g):
                        return False
                elif attribute.type.name == "GRAPHS" and name in bodies:
                    subgraphs, protos = attribute.as_graphs(), bodies[name].graphs
                    if len(subgraphs) != len(protos) or not all(
                            pair(sub, sub_proto) for sub, sub_proto in zip(subgraphs, protos, strict=True)):
                        return False
        return True

    if not pair(graph, proto):
        return False
    for graph, proto in pairs:
        infos = {info.name: info.type for info in (*proto.input, *proto.value_info, *proto.output)
                 if info.HasField("type")}
        values = [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)]
        for value in values:
            found = infos.get(value.name or "")
            if found is None:
                continue
            shape = serde.deserialize_type_proto_for_shape(found)
            type_ = serde.deserialize_type_proto_for_type(found)
            if shape is not None and value.shape != shape:
                value.shape = shape
            if type_ is not None and value.dtype != type_.dtype:
                value.dtype = type_.dtype
    return True


# Above this, infer on the IR with large tensors stripped: onnx's inference on a proto serializes
# it and returns a new one, two more copies of every weight (a 110 MB ConvNeXt peaked at 635 MB).
PROTO_INFERENCE_LIMIT = 8 << 20


# A small model's file read, vetted and inferred, by (path, size, mtime, check): `check` and then
# `legalize` in one process (a build, an audit's cell) read the same file, and inference is the
# most of what reading it costs.
_inferred: OrderedDict[tuple[str, int, int, bool], ReadProto] = OrderedDict()
KEPT_INFERRED = 2


# A model that was only read (check's verdicts), handed to the next load_inferred of the same
# unchanged file, once: an audit's cell checks its original and then legalizes it, and the second
# read and inference was 0.2-0.5 s of a real export's cell. Up to LENT_BYTES: a larger one is not
# held while the cell reads other models.
_lent: dict[tuple[str, int, int, bool], LoadedModel] = {}
LENT_BYTES = 512 << 20


def hand_over(loaded: LoadedModel, *, check: bool = True) -> None:
    """Offer `loaded` (read by load_inferred with `check`, and not changed since) to the next
    load_inferred of its file, which takes it instead of reading the file again."""
    _lent.clear()
    stat = loaded.path.stat() if loaded.path.is_file() else None
    if stat is not None and stat.st_size <= LENT_BYTES:
        _lent[(str(loaded.path.resolve()), stat.st_size, stat.st_mtime_ns, check)] = loaded


def load_inferred(path: str | os.PathLike[str], *, check: bool = True) -> LoadedModel:
    """io.load, with shapes and types inferred: on the protobuf already in hand when it is small
    (one IR round trip saved, and the result kept for the next read of the same file), else on
    the IR with its large tensors stripped. A model handed over (hand_over) is taken as it is."""
    from deploycc import io

    stat = Path(path).stat() if Path(path).is_file() else None
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, check) if stat else None
    lent = _lent.pop(key, None) if key else None
    if lent is not None:
        return lent
    kept = _inferred.get(key) if key else None
    if kept is not None:
        return io.to_loaded(_copy(kept))  # to_loaded changes the protobuf it is given
    read = io.read_checked(path, check=check)
    inferred_on_proto = read.path.stat().st_size < PROTO_INFERENCE_LIMIT  # the proto's size, without a walk
    if inferred_on_proto:
        read.proto, note = infer_proto(read.proto)
        read.notes += [note] if note else []
        if key is not None:
            _inferred[key] = _copy(read)
            while len(_inferred) > KEPT_INFERRED:
                _inferred.popitem(last=False)
    loaded = io.to_loaded(read)
    if not inferred_on_proto:
        note = infer_shapes(loaded.model)
        loaded.notes += [note] if note else []
    return loaded


def _copy(read: ReadProto) -> ReadProto:
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(read.proto)
    return dataclasses.replace(read, proto=proto, external_files=list(read.external_files),
                               notes=list(read.notes))


def infer_proto(proto: Any) -> tuple[Any, str | None]:
    """ONNX shape inference on a protobuf model we already hold (saves an IR round trip).

    Returns the inferred model and a note when strict inference failed (then the lenient
    result, or the model unchanged when even that failed).
    """
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True,
                                                 data_prop=True), None
    except Exception as error:
        lines = str(error).strip().splitlines()
        note = f"shape inference failed: {lines[-1] if lines else type(error).__name__}"
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True), note
    except Exception:
        return proto, note
