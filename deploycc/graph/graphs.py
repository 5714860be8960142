"""Small graph helpers shared by the analyses: walking subgraphs, describing values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from deploycc.dtypes import type_name

if TYPE_CHECKING:
    import onnx_ir as ir

SUBGRAPH_OPS = ("If", "Loop", "Scan")


def subgraphs_of(node: ir.Node) -> Iterator[ir.Graph]:
    """The graphs held directly in a node's attributes (If branches, Loop/Scan bodies)."""
    for attr in node.attributes.values():
        if attr.type.name == "GRAPH":
            yield attr.value
        elif attr.type.name == "GRAPHS":
            yield from attr.value


def all_graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """The graph and every subgraph nested in its nodes' attributes, depth first."""
    yield graph
    for node in graph:
        for sub in subgraphs_of(node):
            yield from all_graphs(sub)


def reaches_graph_output(value: ir.Value) -> bool:
    """The value is an output of its graph, itself or through Identity nodes."""
    if value.is_graph_output():
        return True
    return any(use.node.op_type == "Identity" and reaches_graph_output(use.node.outputs[0])
               for use in value.uses())


def outputs_apart_from_inputs(graph: ir.Graph) -> list[str]:
    """The names of the graph's outputs that no graph input reaches (through any node, a
    subgraph's reads of outer values included): constants, whatever an input would be."""
    reached: set[int] = {id(value) for value in graph.inputs}
    for node in graph:  # a model's graph is in topological order
        reads = [value for sub in subgraphs_of(node) for inner in all_nodes(sub) for value in inner.inputs]
        if any(value is not None and id(value) in reached for value in [*node.inputs, *reads]):
            reached.update(id(output) for output in node.outputs)
    return [value.name or "" for value in graph.outputs if id(value) not in reached]


def all_nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    for sub in all_graphs(graph):
        yield from sub


def forget_discarded_readers(graph: ir.Graph) -> int:
    """Detach the nodes of graphs no longer in the model from the values they read. A folded If
    drops its other branch whole, but that branch's nodes still count as uses of the outer values
    they read (silero-vad: a Transpose only the discarded branch's Shape read was kept as live,
    and written out dead). Returns how many reads were detached."""
    live = set(map(id, all_graphs(graph)))
    detached = 0
    for body in all_graphs(graph):
        values = [*body.inputs, *body.initializers.values(), *(o for node in body for o in node.outputs)]
        for value in values:
            for use in list(value.uses()):
                reader = use.node
                if reader.graph is None or id(reader.graph) not in live:
                    reader.replace_input_with(use.idx, None)
                    detached += 1
    return detached


def dims_of(value: ir.Value) -> list[int | str] | None:
    """Dims as ints, symbolic names, or '?' for unknown; None when even the rank is unknown."""
    if value.shape is None:
        return None
    dims: list[int | str] = []
    for dim in value.shape:
        if isinstance(dim, int):
            dims.append(dim)
        else:
            name = getattr(dim, "value", None)
            dims.append(name if isinstance(name, str) and name else "?")
    return dims


def dynamic_dims(value: ir.Value) -> list[tuple[int, str]]:
    dims = dims_of(value)
    if dims is None:
        return [(-1, "unknown rank")]
    return [(i, str(d)) for i, d in enumerate(dims) if not isinstance(d, int)]


def name_layers(graph: ir.Graph) -> bool:
    """Give every nameless node a name (the engines' layer names come from them, and the layers
    a half-precision build keeps in fp32 are named by them): its label (node_label, the name
    its first output has) where no other node has it, else its op and place; whether any was
    nameless."""
    taken = {node.name for node in graph if node.name}
    named = False
    for index, node in enumerate(graph):
        if not node.name:
            name = node_label(node)
            if name in taken or name.startswith("<"):
                name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name, named = name, True
            taken.add(name)
    return named


def node_label(node: ir.Node) -> str:
    """A node's name; for an unnamed node its first output's name, else <OpType>."""
    if node.name:
        return node.name
    first = node.outputs[0].name if node.outputs else None
    return first or f"<{node.op_type}>"


def describe_value(value: ir.Value) -> dict[str, object]:
    return {"name": value.name, "dtype": type_name(value), "dims": dims_of(value)}


def opset_map(model: ir.Model) -> dict[str, int]:
    """The model's opset imports with the default domain spelled "" (never "ai.onnx")."""
    return {("" if k == "ai.onnx" else k): v for k, v in model.opset_imports.items()}


def graph_label(model: ir.Model, graph: ir.Graph) -> str:
    """How reports name a graph: "main", or a subgraph's name."""
    return "main" if graph is model.graph else (graph.name or "subgraph")


def constant_tensor(value: ir.Value | None, max_elements: int | None = None) -> Any | None:
    """The numpy contents of an initializer or Constant output (up to max_elements), else None."""
    import onnx_ir as ir

    if value is None:
        return None
    tensor = value.const_value if value.const_value is not None else ir.convenience.get_const_tensor(value)
    if tensor is None or (max_elements is not None and tensor.size > max_elements):
        return None
    return tensor.numpy()


def cast_destination(node: ir.Node) -> ir.DataType | None:
    """The element type a Cast (its `to`) or CastLike (its second input's type) produces."""
    import onnx_ir as ir

    if node.op_type == "CastLike":
        like = node.inputs[1] if len(node.inputs) > 1 else None
        return like.dtype if like is not None else None
    attr = node.attributes.get("to")
    return None if attr is None else ir.DataType(int(attr.value))


def structure(model: ir.Model) -> tuple:
    """What a pass can change, cheaply compared before and after: the nodes of every graph
    (subgraphs too), each with its op and inputs, the graph's outputs, the initializers and the
    opsets. Attributes edited in place are not in it: a pass that edits them says so itself."""
    nodes = tuple((id(node), node.op_type, tuple(id(v) for v in node.inputs))
                  for graph in all_graphs(model.graph) for node in graph)
    outputs = tuple(id(value) for value in model.graph.outputs)
    return nodes, outputs, tuple(model.graph.initializers), tuple(sorted(model.opset_imports.items()))


def content(model: ir.Model) -> tuple:
    """Like `structure`, for a pass that hands back a new model (onnxsim): what it holds rather
    than which objects: ops in order, initializer names and shapes, opsets."""
    ops = tuple(node.op_type for graph in all_graphs(model.graph) for node in graph)
    weights = tuple((name, tuple(value.shape) if value.shape is not None else None)
                    for name, value in model.graph.initializers.items())
    return ops, weights, tuple(sorted(model.opset_imports.items()))
