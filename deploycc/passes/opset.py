"""Opset: bring the default-domain opset into the target's range.

A model already inside the range is left alone (unless `--opset N` asks for another), except
where a node's op version at the model's opset has no kernel on the target while an older
version does (ORT 1.32 implements QuantizeLinear up to an older version than onnx 1.23's): then
the model goes down to the highest opset at which that node runs and no other node stops
running, if the converter can take it there. One outside the range is converted to the
target's preferred opset. Converting up within 18..25 uses
onnxscript's converter on the IR; everything else uses onnx's converter on the graph without
its large initializers. Converting down, ops born after the destination opset have no adapter:
the rule catalog rewrites them first, and an op no rule can rewrite is named with its versions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from deploycc.errors import DeployccError
from deploycc.pipeline.context import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    import onnx_ir as ir


class OpsetConversionError(DeployccError):
    """The model cannot be brought to the target's opset."""

    exit_code = 1


def destination(state: PipelineState) -> tuple[int | None, int]:
    """(current default-domain opset, the opset it should have)."""
    current = state.opsets.get("")
    target = state.target
    if state.options.opset is not None:
        return current, state.options.opset
    if current is None or target.opset.contains(current):
        return current, current if current is not None else target.opset.preferred
    return current, target.opset.preferred


def _rewrite_unborn(state: PipelineState, version: int) -> tuple[list[str], list[str]]:
    """Rewrite, with the catalog, every node whose op does not exist at `version`, to a fixed
    point: a replacement may hold ops born after `version` too (Gelu's ONNX body has CastLike).
    A node whose form changed since `version` is rewritten by an old_forms rule where one applies,
    else left to the converter's adapter."""
    from deploycc import io
    from deploycc.analysis.graphs import all_graphs
    from deploycc.analysis.shapes import infer_shapes
    from deploycc.legality import schemas
    from deploycc.rules.engine import decide

    fired: list[str] = []
    current = state.opsets.get("", version)
    for _ in range(4):
        blocked = []
        progressed = False
        for graph in list(all_graphs(state.model.graph)):
            for node in list(graph):
                if node.domain not in ("", "ai.onnx"):
                    continue
                born = schemas.first_version(node.op_type, "")
                if born is None:
                    continue
                if born <= version:  # Shape with start/end at 15 means something else below 15
                    if io.unchanged_between(node, current, version):
                        continue
                    decision = decide(node, graph, state.opsets, prove=state.options.prove,
                                      families=("old_forms",))
                    if decision.rewrite is not None:
                        state.rewrites.append(decision.rewrite)
                        fired.append(f"{decision.node}: {decision.rewrite.rule}")
                        progressed = True
                    continue
                decision = decide(node, graph, state.opsets, prove=state.options.prove)
                if decision.rewrite is not None:
                    state.rewrites.append(decision.rewrite)
                    fired.append(f"{decision.node}: {decision.rewrite.rule}")
                    progressed = True
                else:
                    blocked.append(f"{node.op_type} (first at opset {born}; {decision.explain()})")
        if not progressed:
            break
        infer_shapes(state.model)  # the next sweep reads the replacements' types
    return fired, blocked


