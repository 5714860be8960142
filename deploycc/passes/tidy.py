"""Tidy: target-neutral clean-up that leaves fewer nodes and no op the target lacks.

Exporters repeat themselves: TorchScript writes a Shape -> Gather -> Unsqueeze chain and a fresh
Constant per use, per layer; dynamo writes the same small constants many times. What onnxsim and
onnxslim do on real exports, done here on the IR, in place, without loading weights twice:

1. Constant nodes of the main graph become initializers (a Constant is a node to every runtime
   and to every count; an initializer is data). Subgraph constants stay: TensorRT's importer
   reads a branch's own initializers less reliably than its Constant nodes. Not in IR < 4
   models, where every initializer must also be a graph input.
2. Identical small initializers are merged (up to `DEDUP_MAX_ELEMENTS` elements: larger ones
   would be hashed in full, which for a model of real weights is a second read of all of them).
3. Small integer values that ONNX Runtime's symbolic shape inference knows to hold the same
   dims become one value (Shape(h)[0] of every layer is the input's batch); those it knows in
   full become initializers (Shape(h)[2] is 768 however dynamic the batch).
4. Common subexpressions are merged (onnx-ir's pass: same op, attributes and inputs; never a
   random op, never a node holding a subgraph).
5. onnxscript's rewrite rules that only ever make a node disappear or become a simpler node of an
   op the target has (`_rules`: Reshape/Unsqueeze/Transpose/Cast chains, a
   Reshape whose shape is known, successive Relu/Clip/Min/Max, Pad folded into Conv).

Shape values are merged from one symbolic inference (it sees every value's content at once; a
value read from an If or a Loop is not trusted), subexpressions to a fixed point up to `ROUNDS`;
then the rules run once, and what they made alike is merged again.
The whole-model verification checks the result like any pass's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from deploycc.pipeline.context import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    import onnx_ir as ir

ROUNDS = 4
DEDUP_MAX_ELEMENTS = 1024
CSE_MAX_ELEMENTS = 1024


def lift_constants(graph: ir.Graph) -> int:
    """Constant nodes holding a tensor (the fold pass writes every form as one) -> initializers."""
    import onnx_ir as ir

    lifted = 0
    for node in list(graph):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") \
                or set(node.attributes) != {"value"}:
            continue
        value = node.outputs[0]
        if value.is_graph_output() or not value.name or value.name in graph.initializers:
            continue
        tensor = node.attributes["value"].as_tensor()
        initializer = ir.Value(name=value.name, shape=ir.Shape(list(tensor.shape.numpy())),
                               type=ir.TensorType(tensor.dtype), const_value=tensor)
        graph.register_initializer(initializer)
        value.replace_all_uses_with(initializer)
        graph.remove(node, safe=True)
        lifted += 1
    return lifted


SHAPE_VALUE_MAX_ELEMENTS = 16
SLOW_INFERENCE_S = 2.0
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}


def symbolic_contents(model: ir.Model) -> dict[str, object]:
    """Value name -> what ONNX Runtime's symbolic shape inference knows the value holds, for the
    small integer tensors that carry shapes: a dim, a list of dims, sums and products of them
    ('batch', ['batch', 'sequence', 768], '12*sequence'). Weights stay out of it (onnx-ir's
    C-API helper hands it the graph without large initializers). Inference that stops part way
    keeps what it found: nodes are visited in order, so every value found is final.

    auto_merge assumes two symbolic dims a broadcast or an elementwise op meets are equal (a
    position table's Min(512, sequence) and sequence): where they are not, the original model
    itself fails on that input."""
    import logging

    from onnx_ir.passes.common._c_api_utils import call_onnx_api
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    def infer(proto) -> dict[str, object]:
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        quiet = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
        level, quiet.level = quiet.level, logging.ERROR
        try:
            inference._preprocess(proto)
            while inference.run_:
                inference._infer_impl()
        except Exception:  # an op it does not know: what it found before stands
            pass
        finally:
            quiet.level = level
        return dict(inference.sympy_data_)

    try:
        return call_onnx_api(infer, model)
    except Exception:
        return {}


def _content_key(content: object, rank: int) -> tuple | None:
    """A hashable, printable form of a value's symbolic content; None when it does not fit the
    value's rank or is not a small integer tensor's."""
    import numpy as np

    items = list(content) if isinstance(content, (list, tuple, np.ndarray)) else [content]
    if (rank == 1) != isinstance(content, (list, tuple, np.ndarray)) or rank > 1:
        return None
    if len(items) > SHAPE_VALUE_MAX_ELEMENTS:
        return None
    parts: list[int | str] = []
    for item in items:  # ints, or sympy expressions (onnxruntime's inference works in sympy)
        if isinstance(item, (int, np.integer)) or getattr(item, "is_Integer", False):
            parts.append(int(item))  # type: ignore[arg-type]
        elif getattr(item, "free_symbols", None):
            parts.append(str(item))
        else:
            return None
    return (rank, *parts)


def merge_equal_shape_values(model: ir.Model) -> tuple[int, int]:
    """Shape values whose content is known to be equal become one value; those fully known become
    initializers. Returns (merged, made constant). Of equal values the first in graph order stays:
    every reader of a later one comes after it, so the graph stays acyclic and sorted."""
    import numpy as np
    import onnx_ir as ir

    contents = symbolic_contents(model)
    if not contents:
        return 0, 0
    graph = model.graph
    first: dict[tuple, ir.Value] = {}
    merged = constant = 0
    # ORT's inference gives an If the shapes of one branch (Silero's `squeeze(0)` on the batch
    # size has branches of different rank): nothing read from a control-flow op is trusted.
    untrusted: set[int] = set()
    for node in list(graph):
        if node.op_type in CONTROL_FLOW or any(id(v) in untrusted for v in node.inputs if v is not None):
            untrusted.update(id(value) for value in node.outputs)
            continue
        for value in node.outputs:
            if value.name not in contents or value.is_graph_output() or value.shape is None \
                    or value.dtype not in (ir.DataType.INT64, ir.DataType.INT32) or not value.uses():
                continue
            key = _content_key(contents[value.name], value.shape.rank())
            if key is None:
                continue
            if all(isinstance(part, int) for part in key[1:]) and node.op_type != "Constant":
                if model.ir_version < 4:  # an IR-3 initializer must also be a graph input
                    continue
                array = np.array(key[1:], dtype=value.dtype.numpy())
                array = array.reshape(()) if key[0] == 0 else array
                name = f"{value.name}_known"
                while name in graph.initializers:
                    name += "_"
                known = ir.Value(name=name, shape=ir.Shape(list(array.shape)), type=value.type,
                                 const_value=ir.tensor(array, name=name))
                graph.register_initializer(known)
                value.replace_all_uses_with(known)
                constant += 1
                continue
            typed = (value.dtype, *key)
            if typed in first:
                value.replace_all_uses_with(first[typed])
                merged += 1
            else:
                first[typed] = value
    return merged, constant


def _rules(state: PipelineState) -> list:
    """onnxscript's rules whose results the target runs: each with the ops it may write."""
    from onnxscript.rewriter.rules import common

    candidates = [
        (common.cast_cast_rule, ("Cast",)), (common.no_op_cast_rule, ()),
        (common.no_op_expand_rule, ()), (common.no_op_transpose_rule, ()),
        (common.reshape_reshape_rule, ("Reshape",)), (common.unsqueeze_unsqueeze_rule, ("Unsqueeze",)),
        (common.transpose_transpose_rule, ("Transpose",)), (common.squeeze_reshape_1d_rule, ("Identity",)),
        (common.collapse_slice_rule, ("Slice",)), (common.collapse_slice2_rule, ("Slice",)),
        (common.materialize_reshape_shape_rule, ("Reshape",)),
        (common.successive_relu_rule, ("Relu",)), (common.successive_clip_rule, ("Clip",)),
        (common.successive_relu_clip_rule, ("Clip",)), (common.successive_clip_relu_rule, ("Clip",)),
        (common.min_min_rule, ("Min",)), (common.max_max_rule, ("Max",)),
        (common.min_max_rule, ("Clip",)), (common.max_min_rule, ("Clip",)),
        (common.fuse_pad_into_conv_rule, ("Conv",)),
    ]
    ops = state.target.ops
    rules = []
    for rule, writes in candidates:
        if all(op == "Identity" or ops.lookup("", op) for op in writes):
            rules.append(rule)
    return rules


class TidyPass(Pass):
    name = "tidy"
    summary = "lift constants, merge duplicate initializers and subexpressions, collapse op chains"

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import (
            CommonSubexpressionEliminationPass,
            DeduplicateInitializersPass,
            RemoveUnusedNodesPass,
        )
        from onnxscript.rewriter import RewritePass

        model = state.model
        before = len(model.graph)
        counts = {"lifted": 0, "rounds": 0, "shape_values_merged": 0, "shape_values_known": 0}

        slow = {"inference_s": 0.0}

        def merge() -> None:
            """Lift, deduplicate, merge shape values (one symbolic inference: it sees every value's
            content at once), then merge subexpressions to a fixed point."""
            if model.ir_version >= 4:
                counts["lifted"] += lift_constants(model.graph)
            DeduplicateInitializersPass(size_limit=DEDUP_MAX_ELEMENTS)(model)
            # Symbolic inference costs a serialization and, on images with dynamic height and
            # width, sympy work that grows with the depth (SSDlite: 17 s): only where shapes are
            # read, and a second time only when the first was quick.
            if any(node.op_type in ("Shape", "Size") for node in model.graph) \
                    and slow["inference_s"] < SLOW_INFERENCE_S:
                started = time.perf_counter()
                merged, known = merge_equal_shape_values(model)
                slow["inference_s"] += time.perf_counter() - started
                counts["shape_values_merged"] += merged
                counts["shape_values_known"] += known
            for _ in range(ROUNDS):
                counts["rounds"] += 1
                again = CommonSubexpressionEliminationPass(size_limit=CSE_MAX_ELEMENTS)(model).modified
                RemoveUnusedNodesPass()(model)
                if not again:
                    break

        merge()
        rules = _rules(state)
        # The chain rules once (each is linear in the graph, and ~20 of them are the pass's main
        # cost on a large graph); what they make alike is merged after them.
        if rules and RewritePass(rules)(model).modified:
            RemoveUnusedNodesPass()(model)
            merge()
        after = len(model.graph)
        notes = [f"{before - after} node(s) fewer"] if after != before else []
        if counts["lifted"]:
            notes.append(f"{counts['lifted']} Constant node(s) became initializers")
        if counts["shape_values_merged"] or counts["shape_values_known"]:
            notes.append(f"shape values: {counts['shape_values_merged']} merged with an equal one, "
                         f"{counts['shape_values_known']} known in full")
        return PassOutcome(after != before, notes, counts)
