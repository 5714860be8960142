"""Tidy: target-neutral clean-up that leaves fewer nodes and no op the target lacks.

Exporters repeat themselves: TorchScript writes a Shape -> Gather -> Unsqueeze chain and a fresh
Constant per use, per layer; dynamo writes the same small constants many times. What onnxsim and
onnxslim do on real exports, done here on the IR, in place, without loading weights twice:

1. Constant nodes become initializers (a Constant is a node to every runtime and to every count;
   an initializer is data); an If/Loop body's too, except for an engine whose importer is not
   known to read a branch's own initializers (TensorRT). Not in IR < 4 models, where every
   initializer must also be a graph input.
2. Identical small initializers are merged (up to `DEDUP_MAX_ELEMENTS` elements: larger ones
   would be hashed in full, which for a model of real weights is a second read of all of them).
3. Small integer values that ONNX Runtime's symbolic shape inference knows to hold the same
   dims become one value (Shape(h)[0] of every layer is the input's batch); those it knows in
   full become initializers (Shape(h)[2] is 768 however dynamic the batch): shape_values.py.
4. Common subexpressions are merged (onnx-ir's pass: same op, attributes and inputs; never a
   random op, never a node holding a subgraph).
5. A Concat read only by Concats on its axis is spliced into them; a Slice of a Slice on other
   axes is one Slice, for every reader of the inner one; MatMuls reading one input with constant
   weights of their own (Q, K, V) become one MatMul and a Split (passes/merge.py), where the
   target's engine runs that faster (`merged_projections_pay`: not OpenVINO's CPU plugin); a recurrent
   op's all-zero initial state is left out, as the spec then assumes it (passes/rnn_state.py).
6. onnxscript's rewrite rules that only ever make a node disappear or become a simpler node of an
   op the target has (`_rules`: Reshape/Unsqueeze/Transpose/Cast chains, a
   Reshape whose output shape inference knows, never from a graph output's declared shape,
   successive Relu/Clip/Min/Max, Pad folded into Conv), and ours: HardSwish written out becomes
   one node.

Each step and rule has a name that `--disable-rule` takes and blame reports (`rule_names`).

Subexpressions and shape values are merged to a fixed point (up to `ROUNDS`: merged chains make
their readers alike, and let ORT's inference name more dims alike); then the rules run once, and
what they made alike is merged again.
The whole-model verification checks the result like any pass's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploycc.passes.base import Pass, PassOutcome, PipelineState
from deploycc.passes.merge import (
    inline_concat_of_concat,
    merge_sibling_matmuls,
    merge_slice_chains,
    slice_adjacent_dims,
)
from deploycc.passes.rnn_state import drop_zero_initial_states
from deploycc.passes.shape_values import merge_equal_shape_values

if TYPE_CHECKING:
    from collections.abc import Callable

    import onnx_ir as ir

    MergeStep = tuple[str, Callable[[ir.Graph], int]]  # (the count it keeps, the step)

ROUNDS = 4
DEDUP_MAX_ELEMENTS = 1024
CSE_MAX_ELEMENTS = 1024
SLOW_INFERENCE_S = 2.0  # symbolic inference again only while the time it took stays below this


def lift_constants(graph: ir.Graph, subgraphs: bool = False) -> int:
    """Constant nodes holding a tensor (the fold pass writes every form as one) -> initializers,
    of the main graph, and of If/Loop bodies too with `subgraphs`."""
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    if subgraphs:
        return sum(lift_constants(sub) for sub in list(all_graphs(graph)))
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


def one_unknown_reshape_dim(graph: ir.Graph) -> int:
    """Reshape(x, Concat(constants..., d, constants...)) with d the one entry computed at run
    time (one element): the shape becomes a constant with -1 for d, since with one unknown the
    element count fixes it (PP-OCR's attention neck writes [0, d, 3, 8, 15] from x's shape).
    Declines where a constant is already -1, and where `allowzero` is set. The one case that
    reads differently is a tensor with no elements (0/0 has no answer; ONNX Runtime refuses it).
    The chain that computed d is then dead. Returns the Reshapes changed."""
    import numpy as np
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    changed = 0
    for sub in all_graphs(graph):
        for node in list(sub):
            if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
                continue
            shape = node.inputs[1]
            concat = shape.producer() if shape is not None else None
            if concat is None or concat.op_type != "Concat" or node.attributes.get_int("allowzero"):
                continue
            parts, unknown = [], 0
            for value in concat.inputs:
                tensor = value.const_value if value is not None else None
                if tensor is not None:
                    parts.append(tensor.numpy().reshape(-1).astype(np.int64))
                elif value is not None and value.shape is not None and list(value.shape) == [1] \
                        and value.dtype == ir.DataType.INT64:
                    parts.append(np.array([-1], np.int64))
                    unknown += 1
                else:
                    unknown = 2
                    break
            if unknown != 1 or sum(int((part == -1).sum()) for part in parts) != 1:
                continue
            constant = ir.Value(name=f"{node.name or 'reshape'}_shape_{changed}",
                                const_value=ir.tensor(np.concatenate(parts)))
            sub.register_initializer(constant)
            node.replace_input_with(1, constant)
            changed += 1
    return changed


def _known_reshape_rules() -> list:
    """Reshape(x, computed shape) -> Reshape(x, constant) where inference knows the output's shape
    with at most one symbolic dim (-1 for it): onnxscript's MaterializeReshapeShape, with two
    guards it lacks. A graph output's shape is the exporter's declaration, not inference, and can
    be wrong (ddddocr's recognizer declares [1, seqlen] for an output of rank 3): such a Reshape
    stays. And the shape input's own length must equal the rank that is materialized."""
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    class KnownReshapeShape(pattern.RewriteRuleClassBase):
        def pattern(self, op, data, shape):
            return op.Reshape(data, shape, _outputs=["reshaped"])

        def check(self, context, data, shape, reshaped) -> MatchResult:
            result = MatchResult()
            if shape.const_value is not None:
                return result.fail("the shape is already a constant")
            if reshaped.is_graph_output():
                return result.fail("a graph output's shape is declared, not inferred")
            if reshaped.shape is None or shape.shape is None or list(shape.shape) != [len(reshaped.shape)]:
                return result.fail("the output's rank is not the length of the shape it is given")
            if sum(1 for dim in reshaped.shape if not isinstance(dim, int)) > 1:
                return result.fail("more than one symbolic dim")
            return result

        def rewrite(self, op, data, shape, reshaped):
            import onnx_ir as ir

            dims = [dim if isinstance(dim, int) else -1 for dim in reshaped.shape]
            # allowzero: a 0 inferred is a dim of size 0, not "copy the input's"
            return op.Reshape(data, op.initializer(ir.tensor(dims, dtype=ir.DataType.INT64),
                                                   name=f"{reshaped.name}_shape"), allowzero=1)

    return [KnownReshapeShape.rule()]


def _hard_swish_rules(as_hard_sigmoid: bool) -> list:
    """x * clip(x + 3, 0, 6) / 6, HardSwish written out in four elementwise ops (PaddlePaddle's
    exports): HardSwish(x) where the opset has it (14) and the target runs it; else, for a runtime
    that does not fuse the written-out form itself, x * HardSigmoid(x, 1/6, 1/2), the two kernels
    ONNX Runtime's CPU EP runs for HardSwish too (it has no kernel of its own for it): PP-LCNet's
    layout model 521 -> 333 nodes, 5% faster on ORT. OpenVINO 2026.4 fuses the written-out form
    into its HSwish and not the HardSigmoid one (3.2x slower), so there it stays below 14. Each
    constant must be exactly what it says."""
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    def equals(value, number: float) -> bool:
        tensor = value.const_value if value is not None else None
        return tensor is not None and tensor.size == 1 and float(tensor.numpy().reshape(-1)[0]) == number

    class HardSwishWrittenOut(pattern.RewriteRuleClassBase):
        divide_last = True

        def pattern(self, op, x, three, low, high, six):
            gate = op.Clip(op.Add(x, three), low, high)
            return op.Div(op.Mul(x, gate), six) if self.divide_last else op.Mul(x, op.Div(gate, six))

        def check(self, context, x, three, low, high, six) -> MatchResult:
            result = MatchResult()
            if not (equals(three, 3.0) and equals(low, 0.0) and equals(high, 6.0) and equals(six, 6.0)):
                return result.fail("the constants are not 3, 0, 6 and 6")
            if x.dtype is None or not x.dtype.is_floating_point():
                return result.fail("a floating-point input is needed")
            return result

        def rewrite(self, op, x, three, low, high, six):
            if as_hard_sigmoid:
                return op.Mul(x, op.HardSigmoid(x, alpha=1.0 / 6.0, beta=0.5))
            return op.HardSwish(x)

    class HardSwishDividedFirst(HardSwishWrittenOut):
        divide_last = False

    return [variant for rule in (HardSwishWrittenOut, HardSwishDividedFirst)
            for variant in rule.rule().commute()]


def _rules(state: PipelineState) -> list:
    """onnxscript's rules whose results the target runs: each with the ops it may write and the
    opset from which the form it writes exists (Clip's bounds became inputs in 11; the Reshape
    they write carries `allowzero`, born in 14, taken off again where it means nothing)."""
    from onnxscript.rewriter.rules import common

    candidates = [
        (common.cast_cast_rule, ("Cast",), 1), (common.no_op_cast_rule, (), 1),
        (common.no_op_expand_rule, (), 1), (common.no_op_transpose_rule, (), 1),
        (common.reshape_reshape_rule, ("Reshape",), 5), (common.unsqueeze_unsqueeze_rule, ("Unsqueeze",), 13),
        (common.transpose_transpose_rule, ("Transpose",), 1),
        (common.squeeze_reshape_1d_rule, ("Identity",), 1),
        (common.collapse_slice_rule, ("Slice",), 10), (common.collapse_slice2_rule, ("Slice",), 10),
        (common.successive_relu_rule, ("Relu",), 1), (common.successive_clip_rule, ("Clip",), 11),
        (common.successive_relu_clip_rule, ("Clip",), 11), (common.successive_clip_relu_rule, ("Clip",), 11),
        (common.min_min_rule, ("Min",), 1), (common.max_max_rule, ("Max",), 1),
        (common.min_max_rule, ("Clip",), 11), (common.max_min_rule, ("Clip",), 11),
        (common.fuse_pad_into_conv_rule, ("Conv",), 11),
    ]
    candidates += [(rule, ("Reshape",), 5) for rule in _known_reshape_rules()]
    ops, opset = state.target.ops, state.opsets.get("", 1)
    if opset >= 14 and ops.lookup("", "HardSwish"):
        candidates += [(rule, ("HardSwish",), 14) for rule in _hard_swish_rules(as_hard_sigmoid=False)]
    elif not state.target.backend.fuses_written_out_activations:
        candidates += [(rule, ("HardSigmoid", "Mul"), 11) for rule in _hard_swish_rules(as_hard_sigmoid=True)]
    return [rule for rule, writes, born in candidates
            if opset >= born and all(op == "Identity" or ops.lookup("", op) for op in writes)
            and rule.name not in state.options.disable_rules]


def _allowzero_before_14(model: ir.Model) -> None:
    """onnxscript's materialized Reshape says allowzero=1; before opset 14 Reshape has no such
    attribute, and with no 0 in its constant shape the attribute means nothing anyway."""
    from deploycc.graph.graphs import all_nodes, constant_tensor

    if model.opset_imports.get("", 14) >= 14:
        return
    for node in all_nodes(model.graph):
        if node.op_type != "Reshape" or node.attributes.get_int("allowzero", 0) != 1 or len(node.inputs) < 2:
            continue
        shape = constant_tensor(node.inputs[1], max_elements=64)
        if shape is not None and not (shape == 0).any():
            node.attributes.pop("allowzero")


# tidy's own steps, by the names `--disable-rule` and blame know them by, in the order they run
ONE_UNKNOWN_RESHAPE_DIM, SHAPE_VALUES = "one-unknown-reshape-dim", "shape-values"
CONCAT_OF_CONCAT, SIBLING_MATMULS = "concat-of-concat", "sibling-matmuls"
SLICE_OF_SLICE, ZERO_INITIAL_STATE = "slice-of-slice", "zero-initial-state"
ADJACENT_DIMS = "adjacent-dims"
OWN_STEPS = (ONE_UNKNOWN_RESHAPE_DIM, SHAPE_VALUES, CONCAT_OF_CONCAT, SIBLING_MATMULS, SLICE_OF_SLICE,
             ZERO_INITIAL_STATE, ADJACENT_DIMS)


def _merge_steps(state: PipelineState) -> list[MergeStep]:
    """The merges of tidy's own that the options leave on and the opset and the target allow."""
    opset, ops = state.model.opset_imports.get("", 1), state.target.ops
    # tidy's own merges, in the order they run each round: (name, count kept, step, whether
    # the opset and the target have what it writes)
    return [(counter, step) for name, counter, step, possible in (
        (CONCAT_OF_CONCAT, "concats_spliced", inline_concat_of_concat, True),
        (ZERO_INITIAL_STATE, "zero_states_left_out", drop_zero_initial_states, True),
        (SLICE_OF_SLICE, "slices_merged", merge_slice_chains, opset >= 10),
        (ADJACENT_DIMS, "dims_read_as_one", slice_adjacent_dims,
         opset >= 10 and bool(ops.lookup("", "Slice"))),
        (SIBLING_MATMULS, "matmuls_merged", lambda graph: merge_sibling_matmuls(graph, opset),
         bool(ops.lookup("", "Split")) and state.target.backend.merged_projections_pay),
    ) if possible and name not in state.options.disable_rules]


@dataclass
class _Merger:
    """tidy's merges over one model, each call to a fixed point; `counts` and the time symbolic
    inference took add up over the calls."""

    model: ir.Model
    skip: set[str]
    steps: list[MergeStep]
    lift_branches: bool
    counts: dict[str, int]
    inference_s: float = 0.0

    def merge(self) -> None:
        """Lift and deduplicate, then merge subexpressions and shape values to a fixed point:
        ORT's inference names more dims alike once chains computing them are one."""
        from onnx_ir.passes.common import DeduplicateInitializersPass, RemoveUnusedNodesPass

        if self.model.ir_version >= 4:
            self.counts["lifted"] += lift_constants(self.model.graph, subgraphs=self.lift_branches)
        DeduplicateInitializersPass(size_limit=DEDUP_MAX_ELEMENTS)(self.model)
        reads_shapes = any(node.op_type in ("Shape", "Size") for node in self.model.graph)
        for _ in range(ROUNDS):
            self.counts["rounds"] += 1
            again = self._merge_round(reads_shapes)
            RemoveUnusedNodesPass()(self.model)
            if not again:
                break

    def _merge_round(self, reads_shapes: bool) -> bool:
        """One round of every merge; whether any of them changed the graph."""
        from onnx_ir.passes.common import CommonSubexpressionEliminationPass

        again = CommonSubexpressionEliminationPass(size_limit=CSE_MAX_ELEMENTS)(self.model).modified
        if ONE_UNKNOWN_RESHAPE_DIM not in self.skip:
            self.counts["reshapes_known"] += one_unknown_reshape_dim(self.model.graph)
        for counter, step in self.steps:
            merged_here = step(self.model.graph)
            self.counts[counter] += merged_here
            again |= bool(merged_here)
        # Symbolic inference costs a serialization and, on images with dynamic height and
        # width, sympy work that grows with the depth (SSDlite: 7 s a time): only where
        # shapes are read, and again only while it is quick.
        if reads_shapes and self.inference_s < SLOW_INFERENCE_S and SHAPE_VALUES not in self.skip:
            again |= self._merge_shape_values()
        return again

    def _merge_shape_values(self) -> bool:
        """shape_values.py's merge, timed; whether it merged or made known any value."""
        started = time.perf_counter()
        merged, known = merge_equal_shape_values(self.model)
        self.inference_s += time.perf_counter() - started
        self.counts["shape_values_merged"] += merged
        self.counts["shape_values_known"] += known
        return bool(merged or known)


def _rewrite_chains(model: ir.Model, rules: list) -> bool:
    """The chain rules once, and what a model below the newest opset then needs; whether they
    changed the model."""
    from onnx.defs import onnx_opset_version as onnx_defs_version
    from onnx_ir.passes.common import RemoveUnusedNodesPass
    from onnxscript.rewriter import RewritePass

    from deploycc.passes.opset_meaning import drop_stale_attributes

    if not RewritePass(rules)(model).modified:
        return False
    newest = onnx_defs_version()
    if model.opset_imports.get("", newest) < newest:
        _allowzero_before_14(model)
        drop_stale_attributes(model, newest, model.opset_imports[""])
    RemoveUnusedNodesPass()(model)
    return True


def _notes(nodes_removed: int, counts: dict[str, int]) -> list[str]:
    notes = [f"{nodes_removed} node(s) fewer"] if nodes_removed else []
    if counts["lifted"]:
        notes.append(f"{counts['lifted']} Constant node(s) became initializers")
    if counts["shape_values_merged"] or counts["shape_values_known"]:
        notes.append(f"shape values: {counts['shape_values_merged']} merged with an equal one, "
                     f"{counts['shape_values_known']} known in full")
    if counts["reshapes_known"]:
        notes.append(f"{counts['reshapes_known']} Reshape shape(s) made constant (-1 computed)")
    if counts["concats_spliced"]:
        notes.append(f"{counts['concats_spliced']} Concat(s) spliced into the Concat reading them")
    if counts["matmuls_merged"]:
        notes.append(f"{counts['matmuls_merged']} MatMul(s) merged into a sibling reading the same input")
    if counts["zero_states_left_out"]:
        notes.append(f"{counts['zero_states_left_out']} all-zero recurrent state input(s) left out")
    if counts["dims_read_as_one"]:
        notes.append(f"{counts['dims_read_as_one']} node(s) fewer: adjacent dims of a shape read "
                     "as one Slice")
    if counts["slices_merged"]:
        notes.append(f"{counts['slices_merged']} Slice(s) of a Slice on other axes merged")
    return notes


class TidyPass(Pass):
    name = "tidy"
    summary = ("lift constants, merge duplicate initializers and subexpressions, collapse op chains, "
               "splice Concat of Concat, merge Slice chains and MatMuls of one input, leave out zero "
               "recurrent states")

    def rule_names(self, state: PipelineState) -> list[str]:
        return [*OWN_STEPS, *dict.fromkeys(rule.name for rule in _rules(state))]

    def run(self, state: PipelineState) -> PassOutcome:
        from deploycc.graph.graphs import structure

        model = state.model
        before, shape_before = len(model.graph), structure(model)
        counts = {"lifted": 0, "rounds": 0, "shape_values_merged": 0, "shape_values_known": 0,
                  "reshapes_known": 0, "concats_spliced": 0, "matmuls_merged": 0, "slices_merged": 0,
                  "zero_states_left_out": 0, "dims_read_as_one": 0}
        merger = _Merger(model, set(state.options.disable_rules), _merge_steps(state),
                         state.target.backend.subgraph_initializers, counts)
        merger.merge()
        rules = _rules(state)
        # The chain rules once (each is linear in the graph, and ~20 of them are the pass's main
        # cost on a large graph); what they make alike is merged after them.
        if rules and _rewrite_chains(model, rules):
            merger.merge()
        notes = _notes(before - len(model.graph), counts)
        return PassOutcome(structure(model) != shape_before, notes, counts)
