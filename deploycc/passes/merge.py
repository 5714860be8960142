"""Clean-ups that make several nodes one, for tidy: a Concat read only by Concats on the same axis
is spliced into them; a Slice of a Slice on other axes is one Slice (for every reader of the inner
one); MatMuls that read one input with constant weights of their own (attention's Q, K and V
projections) become one MatMul on the weights side by side and a Split.

onnxsim and onnxslim do these on real exports (RAFT's correlation pyramid writes Concat of
Concat, YOLOX's Focus a Slice read by two Slices, a dynamo-exported ViT three MatMuls per layer).
Each computes the same elements: a Concat of Concats copies them in the same order, merged Slice
bounds select the same ones, and each column of a MatMul's result reads only its own column of
the weights (the wide product may differ by the summation order its kernel picks).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

# Fewer MatMuls do not pay below this many: two become a MatMul and a Split, no fewer nodes.
MIN_MERGED_MATMULS = 3


def _standard(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx")


def _axis(node: ir.Node) -> int | None:
    """The Concat's axis, made non-negative where the output's rank is known."""
    axis = node.attributes.get_int("axis")
    if axis is None:
        return None
    if axis >= 0:
        return axis
    shape = node.outputs[0].shape
    return axis + len(shape) if shape is not None else None


def _splice_targets(inner: ir.Node, graph: ir.Graph) -> list[ir.Node] | None:
    """The Concats that read this Concat's result, when every reader is one on its axis in
    `graph` (RAFT reads a pyramid level's Concat from two); else None."""
    value = inner.outputs[0]
    axis = _axis(inner)
    if axis is None or value.is_graph_output() or not value.uses():
        return None
    readers = []
    for user, _ in value.uses():
        if user.op_type != "Concat" or not _standard(user) or user.graph is not graph or _axis(user) != axis:
            return None
        readers.append(user)
    return list(dict.fromkeys(readers))


def inline_concat_of_concat(graph: ir.Graph) -> int:
    """Concat(a, Concat(b, c), d) on one axis -> Concat(a, b, c, d), where every reader of the
    inner Concat is a Concat on that axis (not a graph output): the inner one goes. Returns the
    Concats removed."""
    from deploycc.graph.graphs import all_graphs

    removed = 0
    for sub in all_graphs(graph):
        for inner in list(sub):
            if inner.op_type != "Concat" or not _standard(inner) or inner.graph is not sub:
                continue
            readers = _splice_targets(inner, sub)
            if readers is None:
                continue
            produced = inner.outputs[0]
            for reader in readers:
                spliced: list[ir.Value | None] = []
                for value in reader.inputs:
                    spliced.extend(inner.inputs if value is produced else [value])
                _replace_inputs(reader, spliced)
            sub.remove(inner, safe=True)
            removed += 1
    return removed


def _replace_inputs(node: ir.Node, inputs: list[ir.Value | None]) -> None:
    """Give a variadic node a new list of inputs."""
    node.resize_inputs(len(inputs))
    for index, value in enumerate(inputs):
        node.replace_input_with(index, value)


def _fresh(graph: ir.Graph, base: str) -> str:
    """An initializer name not yet taken in `graph`."""
    name, number = base, 0
    while name in graph.initializers:
        number += 1
        name = f"{base}_{number}"
    return name


def _named(node: ir.Node, suffix: str) -> str | None:
    """A name for what replaces `node`: an unnamed node's stays unnamed (ONNX wants node names
    unique where given; two unnamed nodes are fine)."""
    return f"{node.name}_{suffix}" if node.name else None


def _weights(node: ir.Node) -> ir.Value | None:
    """A MatMul's constant 2-D right-hand side read by this node alone, else None."""
    value = node.inputs[1] if len(node.inputs) == 2 else None
    if value is None or value.const_value is None or value.is_graph_output() or value.is_graph_input():
        return None
    if len(value.const_value.shape) != 2 or len(value.uses()) != 1:
        return None
    return value


def merge_sibling_matmuls(graph: ir.Graph, opset: int) -> int:
    """MatMul(x, W1), MatMul(x, W2), MatMul(x, W3) with constant weights of one dtype and one K ->
    Split(MatMul(x, [W1 W2 W3]), [N1, N2, N3]) on the last axis. Returns the MatMuls removed."""
    import numpy as np
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    removed = 0
    for sub in all_graphs(graph):
        groups: dict[tuple[int, int, object], list[ir.Node]] = defaultdict(list)
        for node in sub:
            if node.op_type != "MatMul" or not _standard(node) or node.inputs[0] is None:
                continue
            weights = _weights(node)
            if weights is None or weights.dtype is None:
                continue
            shape = weights.const_value.shape  # type: ignore[union-attr]
            groups[(id(node.inputs[0]), int(shape[0]), weights.dtype)].append(node)  # type: ignore[arg-type]
        for nodes in groups.values():
            if len(nodes) < MIN_MERGED_MATMULS:
                continue
            if any(n.outputs[0].is_graph_output() for n in nodes):
                continue
            # The merged MatMul and its Split go where the first of them stood: x exists there,
            # and every reader of a part came after that part's MatMul, so after the Split.
            arrays = [n.inputs[1].const_value.numpy() for n in nodes]  # type: ignore[union-attr]
            widths = [int(a.shape[1]) for a in arrays]
            first = nodes[0]
            stacked = ir.Value(name=_fresh(sub, f"{first.name or 'matmul'}_merged_weights"),
                               const_value=ir.tensor(np.concatenate(arrays, axis=1)))
            sub.register_initializer(stacked)
            wide = ir.node("MatMul", [first.inputs[0], stacked], name=_named(first, "merged"))
            sizes = ir.Value(name=_fresh(sub, f"{first.name or 'matmul'}_merged_sizes"),
                             const_value=ir.tensor(np.array(widths, np.int64)))
            if opset >= 13:
                sub.register_initializer(sizes)
                split = ir.node("Split", [wide.outputs[0], sizes], attributes={"axis": -1},
                                num_outputs=len(nodes), name=_named(first, "split"))
            else:
                split = ir.node("Split", [wide.outputs[0]], attributes={"axis": -1, "split": widths},
                                num_outputs=len(nodes), name=_named(first, "split"))
            sub.insert_before(first, [wide, split])
            for node, part in zip(nodes, split.outputs, strict=True):
                old = node.outputs[0]
                name, old.name = old.name, None
                part.name, part.shape, part.type = name, old.shape, old.type
                old.replace_all_uses_with(part)
                weights = node.inputs[1]
                sub.remove(node, safe=True)
                if weights is not None and weights.name and weights.name in sub.initializers \
                        and not weights.uses():
                    sub.initializers.pop(weights.name)
            removed += len(nodes) - 1
    return removed


def _slice_bounds(node: ir.Node, rank: int | None) -> list[np.ndarray] | None:
    """A Slice's starts, ends, axes (made non-negative) and steps when every one is a constant."""
    import numpy as np

    if node.op_type != "Slice" or not _standard(node) or len(node.inputs) < 4:
        return None
    found = []
    for value in node.inputs[1:5]:
        tensor = value.const_value if value is not None else None
        found.append(None if tensor is None else tensor.numpy().reshape(-1).astype(np.int64))
    if len(found) == 3 or found[3] is None:  # steps left out: 1 on every axis
        found[3:] = [np.ones_like(found[0]) if found[0] is not None else None]
    known: list[np.ndarray] = [part for part in found if part is not None]
    if len(known) != 4:
        return None
    axes = known[2]
    if (axes < 0).any():
        if rank is None:
            return None
        known[2] = np.where(axes < 0, axes + rank, axes)
    return known


def merge_slice_chains(graph: ir.Graph) -> int:
    """Slice(Slice(x)) on other axes, every bound constant -> one Slice of x with both sets of
    bounds (torch's x[:, a:b][:, :, ::2], YOLOX's Focus, an STFT's real and imaginary halves).
    Where the inner Slice has several readers, each becomes one Slice of x, and only when every
    reader can (else the inner one stays, and nothing is gained). Returns the Slices removed."""
    import numpy as np
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    removed = 0
    for sub in all_graphs(graph):
        for inner in list(sub):
            data = inner.inputs[0] if inner.op_type == "Slice" and inner.inputs else None
            rank = len(data.shape) if data is not None and data.shape is not None else None
            first = _slice_bounds(inner, rank) if inner.graph is sub else None
            produced = inner.outputs[0]
            if first is None or produced.is_graph_output() or not produced.uses():
                continue
            readers = list(dict.fromkeys(user for user, _ in produced.uses()))
            merged = []
            for reader in readers:
                second = _slice_bounds(reader, rank) if reader.graph is sub else None
                if second is None or reader.inputs[0] is not produced or \
                        any(value is produced for value in reader.inputs[1:]) or \
                        set(first[2].tolist()) & set(second[2].tolist()):
                    break
                merged.append((reader, second))
            if len(merged) != len(readers):
                continue
            for reader, second in merged:
                bounds = []
                for index, kind in enumerate(("starts", "ends", "axes", "steps")):
                    name = _fresh(sub, f"{reader.name or 'slice'}_merged_{kind}")
                    value = ir.Value(name=name, const_value=ir.tensor(np.concatenate([first[index],
                                                                                      second[index]])))
                    sub.register_initializer(value)
                    bounds.append(value)
                one = ir.node("Slice", [data, *bounds], name=_named(reader, "merged"))
                ir.convenience.replace_nodes_and_values(sub, reader, [reader], [one],
                                                        [reader.outputs[0]], [one.outputs[0]])
            sub.remove(inner, safe=True)
            removed += 1
    return removed


def _one_dim_of(value: ir.Value | None, graph: ir.Graph) -> tuple[ir.Value, int, list[ir.Node]] | None:
    """Unsqueeze(Gather(s, k), [0]) with s a 1-D shape vector, k a constant >= 0, and nothing else
    reading either node: (s, k, [the Gather, the Unsqueeze]); else None."""
    from deploycc.graph.graphs import constant_tensor

    unsqueeze = value.producer() if value is not None else None
    if value is None or unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or not _standard(unsqueeze) \
            or unsqueeze.graph is not graph or len(value.uses()) != 1:
        return None
    axes = constant_tensor(unsqueeze.inputs[1], max_elements=4) if len(unsqueeze.inputs) > 1 \
        else unsqueeze.attributes.get_ints("axes")
    gathered = unsqueeze.inputs[0]
    gather = gathered.producer() if gathered is not None else None
    if axes is None or list(axes) != [0] or gathered is None or gather is None or gather.op_type != "Gather" \
            or not _standard(gather) or gather.graph is not graph or len(gathered.uses()) != 1 \
            or gather.attributes.get_int("axis", 0) != 0:
        return None
    source, index = gather.inputs[0], constant_tensor(gather.inputs[1], max_elements=1)
    if source is None or source.shape is None or len(source.shape) != 1 or index is None or index.ndim != 0 \
            or int(index) < 0:
        return None
    return source, int(index), [gather, unsqueeze]


def _follows(found: list, position: int, start: int) -> bool:
    """Whether the dim at `position` is the next of one shape after the run from `start`."""
    item, first = found[position], found[start]
    return item is not None and first is not None and item[0] is first[0] \
        and item[1] == first[1] + (position - start)


def slice_adjacent_dims(graph: ir.Graph) -> int:
    """Concat(..., Unsqueeze(Gather(s, k)), Unsqueeze(Gather(s, k + 1)), ...) -> Concat(..., Slice(s,
    k, k + 2), ...): the dims a shape is rebuilt from, read as one run (RAFT's TorchScript export
    writes [-1, h, w, c] so). Opset 10 and later (Slice with inputs). Returns the nodes removed."""
    import numpy as np
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    removed = 0
    for sub in all_graphs(graph):
        for concat in list(sub):
            if concat.op_type != "Concat" or not _standard(concat) or concat.attributes.get_int("axis") != 0:
                continue
            inputs = list(concat.inputs)
            found = [_one_dim_of(value, sub) for value in inputs]


            rebuilt: list[ir.Value | None] = []
            dead: list[ir.Node] = []
            index = 0
            while index < len(inputs):
                first = found[index]
                end = index + 1
                while end < len(inputs) and _follows(found, end, index):
                    end += 1
                if first is None or end - index < 2:
                    rebuilt.append(inputs[index])
                    index += 1
                    continue
                bounds = [ir.Value(name=_fresh(sub, f"{concat.name or 'concat'}_dims_{kind}"),
                                   const_value=ir.tensor(np.array([value], np.int64)))
                          for kind, value in (("start", first[1]), ("end", first[1] + end - index))]
                for bound in bounds:
                    sub.register_initializer(bound)
                run = ir.node("Slice", [first[0], *bounds], name=_named(concat, f"dims_{index}"))
                sub.insert_before(concat, run)
                rebuilt.append(run.outputs[0])
                run_nodes = [node for item in found[index:end] if item is not None for node in item[2]]
                dead.extend(run_nodes)
                removed += len(run_nodes) - 1
                index = end
            if not dead:
                continue
            _replace_inputs(concat, rebuilt)
            for node in reversed(dead):  # each Unsqueeze before the Gather it read
                sub.remove(node, safe=True)
    return removed
