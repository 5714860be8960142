"""Fold: evaluate what is constant (onnxscript's folder), including the Shape -> Gather ->
Unsqueeze -> Concat -> Reshape chains that become constant once the axes pass fixed the dims,
and the reads of static dims of partly dynamic shapes (read_static_dims), alternated with shape
inference until nothing more is read. IR-3 initializers listed as inputs count as constants.

The size of folded tensors is bounded *before* evaluation: onnxscript checks its output limit
after computing the value, so a 30-byte model whose ConstantOfShape asks for 10^12 elements
would allocate terabytes first. Ops whose output size follows from their constant inputs
(ConstantOfShape, Expand, Tile, Range) and nodes with a known output shape are sized up front.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploycc.passes.base import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

GROWING_OPS = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad",
               "OneHot", "EyeLike", "RandomNormal", "RandomUniform"}
NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli"}


def _const(value: ir.Value | None):
    from deploycc.graph.graphs import constant_tensor

    return constant_tensor(value, max_elements=64)


def _const_or_none(value: ir.Value) -> bool:
    import onnx_ir as ir

    return value.const_value is not None or ir.convenience.get_const_tensor(value) is not None


def _static_dims(value: ir.Value | None) -> list[int] | None:
    """A value's dims: a constant's own (its annotation may be a stale symbolic one that shape
    inference left on an initializer), else the annotation's when static."""
    if value is None:
        return None
    if value.const_value is not None:
        return [int(d) for d in value.const_value.shape.numpy()]
    if value.shape is None or not value.shape.is_static():
        return None
    return [int(d) for d in value.shape.numpy()]


def expected_elements(node: ir.Node) -> int | None:
    """How many elements the node would produce, when that is known without evaluating it."""
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            shape = _const(node.inputs[0])
            return None if shape is None else math.prod(int(d) for d in shape.reshape(-1))
        if op == "Expand":
            shape = _const(node.inputs[1])
            dims = _static_dims(node.inputs[0])
            if shape is None or dims is None:
                return None
            target = [int(d) for d in shape.reshape(-1)]
            width = max(len(dims), len(target))
            dims = [1] * (width - len(dims)) + dims
            target = [1] * (width - len(target)) + target
            return math.prod(max(a, b) for a, b in zip(dims, target, strict=True))
        if op == "Tile":
            repeats = _const(node.inputs[1])
            dims = _static_dims(node.inputs[0])
            if repeats is None or dims is None:
                return None
            return math.prod(dims) * math.prod(int(r) for r in repeats.reshape(-1))
        if op == "Range":
            bounds = [_const(v) for v in node.inputs[:3]]
            if any(b is None or b.size != 1 for b in bounds):
                return None
            start, limit, delta = (float(b.reshape(-1)[0]) for b in bounds)  # type: ignore[union-attr]
            return None if delta == 0 else max(0, math.ceil((limit - start) / delta))
    except (ValueError, TypeError, OverflowError):
        return None
    total = 0
    for value in node.outputs:
        if value.shape is None or not value.shape.is_static():
            return None
        total += math.prod(value.shape.numpy())
    return total


def _casts_non_finite_to_integer(node: ir.Node) -> bool:
    """Cast of inf or NaN to an integer type is undefined in ONNX: folding it bakes whatever numpy
    returns (INT64_MIN for T5's log(0) of the relative-position buckets) into a constant, which
    a TensorRT target then refuses as out of int32. Left to run, the value is never selected."""
    import numpy as np
    import onnx_ir as ir

    if node.op_type != "Cast" or not node.inputs or node.inputs[0] is None:
        return False
    to = node.attributes.get_int("to", None)
    if to is None or not ir.DataType(to).is_integer():
        return False
    tensor = node.inputs[0].const_value
    if tensor is None or not ir.DataType(tensor.dtype).is_floating_point():
        return False
    return not bool(np.isfinite(tensor.numpy()).all())


