"""Which dynamic input dims the graph holds to one size though the exporter named them apart, and
the guesses that follow: a dim the graph ties to a batch is a batch, sized and fixed with it.

An exporter names each input's dims on its own (`input` [batch, samples] beside `state`
[2, n, 128]), or not at all (`?`); the graph then says they are one size where it joins them: a
Concat's other axes, the aligned dims of a broadcasting op, MatMul's and Gemm's inner dims. ONNX's
shape inference carries each input dim's identity to those ops when every input dim is named for
its place first; dims of one name are one size already (ONNX gives one size to one name).

Where this was missing, `--batch 1` fixed `input`'s batch and left `state`'s drawn at another
size, so the original model failed on the drawn inputs and the build on them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from deploycc.graph.dim_roles import BATCH, ROLE_SIZES, DimGuess

if TYPE_CHECKING:
    import onnx_ir as ir

Place = tuple[str, int]  # (input name, axis)

# Ops whose inputs broadcast against each other (numpy's rule, aligned from the last dim): two
# symbolic dims in one place are one size (a dim that broadcasts is a 1, which no name holds).
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "Equal", "Greater", "GreaterOrEqual", "Less",
    "LessOrEqual", "And", "Or", "Xor", "Where", "Max", "Min", "Sum", "Mean", "PRelu", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor",
})
_PLACE_MARK = "deploycc.place"


def tie_guesses(model: ir.Model, guesses: list[DimGuess]) -> list[DimGuess]:
    """The guesses, each dim the graph ties to another taking one role and size for the whole
    group: a batch where any of them is one, else the first one's. Unchanged (and no inference
    run) where no two dynamic dims of different inputs could be tied."""
    if len({g.input for g in guesses}) < 2:
        return guesses
    groups = tied_places(model)
    if not groups:
        return guesses
    by_place = {(g.input, g.axis): g for g in guesses}
    tied: dict[Place, DimGuess] = {}
    for group in groups:
        members = [by_place[place] for place in sorted(group) if place in by_place]
        lead = next((g for g in members if g.role == BATCH), members[0] if members else None)
        if lead is None:
            continue
        for guess in members:
            if guess is lead or (guess.role == lead.role and guess.typical == lead.typical):
                continue
            typical, fallbacks = ROLE_SIZES[BATCH] if lead.role == BATCH else (lead.typical, lead.fallbacks)
            tied[(guess.input, guess.axis)] = dataclasses.replace(
                guess, role=lead.role, typical=typical, fallbacks=fallbacks,
                source=f"{lead.role} (the graph holds it equal to {lead.input}[{lead.axis}]): "
                       f"default {typical}")
    return [tied.get((g.input, g.axis), g) for g in guesses]


def tied_places(model: ir.Model) -> list[set[Place]]:
    """Groups of two or more dynamic input dims (by input and axis) the graph holds to one size;
    none where shape inference cannot run on the model."""
    import onnx

    from deploycc.graph.private_api import call_onnx_api

    places: dict[str, Place] = {}
    same_name: dict[str, list[str]] = {}

    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        initializers = {t.name for t in proto.graph.initializer}
        for value in proto.graph.input:
            if value.name in initializers or not value.type.tensor_type.HasField("shape"):
                continue
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if dim.HasField("dim_value"):
                    continue
                token = f"{_PLACE_MARK}.{len(places)}"
                places[token] = (value.name, axis)
                if dim.dim_param:
                    same_name.setdefault(dim.dim_param, []).append(token)
                dim.dim_param = token
        return onnx.shape_inference.infer_shapes(proto, data_prop=True, check_type=False, strict_mode=False)

    try:
        inferred = call_onnx_api(infer, model)
    except Exception:  # a model onnx cannot infer: no ties, the guesses stand as they were
        return []
    if len(places) < 2:
        return []
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def union(a: Any, b: Any) -> None:
        if isinstance(a, str) and isinstance(b, str) and a and b:
            parent[root(a)] = root(b)

    for tokens in same_name.values():
        for token in tokens[1:]:
            union(token, tokens[0])
    shapes = dict(_shapes(inferred.graph))
    for node in _nodes(inferred.graph):
        for a, b in _equal_dims(node, shapes):
            union(a, b)
    groups: dict[str, set[Place]] = {}
    for token, place in places.items():
        groups.setdefault(root(token), set()).add(place)
    return [group for group in groups.values() if len(group) > 1]


def _shapes(graph: Any) -> Iterator[tuple[str, list[int | str]]]:
    """Every value's inferred dims (an int, a name, or "" for unknown), subgraphs included."""
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            yield info.name, [d.dim_value if d.HasField("dim_value") else d.dim_param
                              for d in tensor.shape.dim]
    for node in graph.node:
        for body in _bodies(node):
            yield from _shapes(body)


def _nodes(graph: Any) -> Iterator[Any]:
    for node in graph.node:
        yield node
        for body in _bodies(node):
            yield from _nodes(body)


def _bodies(node: Any) -> Iterator[Any]:
    """A node's subgraphs (an If's branches, a Loop's or Scan's body)."""
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _int_attribute(node: Any, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _equal_dims(node: Any, shapes: dict[str, list[int | str]]) -> Iterator[tuple[int | str, int | str]]:
    """Pairs of dims `node` needs equal, as its inputs' inferred dims."""
    dims = [shapes.get(name) if name else None for name in node.input]
    if node.op_type in BROADCASTING:
        known = [d for d in dims if d is not None]
        for first, other in itertools.pairwise(known):
            yield from zip(reversed(first), reversed(other), strict=False)
    elif node.op_type == "Concat" and dims:
        known = [d for d in dims if d is not None]
        rank = len(known[0]) if known else 0
        axis = _int_attribute(node, "axis", 0) % rank if rank else 0
        for first, other in itertools.pairwise(known):
            if len(first) == len(other) == rank:
                yield from ((a, b) for i, (a, b) in enumerate(zip(first, other, strict=True)) if i != axis)
    elif node.op_type == "MatMul" and len(dims) == 2 and dims[0] and dims[1] and len(dims[1]) >= 2:
        a, b = dims[0], dims[1]
        yield a[-1], b[-2]
        yield from zip(reversed(a[:-2]), reversed(b[:-2]), strict=False)
    elif node.op_type == "Gemm" and len(dims) >= 2 and dims[0] and dims[1]:
        a, b = dims[0], dims[1]
        if len(a) != 2 or len(b) != 2:
            return
        inner_a = a[0] if _int_attribute(node, "transA", 0) else a[1]
        inner_b = b[1] if _int_attribute(node, "transB", 0) else b[0]
        yield inner_a, inner_b
