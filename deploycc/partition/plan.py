"""Which nodes run on the device and which on the host, grouped into few segments with no cycle.

Each top-level node is judged by the target's legality table after every rewrite; a control-flow
node is legal only when every node of its bodies is. Segments come from one pass in topological
order that gives each node the lowest *level* its inputs allow: a node's level is at least every
producer's level, one more when the producer sits on the other side, and its parity says the side
(even: device, odd: host, or the reverse when the first node is a host one). All nodes of one level
form one segment. Every edge runs from a level to the same or a higher one, so the segment graph
is acyclic by construction (the property OpenVINO's HETERO plugin and torch.fx's partitioner check
by search), and a chain of host-device alternations is never longer than the longest such chain on
any path, which is the fewest any partition can have.

Where engines are built for shapes known at build time (TensorRT's), a node that reads a tensor
whose size only the data decides (NonZero's count, what is gathered with it) joins the host; a
shape is known when every dim is static or a graph input's own symbolic dim, so whatever reads a
shape made static again (a reduction of the selected values) stays on the device.

The cost model then sends a device segment back to the host when it is not worth a launch: fewer
than `min_segment_nodes` nodes, or fewer floating-point operations than `flops_per_byte` times the
bytes that cross its cuts plus the launch of one more engine (`LAUNCH_FLOPS`). The levels are
recomputed after each such move. `flops_per_byte=0` turns the FLOPs test off (tests use it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import onnx_ir as ir

DEVICE, HOST = "device", "host"
# Bytes of one element per ONNX element type name, for the size of cut tensors.
_BYTES = {"FLOAT": 4, "FLOAT16": 2, "BFLOAT16": 2, "DOUBLE": 8, "INT64": 8, "INT32": 4, "INT16": 2,
          "INT8": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "BOOL": 1}
FLOPS_PER_BYTE = 1.0  # a device segment must compute at least this much per byte it moves
UNKNOWN_DIM = 1  # a symbolic dim counts as this many elements when sizing a cut (batch-like)
# One more engine call costs about 50 µs here (`deploycc bench` of a three-segment chain: 0.10 ms
# per tiny OpenVINO segment against 0.03 ms for the ORT host segment), about 5e5 FLOPs at the
# 10 GFLOP/s a CPU core sustains: a device segment must at least pay for that.
LAUNCH_FLOPS = 5e5


@dataclass
class Segment:
    index: int
    placement: str  # device | host
    nodes: list[int]  # positions in the graph's topological order
    ops: dict[str, int] = field(default_factory=dict)
    flops: int = 0
    inputs: list[str] = field(default_factory=list)  # values read from outside the segment
    outputs: list[str] = field(default_factory=list)  # values read after it or graph outputs
    decision: str = ""


@dataclass
class PartitionPlan:
    segments: list[Segment]
    host_reasons: dict[str, list[str]]  # host node label -> why it runs on the host (illegal, or kept there)
    cut_bytes: dict[str, int]  # cut tensor -> bytes per inference (symbolic dims counted as 1)
    cut_reasons: dict[str, str] = field(default_factory=dict)  # cut tensor -> why it crosses engines

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.segments)

    @property
    def device_flops(self) -> int:
        return sum(s.flops for s in self.segments if s.placement == DEVICE)

    @property
    def device_flops_share(self) -> float:
        return self.device_flops / self.flops if self.flops else 0.0


def node_reads(node: ir.Node) -> Iterator[ir.Value]:
    """Every value the node reads, its bodies' reads of outer values included."""
    from deploycc.graph.graphs import all_graphs

    yield from (v for v in node.inputs if v is not None)
    for attr in node.attributes.values():
        bodies = attr.value if isinstance(attr.value, list) else [attr.value]
        for body in bodies:
            if not hasattr(body, "initializers"):  # not a graph
                continue
            for graph in all_graphs(body):
                yield from (v for inner in graph for v in inner.inputs if v is not None)