def size_guard(limit_elements: int):
    from deploycc.graph.graphs import reaches_graph_output

    def should_fold(node: ir.Node) -> bool | None:
        if node.op_type in NEVER_FOLD or _casts_non_finite_to_integer(node):
            return False
        elements = expected_elements(node)
        if elements is not None and elements > limit_elements:
            return False
        if elements is None and node.op_type in GROWING_OPS and all(
                v is None or _const_or_none(v) for v in node.inputs):
            return False  # constant inputs, yet no size: it could grow without bound, leave it
        if node.op_type == "ConstantOfShape" and elements == 0 and reaches_graph_output(node.outputs[0]):
            return False  # the empty-constant-of-shape rule's form (OpenVINO misreads the folded one)
        if node.op_type == "ConstantOfShape" and elements is not None and elements <= SMALL_GROWTH_ELEMENTS:
            # onnxscript leaves every ConstantOfShape (it could be large); a few elements of
            # shape arithmetic (the zeros torch's F.pad appends to its pads) fold like the rest.
            return True
        # Otherwise the folder's own rules apply (it cannot fold non-constant inputs anyway).
        return None

    return should_fold


# Constant's scalar and list forms, and the dtype their value takes as a tensor.
CONSTANT_FORMS = {"value_int": "int64", "value_ints": "int64", "value_float": "float32",
                  "value_floats": "float32"}


def constant_as_tensor(node: ir.Node) -> bool:
    """A Constant holding value_int(s)/value_float(s) (the folder writes small results so)
    holds the same as a `value` tensor: those forms do not exist before opset 12, OpenVINO's
    frontend fails on them ("Conversion failed for Constant-11"), and TensorRT 8.x's importer reads
    them as floats (onnx-tensorrt's Constant importer at release/8.2-GA to 8.6-GA)."""
    import numpy as np
    import onnx_ir as ir

    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return False
    form = next((name for name in CONSTANT_FORMS if name in node.attributes), None)
    if form is None:
        return False
    value = node.attributes.pop(form).value
    tensor = ir.tensor(np.asarray(value, dtype=CONSTANT_FORMS[form]))
    node.attributes["value"] = ir.AttrTensor("value", tensor)
    return True


FOLD_ROUNDS = 8
SMALL_GROWTH_ELEMENTS = 4096  # Swin-T's shifted-window mask is built on a 56 x 56 ConstantOfShape


def _nodes_and_branches(body: ir.Graph) -> list[ir.Node]:
    """The body's nodes and those of its If branches, nested or not."""
    from deploycc.graph.graphs import subgraphs_of

    # If branches too: silero-vad asks for its spectrogram's rank inside each sample-rate
    # branch (Shape(Shape(x)) == 2), which shape inference knows there. Not Loop or Scan
    # bodies, whose carried values may change shape from one iteration to the next.
    found = []
    for node in body:
        found.append(node)
        if node.op_type == "If":
            for branch in subgraphs_of(node):
                found += _nodes_and_branches(branch)
    return found


def _static_read(node: ir.Node) -> np.ndarray | None:
    """What a Shape, or a Gather of a Shape in the same graph, produces, where every dim it reads
    is static; else None."""
    import numpy as np

    source = node if node.op_type == "Shape" else node.inputs[0].producer() if node.inputs[0] else None
    if source is None or source.op_type != "Shape" or source.graph is not node.graph or not source.inputs:
        return None
    x = source.inputs[0]
    if x is None or x.shape is None:
        return None
    start = source.attributes.get_int("start", 0)
    end = source.attributes.get_int("end", None)
    # Plain lists: numpy would unpack a symbolic dim's name into characters.
    dims = [d if isinstance(d, int) else None for d in x.shape][start:end]
    if node.op_type == "Shape":
        picked, form = dims, (len(dims),)
    else:
        index = _const(node.inputs[1]) if len(node.inputs) > 1 else None
        if index is None or node.attributes.get_int("axis", 0) != 0 or index.ndim > 1:
            return None
        positions = [int(i) for i in index.reshape(-1)]
        if not all(-len(dims) <= i < len(dims) for i in positions):
            return None
        picked, form = [dims[i] for i in positions], tuple(index.shape)
    if not all(isinstance(d, int) for d in picked):
        return None
    return np.array(picked, dtype=np.int64).reshape(form)