def kernel_opset(state: PipelineState, current: int) -> int | None:
    """The highest opset below `current` that gives a kernel to nodes the target refuses only for
    their op version, without making any other node illegal; None when there is none."""
    from deploycc.analysis.graphs import all_graphs
    from deploycc.legality import schemas
    from deploycc.legality.conversion_target import ILLEGAL, ConversionTarget, NodeVerdict

    judge = ConversionTarget(state.target)
    nodes = [node for graph in all_graphs(state.model.graph) for node in graph
             if node.domain in ("", "ai.onnx")]

    def refused_for_version(verdict: NodeVerdict) -> bool:
        return any(reason.category == "opset" for reason in verdict.reasons)

    # An op's version follows from the opset alone, so one node per op tells whether any node is
    # refused for it; most models have none, and then the other nodes need not be judged here.
    one_per_op = {node.op_type: node for node in nodes}
    if not any(refused_for_version(judge.judge(node, state.opsets)) for node in one_per_op.values()):
        return None

    def illegal_at(opset: int) -> dict[int, NodeVerdict]:
        opsets = dict(state.opsets, **{"": opset})
        verdicts = {index: judge.judge(node, opsets) for index, node in enumerate(nodes)}
        return {index: verdict for index, verdict in verdicts.items() if verdict.status == ILLEGAL}

    now = illegal_at(current)
    if not any(all(r.category == "opset" for r in verdict.reasons) for verdict in now.values()):
        return None
    born = max((schemas.first_version(node.op_type, "") or 1 for node in nodes), default=1)
    for candidate in range(current - 1, max(born, state.target.opset.min) - 1, -1):
        if illegal_at(candidate).keys() < now.keys():
            return candidate
    return None


class OpsetPass(Pass):
    name = "opset"
    summary = "convert the default-domain opset into the target's range"

    def run(self, state: PipelineState) -> PassOutcome:
        current, wanted = destination(state)
        if current is not None and current == wanted and state.options.opset is None:
            return self._toward_kernels(state, current)
        if current is None:
            # A graph of ai.onnx.ml (or other) nodes only: no node changes meaning when the default
            # domain is declared, and without it no rule could write a standard op in its place.
            state.model.opset_imports[""] = wanted
            return PassOutcome(True, [f"the model imports no ai.onnx opset; declared {wanted} so that "
                                      "rewrites can use standard ops"], {"from": None, "to": wanted})
        if current == wanted:
            return PassOutcome(False, details={"opset": current})
        target = state.target
        if not target.opset.contains(wanted):
            raise OpsetConversionError(
                f"opset {wanted} is outside {target.name}'s range {target.opset.min}..{target.opset.max}")
        notes: list[str] = []
        if wanted < current:
            fired, blocked = _rewrite_unborn(state, wanted)
            notes.extend(f"rewrote before converting down: {item}" for item in fired)
            if blocked:
                raise OpsetConversionError(
                    f"cannot convert opset {current} -> {wanted}: no adapter or rule for "
                    + "; ".join(blocked))
        state.model = self._convert(state.model, current, wanted)
        notes.append(f"converted opset {current} -> {wanted}")
        return PassOutcome(True, notes, {"from": current, "to": wanted})

    def _toward_kernels(self, state: PipelineState, current: int) -> PassOutcome:
        lower = kernel_opset(state, current)
        if lower is None:
            return PassOutcome(False, details={"opset": current})
        try:
            state.model = self._convert(state.model, current, lower)
        except OpsetConversionError as error:  # stay: the legalizer and the report name the node
            return PassOutcome(False, [f"kept opset {current}: {error}"], {"opset": current})
        return PassOutcome(True, [f"converted opset {current} -> {lower}: the target implements an older "
                                  "version of an op the model uses"], {"from": current, "to": lower})

    @staticmethod
    def _convert(model: ir.Model, current: int, wanted: int) -> ir.Model:
        from deploycc import io

        if 18 <= current < wanted <= 25:
            import onnxscript.version_converter as converter

            try:
                converter.convert_version(model, wanted)
                if model.opset_imports.get("") == wanted:
                    return model
            except Exception:  # fall through to onnx's converter, which covers more adapters
                pass
        try:
            return io.convert_opset(model, wanted)
        except Exception as error:
            first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            missing = re.search(r"No Adapter (?:From|To) Version \$?(\d+) for (\w+)", first)
            if missing:
                version, op = missing.groups()
                first = f"onnx's converter has no adapter for {op} from version {version}"
            raise OpsetConversionError(f"cannot convert opset {current} -> {wanted}: {first}",
                                       hint="try --opset with a closer version, or a target whose "
                                            "range includes the model's opset") from None
