"""`deploycc inspect`: what is in a model, and the redundancy a user would act on.

Weights are never read: parameter counts and bytes come from declared shapes and dtypes,
so a model over 2 GB with external data is inspected at the cost of its graph.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.dtypes import dtype_name
from deploycc.graph.graphs import (
    SUBGRAPH_OPS,
    all_graphs,
    all_nodes,
    describe_value,
    dims_of,
    node_label,
    subgraphs_of,
)
from deploycc.results import Result

if TYPE_CHECKING:
    from collections.abc import Iterator

    import onnx_ir as ir

    # A redundancy found: its kind (a key of REDUNDANCY_DETAILS) and the node, or the name, it is found at.
    Redundancy = tuple[str, ir.Node | str]

NONDETERMINISTIC_OPS = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout",
}
CONV_OPS = ("Conv", "ConvTranspose")


@dataclass
class Finding:
    kind: str
    count: int
    nodes: list[str]
    detail: str


@dataclass
class InspectReport(Result):
    path: str
    file_size_bytes: int
    ir_version: int
    opset_imports: dict[str, int]
    producer: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    node_count: int
    main_graph_node_count: int
    op_histogram: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    initializer_count: int
    external_data: list[dict[str, Any]]
    subgraph_count: int
    control_flow_nodes: dict[str, int]
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _op_key(node: ir.Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def tensor_size(value: ir.Value) -> tuple[int, int]:
    """(elements, bytes) of an initializer from its declared shape and dtype: nothing read."""
    tensor = value.const_value
    if tensor is None or tensor.shape is None:
        return 0, 0
    elements = math.prod(d if isinstance(d, int) else 0 for d in tensor.shape)
    bits = tensor.dtype.bitwidth if tensor.dtype.name != "STRING" else 0
    return elements, (elements * bits + 7) // 8


def _constant_values(graph: ir.Graph) -> set[int]:
    """ids of values computable at build time (initializers, Constants, and what follows)."""
    graph_inputs = {id(v) for v in graph.inputs}
    constant = {id(v) for v in graph.initializers.values() if id(v) not in graph_inputs}
    for node in graph:  # graphs are topologically sorted
        if node.op_type in NONDETERMINISTIC_OPS or node.op_type in SUBGRAPH_OPS:
            continue
        if node.op_type == "Shape" and node.inputs and node.inputs[0] is not None:
            dims = dims_of(node.inputs[0])
            if dims is not None and all(isinstance(d, int) for d in dims):
                constant.update(id(o) for o in node.outputs)
            continue
        inputs = [v for v in node.inputs if v is not None]
        if all(id(v) in constant for v in inputs):
            constant.update(id(o) for o in node.outputs)
    return constant


def _outer_inputs(node: ir.Node) -> list[ir.Value]:
    """Values a node reads: its inputs plus whatever its subgraphs read from outer scopes."""
    values = [v for v in node.inputs if v is not None]
    for sub in subgraphs_of(node):
        for inner in all_nodes(sub):
            values.extend(v for v in inner.inputs if v is not None)
    return values


def live_nodes(graph: ir.Graph) -> set[int]:
    """ids of nodes that contribute to a graph output."""
    live: set[int] = set()
    stack = [v for v in graph.outputs]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        producer = value.producer()
        if producer is None or id(producer) in live:
            continue
        live.add(id(producer))
        stack.extend(_outer_inputs(producer))
    return live


REDUNDANCY_DETAILS = {
    "identity": "Identity nodes: pure copies, removed by the prune pass",
    "dropout": "Dropout nodes: a no-op at inference",
    "noop_cast": "Cast to the dtype the input already has",
    "chained_cast": "Cast of a Cast: the chain may round-trip or collapse to one",
    "constant_foldable": "nodes whose inputs are all known before run time",
    "conv_bn": "Conv/ConvTranspose followed by BatchNormalization: fusable into the conv",
    "dead_node": "nodes that contribute to no graph output",
    "unused_output": "node outputs nothing consumes",
    "unused_initializer": "initializers nothing reads",
}


def _cast_redundancy(node: ir.Node, source: ir.Value) -> Iterator[Redundancy]:
    """A Cast to the dtype `source` already has, and a Cast of a Cast."""
    to_attr = node.attributes.get("to")
    if to_attr is not None and dtype_name(source.dtype) is not None:
        import onnx_ir as ir

        if ir.DataType(to_attr.value) == source.dtype:
            yield "noop_cast", node
    producer = source.producer()
    if producer is not None and producer.op_type == "Cast":
        yield "chained_cast", node


def _op_redundancy(graph: ir.Graph) -> Iterator[Redundancy]:
    """Nodes of every graph that a pass removes or fuses by their op alone."""
    for node in all_nodes(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Identity":
            yield "identity", node
        elif node.op_type == "Dropout":
            yield "dropout", node
        elif node.op_type == "Cast" and node.inputs and node.inputs[0] is not None:
            yield from _cast_redundancy(node, node.inputs[0])
        elif node.op_type == "BatchNormalization" and node.inputs and node.inputs[0] is not None:
            producer = node.inputs[0].producer()
            if (producer is not None and producer.op_type in CONV_OPS
                    and len(node.inputs[0].uses()) == 1 and not node.inputs[0].is_graph_output()):
                yield "conv_bn", f"{node_label(producer)}+{node_label(node)}"


def _constant_foldable(graph: ir.Graph) -> Iterator[Redundancy]:
    constant = _constant_values(graph)
    for node in graph:
        if node.op_type != "Constant" and node.outputs and all(id(o) in constant for o in node.outputs):
            yield "constant_foldable", node


def _unused(graph: ir.Graph) -> Iterator[Redundancy]:
    """Dead nodes and unused outputs of the main graph, unused initializers of every graph."""
    live = live_nodes(graph)
    for node in graph:
        if id(node) not in live:
            yield "dead_node", node
            continue
        for output in node.outputs:
            if output.name and not output.uses() and not output.is_graph_output():
                yield "unused_output", f"{node_label(node)}:{output.name}"
    for sub in all_graphs(graph):
        for name, value in sub.initializers.items():
            if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
                yield "unused_initializer", name


def redundancy_findings(model: ir.Model) -> list[Finding]:
    graph = model.graph
    groups: dict[str, list[str]] = {}
    for kind, node_or_name in chain(_op_redundancy(graph), _constant_foldable(graph), _unused(graph)):
        label = node_or_name if isinstance(node_or_name, str) else node_label(node_or_name)
        groups.setdefault(kind, []).append(label)
    return [
        Finding(kind=kind, count=len(names), nodes=names, detail=REDUNDANCY_DETAILS[kind])
        for kind, names in groups.items()
    ]


def inspect_model(path: str | Path) -> InspectReport:
    from deploycc import io
    from deploycc.graph.shapes import infer_shapes

    loaded = io.load(path)  # malformed models are refused by every command, inspect included
    model = loaded.model
    notes = []
    note = infer_shapes(model)
    if note:
        notes.append(note)
    graph = model.graph
    nodes = list(all_nodes(graph))
    histogram = Counter(_op_key(n) for n in nodes)
    params = bytes_total = initializers = 0
    for sub in all_graphs(graph):
        for value in sub.initializers.values():
            elements, size = tensor_size(value)
            params += elements
            bytes_total += size
            initializers += 1
    control_flow = Counter(n.op_type for n in nodes if n.op_type in SUBGRAPH_OPS
                           and n.domain in ("", "ai.onnx"))
    graph_inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    return InspectReport(
        path=str(loaded.path),
        file_size_bytes=loaded.file_size,
        ir_version=model.ir_version,
        opset_imports={(k or "ai.onnx"): v for k, v in sorted(model.opset_imports.items())},
        producer=" ".join(p for p in (model.producer_name, model.producer_version) if p),
        inputs=[describe_value(v) for v in graph_inputs],
        outputs=[describe_value(v) for v in graph.outputs],
        node_count=len(nodes),
        main_graph_node_count=len(graph),
        op_histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        parameter_count=params,
        parameter_bytes=bytes_total,
        initializer_count=initializers,
        external_data=[
            {"location": f.location, "size_bytes": f.size_bytes, "tensors": f.tensors}
            for f in loaded.external_files
        ],
        subgraph_count=sum(1 for _ in all_graphs(graph)) - 1,
        control_flow_nodes=dict(control_flow),
        findings=redundancy_findings(model),
        notes=notes,
    )