def _replace_with_initializer(graph: ir.Graph, output: ir.Value, known: np.ndarray) -> None:
    """Every use of `output` reads a new initializer of `graph` holding `known` instead."""
    import onnx_ir as ir

    name = f"{output.name}_static"
    while name in graph.initializers:
        name += "_"
    value = ir.Value(name=name, shape=ir.Shape(list(known.shape)), type=ir.TensorType(ir.DataType.INT64),
                     const_value=ir.tensor(known, name=name))
    graph.register_initializer(value)
    output.replace_all_uses_with(value)


def read_static_dims(model: ir.Model, *, infer: bool = True) -> int:
    """Shape(x) and Gather(Shape(x), i) whose dims are static, however dynamic the rest of x is,
    become constants (onnxscript's folder does this for a 1-D index only; TorchScript writes
    x.shape[1] with a scalar one). Shapes are inferred first (`infer`): a Pad whose pads just
    folded has a static width only then, which a Swin window partition reads in turn, so the fold
    pass alternates the two until nothing more is read. Returns how many reads were replaced."""
    from deploycc.graph.shapes import infer_shapes

    if model.ir_version < 4:  # an IR-3 initializer must also be a graph input
        return 0
    nodes = _nodes_and_branches(model.graph)
    if not any(node.op_type == "Shape" for node in nodes):
        return 0  # nothing to read: spare the shape inference (a full serialization)
    if infer:
        infer_shapes(model)
    replaced = 0
    # A constant read in a branch goes to the main graph, whose initializers every branch sees.
    for node in nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Gather"):
            continue
        output = node.outputs[0]
        if output.is_graph_output() or not output.uses():
            continue
        known = _static_read(node)
        if known is None:
            continue
        _replace_with_initializer(model.graph, output, known)
        replaced += 1
    return replaced


def constants_not_inputs(model: ir.Model) -> bool:
    """IR < 4 lists every initializer as a graph input too (the ONNX model zoo's classics): a
    feed could replace it, so no folder or fusion may read it as a constant. Nobody feeds a
    ResNet's weights; onnxsim and onnxslim take them as constants, and so does deploycc,
    writing the model as IR 4, where an initializer need not be an input."""
    from onnx_ir.passes.common import RemoveInitializersFromInputsPass

    graph = model.graph
    if model.ir_version >= 4 or not any(value.name in graph.initializers for value in graph.inputs):
        return False
    RemoveInitializersFromInputsPass()(model)
    model.ir_version = 4
    return True