def flops(node: ir.Node) -> int:
    """bench's count (a multiply-add is 2), a symbolic dim counted as UNKNOWN_DIM; an op it cannot
    count counts as nothing."""
    from deploycc.bench.flops import node_flops

    return node_flops(node, unknown_dim=UNKNOWN_DIM) or 0


def tensor_bytes(value: ir.Value) -> int:
    if value.shape is None or value.dtype is None:
        return 0
    return math.prod(d if isinstance(d, int) else UNKNOWN_DIM for d in value.shape) * \
        _BYTES.get(value.dtype.name, 4)


def known_dims(graph: ir.Graph) -> set[str]:
    """The symbolic dims of the graph inputs: sizes known before run time (a profile's)."""
    return {d.value for v in graph.inputs if v.shape is not None for d in v.shape
            if not isinstance(d, int) and d.value is not None}


def sized_by_data(value: ir.Value, known: set[str]) -> bool:
    """True when shape inference left a dim that no graph input's dims decide (NonZero's count,
    what is gathered with it): only a run sizes it. Static dims and the inputs' own symbolic dims
    are known before run time, so is a shape made static again (a ReduceSum of selected values is
    [1]); a shape not inferred at all (ai.onnx.ml ops) is given its rank by a run later."""
    if value.shape is None:
        return False
    return any(not isinstance(d, int) and (d.value is None or d.value not in known) for d in value.shape)


def _levels(nodes: list[ir.Node], placement: list[str]) -> list[int]:
    """The lowest level per node (see the module's docstring)."""
    parity = {DEVICE: 0, HOST: 1} if placement and placement[0] == DEVICE else {HOST: 0, DEVICE: 1}
    position = {id(node): i for i, node in enumerate(nodes)}
    levels: list[int] = []
    for i, node in enumerate(nodes):
        level = parity[placement[i]]
        for value in node_reads(node):
            producer = value.producer()
            j = position.get(id(producer)) if producer is not None else None
            if j is None or j >= i:
                continue
            needed = levels[j] + (placement[j] != placement[i])
            level = max(level, needed)
        if level % 2 != parity[placement[i]]:
            level += 1
        levels.append(level)
    return levels


def _segments(graph: ir.Graph, nodes: list[ir.Node], placement: list[str]) -> list[Segment]:
    levels = _levels(nodes, placement)
    by_level: dict[int, list[int]] = {}
    for i, level in enumerate(levels):
        by_level.setdefault(level, []).append(i)
    segments = [Segment(index=k, placement=placement[members[0]], nodes=members)
                for k, (_, members) in enumerate(sorted(by_level.items()))]
    where = {i: s.index for s in segments for i in s.nodes}
    position = {id(node): i for i, node in enumerate(nodes)}
    graph_outputs = {id(v) for v in graph.outputs}
    body_readers: dict[int, set[int]] = {}  # value -> segments of control-flow nodes reading it
    for i, node in enumerate(nodes):
        if any(hasattr(a.value, "initializers") or isinstance(a.value, list)
               for a in node.attributes.values()):
            for value in node_reads(node):
                body_readers.setdefault(id(value), set()).add(where[i])
    for segment in segments:
        mine = set(segment.nodes)
        reads: dict[str, None] = {}
        for i in segment.nodes:
            node = nodes[i]
            segment.ops[node.op_type] = segment.ops.get(node.op_type, 0) + 1
            segment.flops += flops(node)
            for value in node_reads(node):
                producer = value.producer()
                j = position.get(id(producer)) if producer is not None else None
                if (j is not None and j not in mine) or (j is None and value.name not in graph.initializers
                                                       and value in graph.inputs):
                    reads[value.name or ""] = None
        segment.inputs = list(reads)
        outputs: dict[str, None] = {}
        for i in segment.nodes:
            for value in nodes[i].outputs:
                users = [position.get(id(user)) for user, _ in value.uses()]
                read_later = any(j is not None and where[j] != segment.index for j in users)
                in_bodies = body_readers.get(id(value), set()) - {segment.index}
                if read_later or id(value) in graph_outputs or in_bodies:
                    outputs[value.name or ""] = None
        segment.outputs = list(outputs)
    return segments


