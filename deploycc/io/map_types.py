"""Types onnx-ir cannot hold: a map (ZipMap's sequence(map(...)) output in scikit-learn
classifiers) is kept aside in model.meta while deploycc holds the graph, and put back when the
graph is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.io.node_order import subgraphs

if TYPE_CHECKING:
    import onnx

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
        for sub in subgraphs(node):
            strip_map_types(sub, kept)


def restore_map_types(proto: onnx.ModelProto, kept: dict[str, bytes] | None) -> None:
    import onnx

    if not kept:
        return
    for value in [*proto.graph.input, *proto.graph.output]:
        if value.name in kept and not value.HasField("type"):
            value.type.CopyFrom(onnx.TypeProto.FromString(kept[value.name]))