def split_constants(model: ir.Model, limit_elements: int) -> int:
    """Split of a constant into constants: onnxscript's folder skips every node with several
    outputs (RAFT's coordinate grid is split so, and the arithmetic after it folds only then).
    Sizes from the `split` input or attribute, else equal parts (from opset 18 the last one
    smaller). Returns the Splits folded."""
    import numpy as np

    from deploycc.graph.graphs import all_graphs

    opset = model.opset_imports.get("", 1)
    folded = 0
    for graph in all_graphs(model.graph):
        for node in list(graph):
            data = node.inputs[0].const_value if node.op_type == "Split" and node.domain in ("", "ai.onnx") \
                and node.inputs and node.inputs[0] is not None else None
            if data is None or data.size > limit_elements or any(v.is_graph_output() for v in node.outputs):
                continue
            array = data.numpy()
            axis = node.attributes.get_int("axis", 0)
            if not -array.ndim <= axis < array.ndim:
                continue
            length, count = array.shape[axis], len(node.outputs)
            given = node.inputs[1] if len(node.inputs) > 1 else None
            if given is not None:
                if given.const_value is None:
                    continue
                sizes = [int(v) for v in given.const_value.numpy().reshape(-1)]
            elif "split" in node.attributes:
                sizes = list(node.attributes.get_ints("split") or [])
            elif length % count == 0 or opset >= 18:
                chunk = -(-length // count)
                sizes = [chunk] * (count - 1) + [length - chunk * (count - 1)]
            else:
                continue
            if len(sizes) != count or sum(sizes) != length or min(sizes) < 0:
                continue
            _replace_with_constants(graph, node, np.split(array, np.cumsum(sizes)[:-1], axis=axis))
            folded += 1
    return folded


def _replace_with_constants(graph: ir.Graph, node: ir.Node, arrays: list) -> None:
    """The node's outputs become initializers holding `arrays`, and the node goes."""
    import numpy as np
    import onnx_ir as ir

    for index, (value, array) in enumerate(zip(node.outputs, arrays, strict=True)):
        constant = ir.Value(name=f"{value.name or node.name}_folded_{index}",
                            const_value=ir.tensor(np.ascontiguousarray(array)))
        graph.register_initializer(constant)
        value.replace_all_uses_with(constant)
    graph.remove(node, safe=True)


def gather_elements_constants(model: ir.Model, limit_elements: int) -> int:
    """GatherElements of constant data at constant indices into a constant: onnxscript evaluates it
    with onnx's reference implementation, which fails when the gathered axis has more than 32 rows
    (numpy.choose's limit), so Funnel's relative-position table (64 x 64, axis 0) stayed a
    computation, and OpenVINO 2026.4 then computed the Einsum that reads it wrongly. Returns the
    nodes folded."""
    import numpy as np

    from deploycc.graph.graphs import all_graphs

    folded = 0
    for graph in all_graphs(model.graph):
        for node in list(graph):
            if node.op_type != "GatherElements" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
                continue
            data, indices = (value.const_value if value is not None else None for value in node.inputs[:2])
            if data is None or indices is None or node.outputs[0].is_graph_output():
                continue
            if data.size > limit_elements or indices.size > limit_elements:
                continue
            array, where = data.numpy(), indices.numpy().astype(np.int64)
            axis = node.attributes.get_int("axis", 0)
            if array.ndim != where.ndim or not -array.ndim <= axis < array.ndim:
                continue
            length = array.shape[axis]
            if where.size and (where.min() < -length or where.max() >= length):
                continue  # out of range: the runtime's error to report, not the folder's
            axis %= array.ndim
            if any(w > a for i, (w, a) in enumerate(zip(where.shape, array.shape, strict=True)) if i != axis):
                continue
            # take_along_axis wants the other axes equal; GatherElements lets indices be smaller there
            ranges = tuple(slice(0, w) if i != axis else slice(None) for i, w in enumerate(where.shape))
            positive = np.where(where < 0, where + length, where)
            _replace_with_constants(graph, node, [np.take_along_axis(array[ranges], positive, axis=axis)])
            folded += 1
    return folded


@dataclass
class _FoldCounts:
    """What the fold rounds did, kept as they go: a round that fails leaves the earlier ones'."""

    rounds: int = 0  # rounds in which onnxscript's folder returned
    folder_modified: bool = False
    read: int = 0
    split: int = 0
    gathered: int = 0


def _fold_rounds(model: ir.Model, limit_elements: int, counts: _FoldCounts) -> None:
    """Fold, split and gather constants and read static dims, until a round finds nothing new to
    read, split or gather (at most FOLD_ROUNDS)."""
    from onnxscript.optimizer import fold_constants

    # The first round reads the shapes onnx infers for the whole model; later ones
    # those the folder infers node by node as it goes (onnx_shape_inference), so that
    # a chain of blocks each reading its input's dims is read in one round, not one
    # block a round (DaViT: 13 whole-model inferences and 8 s, now 3 and 4 s).
    for round_ in range(FOLD_ROUNDS):
        folded = fold_constants(model, input_size_limit=limit_elements,
                                output_size_limit=limit_elements,
                                should_fold=size_guard(limit_elements),
                                onnx_shape_inference=round_ > 0)
        counts.rounds += 1
        counts.folder_modified = counts.folder_modified or folded.modified
        splits = split_constants(model, limit_elements)
        gathers = gather_elements_constants(model, limit_elements)
        reading = read_static_dims(model, infer=round_ == 0)
        counts.read += reading
        counts.split += splits
        counts.gathered += gathers
        if not reading + splits + gathers:
            break


def _castlikes_with_saturate(model: ir.Model) -> list[ir.Node]:
    """onnxscript's folder turns CastLike into Cast and drops `saturate` (found by `deploycc
    probe`: float8 casts with saturate=0 came out saturating): the nodes to hide from it."""
    from deploycc.graph.graphs import all_graphs

    return [node for graph in all_graphs(model.graph) for node in graph
            if node.op_type == "CastLike" and node.domain in ("", "ai.onnx")
            and "saturate" in node.attributes]


def _restore_declared_outputs(graph: ir.Graph,
                              declared: list[tuple[ir.TypeProtocol | None, ir.Shape | None]]) -> None:
    """Graph outputs left without a type or shape get back the ones declared before folding."""
    for value, (type_, shape) in zip(graph.outputs, declared, strict=True):
        # An inlined If hands its outputs to branch values that carry no type of their own.
        value.type = value.type or type_
        value.shape = value.shape or shape


def _fold_notes(nodes_folded: int, counts: _FoldCounts) -> list[str]:
    notes = [f"folded {nodes_folded} node(s)"] if nodes_folded else []
    notes += [f"{counts.read} read(s) of static dims became constants"] if counts.read else []
    notes += [f"{counts.split} Split(s) of a constant became constants"] if counts.split else []
    notes += [f"{counts.gathered} GatherElements of constants became constants"] if counts.gathered else []
    return notes


class FoldPass(Pass):
    name = "fold"
    summary = "fold constant subgraphs (size-bounded before evaluation); Constant nodes become initializers"

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import LiftConstantsToInitializersPass, RemoveUnusedNodesPass

        from deploycc.graph.graphs import all_graphs, forget_discarded_readers, structure
        from deploycc.graph.held_back import held_back
        from deploycc.passes.branches import keep_runnable_branches

        limit_elements = max(1, state.options.fold_limit_bytes // 4)
        before = len(state.model.graph)
        notes: list[str] = []
        modified = constants_not_inputs(state.model)
        if modified:
            notes.append("IR 3: initializers listed as graph inputs are constants (now IR 4)")
        held = _castlikes_with_saturate(state.model)
        graph = state.model.graph
        declared = [(value.type, value.shape) for value in graph.outputs]
        branch_notes = keep_runnable_branches(state.model, state.judged_branches)
        notes += branch_notes
        counts = _FoldCounts()
        shape_before = structure(state.model)
        try:
            with held_back(state.model, held):
                _fold_rounds(state.model, limit_elements, counts)
        except Exception as error:
            # onnxscript's folder fails on some nodes (SplitToSequence with a scalar split, found by
            # `deploycc probe`). It rewrites one node at a time in order and stops at the failing one,
            # so what it folded before stands; the rest stays as it was, and verification checks all.
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            notes.append(f"constant folding stopped early: {first[:160]}")
        modified = modified or counts.folder_modified or (counts.rounds > 0 and bool(branch_notes))
        _restore_declared_outputs(graph, declared)
        forget_discarded_readers(state.model.graph)  # the branches of the Ifs that folded
        RemoveUnusedNodesPass()(state.model)
        LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=16)(state.model)
        rewritten = sum(constant_as_tensor(node) for graph in all_graphs(state.model.graph) for node in graph)
        modified = modified or bool(rewritten)
        after = len(state.model.graph)
        notes += _fold_notes(before - after, counts)
        modified = modified or bool(counts.read or counts.split or counts.gathered) \
            or structure(state.model) != shape_before
        return PassOutcome(modified or before != after, notes,
                           {"limit_bytes": state.options.fold_limit_bytes})


class RefoldPass(FoldPass):
    """Tidy turns shape values into constants (Shape(h)[2] is 768 however dynamic the batch);
    what reads them (Range, Expand, Where, Mod on shapes: a Swin window's mask) folds only then."""

    name = "refold"
    summary = "fold again what tidy made constant"


class BodyFoldPass(FoldPass):
    """ONNX function bodies the legalize pass expanded are written for any shape: their
    Shape/Concat arithmetic folds here (OpenVINO's Scan cannot read an outer value computed at
    run time; a constant it can). Runs only after a function-body rewrite."""

    name = "fold-bodies"
    summary = "fold the shape arithmetic of the ONNX function bodies legalize expanded"

    def run(self, state: PipelineState) -> PassOutcome:
        if not any(rewrite.rule.startswith("function-body") for rewrite in state.rewrites):
            return PassOutcome(False)
        return super().run(state)