def _reading_data_sized(nodes: list[ir.Node], segment: Segment, known: set[str]) -> dict[int, list[str]]:
    """The nodes of a device segment that read a tensor of data-decided size made outside it, or
    made by another such node, each with the names it reads: only they go to the host. Whatever
    reads values known before run time, a reduction of the selected values for one, stays."""
    position = {id(node): i for i, node in enumerate(nodes)}
    kept, found = set(segment.nodes), {}
    for i in segment.nodes:  # in topological order: a producer is judged before its readers
        names: dict[str, None] = {}
        for value in node_reads(nodes[i]):
            producer = value.producer()
            j = position.get(id(producer)) if producer is not None else None
            if j is not None and j not in kept and sized_by_data(value, known):
                names[value.name or ""] = None
        if names:
            found[i] = list(names)
            kept.discard(i)
    return found


def _decision(segment: Segment, nodes: list[ir.Node], reasons: list[list[str]], decisions: dict[int, str],
              sized: dict[int, list[str]]) -> str:
    """Why a segment is where it is, from why each of its nodes is."""
    if segment.placement == DEVICE:
        return "legal on the target"
    parts = []
    refused = sorted({nodes[i].op_type for i in segment.nodes if reasons[i]})
    if refused:
        parts.append(f"runs what the target cannot ({', '.join(refused)})")
    read = list(dict.fromkeys(name for i in segment.nodes for name in sized.get(i, [])))
    if read:
        parts.append(f"kept on the host: reads {', '.join(read)}, whose size the data decides")
    parts += sorted({decisions[i] for i in segment.nodes if i in decisions and i not in sized})
    return "; ".join(parts)


def _cut_reasons(segments: list[Segment], nodes: list[ir.Node], host_reasons: dict[int, list[str]],
                 cut: set[str]) -> dict[str, str]:
    """Why each cut tensor crosses between engines: the host node that makes it, or the host nodes
    that read it, with their reasons; between two device segments, the host segment around which
    it passes."""
    from deploycc.graph.graphs import node_label

    where = {i: s for s in segments for i in s.nodes}
    made_by = {v.name: i for s in segments for i in s.nodes for v in nodes[i].outputs}
    found = {}
    for name in sorted(cut):
        if name not in made_by:
            continue
        source = where[made_by[name]]
        if source.placement == HOST:
            i = made_by[name]
            found[name] = (f"made on the host by {node_label(nodes[i])} ({nodes[i].op_type}): "
                           f"{'; '.join(host_reasons[i])}")
            continue
        readers = [s for s in segments if name in s.inputs]
        host = [i for s in readers if s.placement == HOST for i in s.nodes
                if any(v.name == name for v in node_reads(nodes[i]))]
        if host:
            found[name] = "; ".join(f"read on the host by {node_label(nodes[i])} ({nodes[i].op_type}): "
                                    f"{'; '.join(host_reasons[i])}" for i in host)
        else:
            later = ", ".join(str(s.index) for s in readers)
            found[name] = (f"from device segment {source.index} to device segment(s) {later}, past the "
                           f"host segment(s) between them")
    return found


def _host_data_sized(segments: list[Segment], nodes: list[ir.Node], known: set[str], placement: list[str],
                     sized: dict[int, list[str]], decisions: dict[int, str]) -> bool:
    """Sends to the host the nodes of device segments that read a tensor of data-decided size made
    outside them (`_reading_data_sized`), noting what each reads; whether any moved."""
    moved = False
    for segment in segments:
        if segment.placement != DEVICE:
            continue
        for i, names in _reading_data_sized(nodes, segment, known).items():
            placement[i] = HOST
            sized[i] = names
            decisions[i] = f"kept on the host: reads {', '.join(names)}, whose size the data decides"
            moved = True
    return moved


