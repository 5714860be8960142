"""Legalize: rewrite, through the rule catalog, every node the target's ConversionTarget marks
illegal, to a fixed point (a rule's replacement may itself need a rule), then stop.

Whole-graph type rules run first (float64 for targets without it, int64 Slice bounds for
targets that carry int64 as int32), because they change what the node verdicts see. Only
illegal nodes are touched, and function ops the runtime would expand itself above the opset up
to which that expansion is known to work (`function_expansion_max_opset` in the target: ORT 1.32
fails on Swish-24 in a model of opset 25, OpenVINO 2026.4 on SwiGLU-28); below it such an op is
left to the runtime, whose expansion is no bigger than deploycc's (MobileNetV3 on ort-cpu: 122
nodes stay 122, deploycc's HardSwish rule made them 274). Any other legal or conditionally legal
node is never rewritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.dtypes import stored_bytes
from deploycc.passes.base import Pass, PassOutcome, PipelineState
from deploycc.taxonomy import Condition, Legality, Precision

if TYPE_CHECKING:
    from deploycc.rules.engine import Decision, Rewrite

MAX_ROUNDS = 8


def _undone(rewrite: Rewrite) -> bool:
    """True for a whole-graph rewrite whose proof failed: `_prove_whole` put the graph back. A node
    rule whose proof fails is declined instead, and never recorded as a rewrite."""
    from deploycc.rules.proof import FAILED

    return rewrite.certificate is not None and rewrite.certificate.status == FAILED


class LegalizePass(Pass):
    name = "legalize"
    summary = "rewrite what the target lacks with the rule catalog, to a fixed point"
    in_place = False  # a whole-graph rewrite whose proof fails is undone by reloading its saved bytes

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import LiftConstantsToInitializersPass, RemoveUnusedNodesPass

        from deploycc.graph.shapes import infer_shapes

        notes: list[str] = []
        fired_before = len(state.rewrites)
        self._type_rules(state, notes)
        for _ in range(MAX_ROUNDS):
            if not self._round(state):
                break
            # The next round judges the replacements: give their values types and shapes first.
            infer_shapes(state.model)
        fired = state.rewrites[fired_before:]
        tidied = False
        if fired:
            lifted = LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=16)(state.model)
            removed = RemoveUnusedNodesPass()(state.model)  # what the rewrites replaced, initializers too
            tidied = lifted.modified or removed.modified
            infer_shapes(state.model)
        counts: dict[str, int] = {}
        for rewrite in fired:
            counts[rewrite.rule] = counts.get(rewrite.rule, 0) + 1
        notes.extend(f"{rule} x{count}" for rule, count in sorted(counts.items()))
        # A whole-graph rewrite whose proof failed is recorded (the report names it) but was undone.
        stayed = any(not _undone(rewrite) for rewrite in fired)
        return PassOutcome(stayed or tidied, notes, {"rules_fired": counts})

    def _round(self, state: PipelineState) -> bool:
        """One sweep over the illegal nodes; True when something was rewritten."""
        from deploycc.graph.graphs import all_graphs, graph_label
        from deploycc.legality.conversion_target import ConversionTarget
        from deploycc.rules.engine import decide

        judge = ConversionTarget(state.target)
        opsets = state.opsets
        newest = state.target.ops.function_expansion_max_opset
        runtime_expands = newest is not None and opsets.get("", 1) <= newest
        unresolved: list[Decision] = []
        changed = False
        for graph in list(all_graphs(state.model.graph)):
            label = graph_label(state.model, graph)
            for node in list(graph):
                verdict = judge.judge(node, opsets, label)
                expand = Condition.RUNTIME_EXPANDS in verdict.acted_on and not runtime_expands
                if verdict.status != Legality.ILLEGAL and not expand:
                    continue
                decision = decide(node, graph, opsets, prove=state.options.prove, graph_label=label,
                                  accepts=judge.accepts(opsets, label), disabled=state.options.disable_rules)
                if decision.rewrite is not None:
                    state.rewrites.append(decision.rewrite)
                    changed = True
                elif verdict.status == Legality.ILLEGAL:
                    unresolved.append(decision)
        state.unresolved = unresolved
        return changed

    def _type_rules(self, state: PipelineState, notes: list[str]) -> None:
        from deploycc.rules import types
        from deploycc.rules.base import Site
        from deploycc.rules.engine import decide

        target = state.target
        if target.dtypes.computed_as_dtype("int64") == "int32":  # TensorRT 8.x
            clamp = types.SliceBoundsInt32Rule()
            for node in list(state.model.graph):
                if node.op_type != "Slice" or node.domain not in ("", "ai.onnx"):
                    continue
                if clamp.check(Site(node, node.inputs, state.opsets.get("", 1))) is None:
                    decision = decide(node, state.model.graph, state.opsets, prove=state.options.prove,
                                      disabled=state.options.disable_rules)
                    if decision.rewrite is not None:
                        state.rewrites.append(decision.rewrite)
        self._graph_rules(state, notes)

    def _graph_rules(self, state: PipelineState, notes: list[str]) -> None:
        """The catalog's whole-graph rules, in order, on what the target refuses."""
        from deploycc.rules.catalog import graph_rules
        from deploycc.rules.engine import Rewrite

        for rule in graph_rules():
            if rule.name in state.options.disable_rules:
                continue
            nodes = rule.refused(state.model, state.target)
            if nodes is None:
                continue
            blockers = rule.blockers(state.model)
            if blockers:
                notes.append(f"{rule.name} not made: " + "; ".join(blockers))
                continue
            op = "/".join(sorted({node.op_type for node in nodes})) or rule.op_type
            what = f"{op} node(s) {rule.done}" if nodes else rule.done
            certificate = self._prove_whole(
                state, lambda model, rule=rule, nodes=nodes: rule.apply(model, nodes), rule.name, op, what,
                rule.proof_precision)
            state.rewrites.append(Rewrite(rule.name, "<graph>", op, "main", 0, certificate))

    @staticmethod
    def _prove_whole(state: PipelineState, change, rule: str, op: str, what: str,
                     precision: Precision = Precision.FP32):
        """Apply a whole-graph change, proven by running the graph before and after it; a change
        whose proof fails is undone. `precision` "fp32" compares at 1e-5; another, at that
        precision's verification tolerances."""
        from deploycc.graph.shapes import infer_shapes
        from deploycc.rules.proof import FAILED, PROVEN, UNPROVEN, Certificate
        from deploycc.verify.compare import compare
        from deploycc.verify.inputs import generate
        from deploycc.verify.runner import RunError, run_model_bytes, serialize

        certificate = Certificate(rule=rule, node="<graph>", op=op, status=UNPROVEN)
        before = None
        weights = sum(stored_bytes(v.const_value) for v in state.model.graph.initializers.values()
                      if v.const_value is not None)
        if state.options.prove and weights < (256 << 20):
            before = serialize(state.model)
        certificate.detail = f"{change(state.model)} {what}"
        infer_shapes(state.model)
        if before is None:
            return certificate
        graph = state.model.graph
        signature = [v for v in graph.inputs if v.name not in graph.initializers]
        feeds = generate(signature, seed=state.options.seed)
        try:
            expected = run_model_bytes(before, feeds)
            actual = run_model_bytes(serialize(state.model), feeds)
        except RunError as error:
            certificate.detail += f"; not run: {error}"
            return certificate
        certificate.reference, certificate.samples, certificate.status = expected.runtime, 1, PROVEN
        from deploycc.verify.compare import MISMATCH_SHARE, TOLERANCES

        atol, rtol, min_cosine = (1e-5, 1e-5, 0.0) if precision == Precision.FP32 else TOLERANCES[precision]
        for name, array in expected.outputs.items():
            result = compare(name, array, actual.outputs[name], atol=atol, rtol=rtol, min_cosine=min_cosine,
                             mismatch_share=MISMATCH_SHARE.get(precision, 0.0))
            certificate.max_abs_error = max(certificate.max_abs_error, result.max_abs_error)
            certificate.max_rel_error = max(certificate.max_rel_error, result.max_rel_error)
            if not result.passed:
                certificate.status = FAILED
                certificate.detail += f"; {name}: {result.problem}"
        if certificate.status == FAILED:  # undone: the graph as it was, for the rules to try
            import onnx

            from deploycc import io

            state.model = io.from_proto(onnx.load_from_string(before), like=state.model)
            certificate.detail += "; undone"
        return certificate
