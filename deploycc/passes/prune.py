"""Prune: remove what computes nothing.

1. Nodes that are identities in disguise become Identity: Dropout at inference (mask unused),
   arithmetic with a neutral constant (x*1, x/1, x+0, x-0) that does not broadcast x larger
   (but not a normalization's neutral scale or bias: ONNX Runtime's LayerNorm fusions match them),
   Cast to the type the input already has, Cast chains that round-trip through a wider type
   (float16 -> float32 -> float16 is exact; float32 -> float16 -> float32 is not, and stays),
   Reshape/Expand to the shape the input already has, Flatten of a matrix at axis 1, Transpose
   with the identity permutation or moving only dims of size 1 into a Reshape, Slice over the
   whole tensor, Pad with zero pads.
2. Identity nodes go, keeping every graph's input and output names: y = Identity(x) is removed
   when y is not a graph output; when it is, x takes its place only if x is made in the same
   graph, read by nothing else and not an output itself. (onnx-ir's IdentityEliminationPass
   renames x to y even when x feeds several outputs of a subgraph, which gives one value
   several output names: found by `deploycc probe` on the AffineGrid conformance cases.)
3. Outputs not named by --keep-outputs are dropped (when given), then dead nodes, unused
   initializers and unused opset imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deploycc.errors import OptionError
from deploycc.passes.base import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import onnx_ir as ir

# Casts a -> b -> a that lose nothing: b holds every value of a exactly.
LOSSLESS_WIDENING = {
    ("FLOAT16", "FLOAT"), ("FLOAT16", "DOUBLE"), ("BFLOAT16", "FLOAT"), ("BFLOAT16", "DOUBLE"),
    ("FLOAT", "DOUBLE"),
    ("INT8", "INT16"), ("INT8", "INT32"), ("INT8", "INT64"), ("INT16", "INT32"), ("INT16", "INT64"),
    ("INT32", "INT64"), ("UINT8", "INT16"), ("UINT8", "INT32"), ("UINT8", "INT64"),
    ("UINT16", "INT32"), ("UINT16", "INT64"), ("UINT32", "INT64"),
    ("INT8", "FLOAT16"), ("UINT8", "FLOAT16"), ("INT8", "FLOAT"), ("UINT8", "FLOAT"),
    ("INT16", "FLOAT"), ("UINT16", "FLOAT"), ("INT32", "DOUBLE"), ("INT8", "DOUBLE"),
    ("UINT8", "DOUBLE"), ("BOOL", "INT32"), ("BOOL", "INT64"), ("BOOL", "FLOAT"), ("BOOL", "UINT8"),
}
INT64_MAX = np.iinfo(np.int64).max
NEUTRAL_OPERAND = {"Mul": 1, "Div": 1, "Add": 0, "Sub": 0}
# A neutral operand is read whole to be sure of it: a language model head's zero bias over its
# vocabulary (RoBERTa's 50,265) is one, and its Add over every position's logits costs a run 7%
NEUTRAL_MAX_ELEMENTS = 1 << 20


def _const(value: ir.Value | None) -> np.ndarray | None:
    from deploycc.graph.graphs import constant_tensor

    return constant_tensor(value, max_elements=4096)


def _static(value: ir.Value | None) -> list[int] | None:
    if value is not None and value.const_value is not None:  # a folded constant may carry no shape
        return [int(d) for d in value.const_value.shape.numpy()]
    if value is None or value.shape is None or not value.shape.is_static():
        return None
    return [int(d) for d in value.shape.numpy()]


def _dims(value: ir.Value | None) -> list[int | None] | None:
    """The value's dims with None for a symbolic or unknown one; None when its rank is unknown.
    A dim a broadcast or reshape keeps must be known only where the other side is not 1."""
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


def _broadcast_keeps(dims: list[int | None], other: tuple[int, ...] | list[int]) -> bool:
    """Whether broadcasting a tensor of `dims` with one of shape `other` leaves `dims` as they are."""
    if len(other) > len(dims):
        return False
    return all(o == 1 or (d is not None and d == o) for o, d in zip(other[::-1], dims[::-1], strict=False))


def _dtype(value: ir.Value | None) -> str | None:
    return None if value is None or value.dtype is None else value.dtype.name


def reshape_keeps(wanted: Sequence[int | str], dims: Sequence[int | str | None], allowzero: bool) -> bool:
    """Whether reshaping a tensor of `dims` to `wanted` leaves it as it is, dim by dim: 0 copies
    the dim (without allowzero), an entry must equal a known dim (a number, or the same symbolic
    dim), and one -1 is the one dim left when every other dim is kept."""
    inferred = 0
    for entry, dim in zip(wanted, dims, strict=True):
        if entry == -1:
            inferred += 1
        elif entry == 0 and not allowzero:
            continue
        elif isinstance(entry, int) and entry <= 0:
            return False
        elif dim is None or "?" in str(dim) or str(entry) != str(dim):
            return False
    return inferred <= 1


def _dropout_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        return None
    ratio = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    training = _const(node.inputs[2]) if len(node.inputs) > 2 else None
    if training is not None and bool(training):
        return None if ratio is None or float(ratio) != 0 else x
    return x


def _cast_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    import onnx_ir as ir

    to = node.attributes.get_int("to")
    source = _dtype(x)
    if source is not None and to is not None and ir.DataType(to).name == source:
        return x
    producer = x.producer()
    if producer is not None and producer.op_type == "Cast" and producer.domain in ("", "ai.onnx"):
        origin = producer.inputs[0]
        if origin is not None and _dtype(origin) == _dtype(node.outputs[0]) and \
                (_dtype(origin), _dtype(x)) in LOSSLESS_WIDENING:
            return origin
    return None


def _flatten_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    """[a, b] flattened at axis 1 is [a, b]."""
    dims = _dims(x)
    return x if dims is not None and len(dims) == 2 and node.attributes.get_int("axis", 1) in (1, -1) \
        else None


def _transpose_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    perm = node.attributes.get_ints("perm")
    if perm is not None and list(perm) == list(range(len(perm))):
        return x
    return x if perm is not None and _only_moves_unit_dims_into_reshapes(node, list(perm)) else None


def _scatter_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    if len(node.inputs) <= 1:
        return None
    # No index, no update: folding Swin3D's shifted-window mask (torchvision, TorchScript) leaves
    # ScatterNDs with indices of shape [0, 49, 49, 3], which OpenVINO 2026.4 reads as a scalar
    # and refuses ("Indices rank ... expected to be at least 1").
    indices = _static(node.inputs[1])
    if indices is None:
        return None
    indexed = indices[:-1] if node.op_type == "ScatterND" else indices
    return x if 0 in indexed else None


def _reshape_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    wanted = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    dims = _dims(x)
    if dims is None or wanted is None or wanted.size != len(dims):
        return None
    allowzero = bool(node.attributes.get_int("allowzero", 0))
    return x if reshape_keeps(wanted.tolist(), dims, allowzero) else None


def _expand_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    wanted = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    dims = _dims(x)
    if dims is None or wanted is None:
        return None
    return x if _broadcast_keeps(dims, [int(d) for d in wanted.reshape(-1)]) else None


def _pad_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    pads = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    if pads is None:
        attr = node.attributes.get_ints("pads")
        pads = np.asarray(attr) if attr is not None else None
    return x if pads is not None and not pads.any() else None


def _slice_input(node: ir.Node, x: ir.Value) -> ir.Value | None:
    if len(node.inputs) < 3:
        return None
    starts, ends = _const(node.inputs[1]), _const(node.inputs[2])
    axes = _const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
    steps = _const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    if starts is None or ends is None or (steps is not None and (steps != 1).any()):
        return None
    shape = _static(x)
    rank = len(shape) if shape is not None else (x.shape.rank() if x.shape is not None else None)
    if rank is None:
        return None
    axes_list = [int(a) % rank for a in (axes if axes is not None else range(len(starts)))]
    for axis, start, end in zip(axes_list, starts.reshape(-1), ends.reshape(-1), strict=True):
        size = shape[axis] if shape is not None else None
        if start != 0 or not (end >= INT64_MAX // 2 or (size is not None and end >= size)):
            return None
    return x


# What each op forwards when it computes nothing, read from the node and its first input.
FORWARDED_INPUT: dict[str, Callable[[ir.Node, ir.Value], ir.Value | None]] = {
    "Dropout": _dropout_input, "Cast": _cast_input, "Flatten": _flatten_input,
    "Transpose": _transpose_input, "ScatterND": _scatter_input, "ScatterElements": _scatter_input,
    "Reshape": _reshape_input, "Expand": _expand_input, "Pad": _pad_input, "Slice": _slice_input,
}


def passthrough_input(node: ir.Node) -> ir.Value | None:
    """The value this node merely forwards, or None when it computes something."""
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return None
    if node.op_type in NEUTRAL_OPERAND:
        return _neutral_arithmetic(node, node.op_type) if len(node.inputs) == 2 else None
    forwarded = FORWARDED_INPUT.get(node.op_type)
    return forwarded(node, node.inputs[0]) if forwarded is not None else None


def _only_moves_unit_dims_into_reshapes(node: ir.Node, perm: list[int]) -> bool:
    """A Transpose that keeps the order of every dim but those of size 1 leaves the data in the
    same order; read only by Reshapes to constant shapes (without a 0, which would copy a dim by
    position), it can go (ConvNeXt's head: LayerNorm2d's permute back, then flatten)."""
    dims = _dims(node.inputs[0])
    output = node.outputs[0]
    if dims is None or len(dims) != len(perm) or output.is_graph_output() or not output.uses():
        return False
    moved = [axis for axis in perm if dims[axis] != 1]
    if moved != sorted(moved):
        return False
    for use in output.uses():
        reader = use.node
        target = _const(reader.inputs[1]) if reader.op_type == "Reshape" and len(reader.inputs) > 1 else None
        if use.idx != 0 or target is None or (target == 0).any():
            return False
    return True


def _neutral_arithmetic(node: ir.Node, op: str) -> ir.Value | None:
    """x for x*1, 1*x, x/1, x+0, 0+x, x-0, when the constant does not broadcast x larger
    and the result keeps x's dtype, and it is not a normalization's scale or bias."""
    from deploycc.graph.graphs import constant_tensor

    allowed_sides = (0, 1) if op in ("Mul", "Add") else (1,)
    for side in allowed_sides:
        operand, constant = node.inputs[1 - side], constant_tensor(node.inputs[side], NEUTRAL_MAX_ELEMENTS)
        if operand is None or constant is None or _dtype(operand) != _dtype(node.outputs[0]):
            continue
        if not np.all(constant == NEUTRAL_OPERAND[op]) or _normalization_affine(op, operand, constant):
            continue
        dims = _dims(operand)
        if dims is not None and _broadcast_keeps(dims, constant.shape):
            return operand
    return None


def _normalized(value: ir.Value) -> bool:
    """Whether the value is a written-out normalization's result before its scale: x / Sqrt(..)
    or x * Reciprocal(Sqrt(..)) (LayerNorm, and RMSNorm as Llama's exports write it)."""
    producer = value.producer()
    if producer is None or producer.op_type not in ("Div", "Mul") or len(producer.inputs) != 2:
        return False
    for operand in producer.inputs:
        source = operand.producer() if operand is not None else None
        if source is not None and source.op_type == "Reciprocal" and source.inputs[0] is not None:
            source = source.inputs[0].producer()
        if source is not None and source.op_type == "Sqrt" and (producer.op_type == "Mul" or operand
                                                                 is producer.inputs[1]):
            return True
    return False


def _normalization_affine(op: str, operand: ir.Value, constant: np.ndarray) -> bool:
    """A neutral per-channel scale (Mul by ones) right after a written-out normalization, or the
    neutral bias (Add of zeros) after that scale: a freshly initialized LayerNorm's parameters.
    They stay, because ONNX Runtime's LayerNormalization and SimplifiedLayerNormalization fusions
    match the scale's Mul (and the bias's Add): without them the normalization ran as its 7 separate
    kernels (a random-weight DistilBERT's int8 artifact 1.45x the time of quantize_dynamic on the
    raw export, whose LayerNorms ORT fused). A scalar 1 is an exporter's, not a parameter: it goes."""
    if constant.size < 2:
        return False
    if op == "Mul":
        return _normalized(operand)
    scale = operand.producer()
    return op == "Add" and scale is not None and scale.op_type == "Mul" and len(scale.inputs) == 2 and \
        any(v is not None and _const(v) is not None for v in scale.inputs) and \
        any(v is not None and _normalized(v) for v in scale.inputs)


def _eliminate_identities(graph: ir.Graph) -> int:
    removed = 0
    for node in list(graph):
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        source, result = node.inputs[0], node.outputs[0]
        if source is None:
            continue
        if not result.is_graph_output():
            result.replace_all_uses_with(source)
            graph.remove(node, safe=True)
            removed += 1
            continue
        producer = source.producer()
        if (producer is None or producer.graph is not graph or source.is_graph_output()
                or len(source.uses()) != 1 or result.uses()):
            continue
        index = graph.outputs.index(result)
        name = result.name
        graph.remove(node, safe=False)
        graph.outputs[index] = source
        source.name = name
        source.type = source.type or result.type  # the output keeps its declared type and shape
        source.shape = source.shape or result.shape
        removed += 1
    return removed


def _to_identity(graph: ir.Graph, node: ir.Node, source: ir.Value) -> None:
    import onnx_ir as ir

    identity = ir.Node("", "Identity", [source], num_outputs=1, name=node.name)
    ir.convenience.replace_nodes_and_values(graph, node, [node], [identity],
                                            [node.outputs[0]], [identity.outputs[0]])


class PrunePass(Pass):
    name = "prune"
    summary = "remove identities, no-op ops, round-trip casts, dead nodes and unused outputs"

    def changes_signature(self, options) -> bool:
        return options.keep_outputs is not None

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import RemoveUnusedNodesPass, RemoveUnusedOpsetsPass

        from deploycc.graph.graphs import all_graphs, structure

        graph = state.model.graph
        shape_before = structure(state.model)
        turned: dict[str, int] = {}
        for sub in all_graphs(graph):
            for node in list(sub):
                source = passthrough_input(node)
                if source is not None and node.op_type != "Identity":
                    turned[node.op_type] = turned.get(node.op_type, 0) + 1
                    _to_identity(sub, node, source)
        notes = [f"{count} no-op {op}" for op, count in sorted(turned.items())]
        if state.options.keep_outputs is not None:
            notes.extend(self._keep_outputs(graph, state))
        removed = sum(_eliminate_identities(sub) for sub in list(all_graphs(graph)))
        RemoveUnusedNodesPass()(state.model)
        RemoveUnusedOpsetsPass()(state.model)
        if removed:
            notes.append(f"{removed} Identity removed")
        return PassOutcome(structure(state.model) != shape_before or bool(turned), notes,
                           {"no_op_rewritten": turned})

    @staticmethod
    def _keep_outputs(graph: ir.Graph, state: PipelineState) -> list[str]:
        wanted = state.options.keep_outputs or []
        names = [v.name for v in graph.outputs]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise OptionError(f"--keep-outputs: the model has no output {unknown[0]!r}",
                              hint=f"outputs: {', '.join(str(n) for n in names)}")
        dropped = [v for v in graph.outputs if v.name not in wanted]
        for value in dropped:
            graph.outputs.remove(value)
            state.signature_changes.append(f"output {value.name} dropped")
        return [f"dropped output {v.name}" for v in dropped]