def _why_not_worth_launch(segment: Segment, segment_count: int, moved_bytes: int, *, min_segment_nodes: int,
                          flops_per_byte: float) -> str | None:
    """Why a device segment is not worth a launch (see the module's docstring), or None when it is."""
    small = len(segment.nodes) < min_segment_nodes
    cheap = segment_count > 1 and flops_per_byte > 0 and \
        segment.flops < flops_per_byte * moved_bytes + LAUNCH_FLOPS
    if small:
        return (f"its device segment was not worth a launch ({len(segment.nodes)} node(s), fewer "
                f"than --min-segment-nodes {min_segment_nodes})")
    if cheap:
        return (f"its device segment was not worth a launch ({segment.flops} FLOPs for {moved_bytes} "
                f"bytes across its cuts and one more launch)")
    return None


def _host_not_worth_launch(graph: ir.Graph, segments: list[Segment], nodes: list[ir.Node],
                           placement: list[str], decisions: dict[int, str], *, min_segment_nodes: int,
                           flops_per_byte: float) -> bool:
    """Sends to the host every device segment not worth its launch; whether any moved."""
    values = {v.name: v for node in nodes for v in node.outputs}
    values.update({v.name: v for v in graph.inputs})
    moved = False
    for segment in segments:
        if segment.placement != DEVICE:
            continue
        moved_bytes = sum(tensor_bytes(values[name]) for name in segment.inputs + segment.outputs
                          if name in values)
        why = _why_not_worth_launch(segment, len(segments), moved_bytes, min_segment_nodes=min_segment_nodes,
                                    flops_per_byte=flops_per_byte)
        if why is None:
            continue
        for i in segment.nodes:
            placement[i] = HOST
            decisions[i] = f"kept on the host: {why}"
        moved = True
    return moved


def plan(graph: ir.Graph, legal: Callable[[ir.Node], list[str]], *, min_segment_nodes: int = 1,
         flops_per_byte: float = FLOPS_PER_BYTE, static_cuts: bool = False) -> PartitionPlan:
    """Segments of the graph for a judge that returns, per node, why it is illegal ([] = legal).
    With `static_cuts` (an engine built for shapes known at build time, as TensorRT's is here), a
    node of a device segment that reads a cut tensor of data-decided size (NonZero's,
    NonMaxSuppression's, what is gathered with them) runs on the host: the engine would need a
    profile for a size only the data decides. The rest of the segment stays on the device: a
    value whose shape is static again (a reduction of the selected values) may cross to it."""
    from deploycc.graph.graphs import node_label

    nodes = list(graph)
    reasons = [legal(node) for node in nodes]
    placement = [HOST if why else DEVICE for why in reasons]
    decisions: dict[int, str] = {}
    sized: dict[int, list[str]] = {}  # node -> the data-sized values that sent it to the host
    known = known_dims(graph)
    while True:
        segments = _segments(graph, nodes, placement)
        # first what the engines cannot take at all, then the device segments not worth their launch
        if static_cuts and _host_data_sized(segments, nodes, known, placement, sized, decisions):
            continue
        if not _host_not_worth_launch(graph, segments, nodes, placement, decisions,
                                      min_segment_nodes=min_segment_nodes, flops_per_byte=flops_per_byte):
            break
    for segment in segments:
        segment.decision = _decision(segment, nodes, reasons, decisions, sized)
    cut = {name for s in segments for name in s.inputs} & {name for s in segments for name in s.outputs}
    values = {v.name: v for node in nodes for v in node.outputs}
    why_host = {i: reasons[i] or [decisions.get(i, "")] for s in segments if s.placement == HOST
                for i in s.nodes}
    return PartitionPlan(segments=segments,
                         host_reasons={f"{node_label(nodes[i])} ({nodes[i].op_type})": why
                                       for i, why in why_host.items()},
                         cut_bytes={name: tensor_bytes(values[name]) for name in sorted(cut)
                                    if name in values},
                         cut_reasons=_cut_reasons(segments, nodes, why_host, cut))
