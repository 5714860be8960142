"""Opset: bring the default-domain opset into the target's range.

A model already inside the range is left alone (unless `--opset N` asks for another); one
outside is converted to the target's preferred opset. Converting up within 18..25 uses
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
    """Rewrite, with the catalog, every node whose op does not exist at `version`."""
    from deploycc.analysis.graphs import all_graphs
    from deploycc.legality import schemas
    from deploycc.rules.engine import decide

    fired, blocked = [], []
    for graph in list(all_graphs(state.model.graph)):
        for node in list(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            born = schemas.first_version(node.op_type, "")
            if born is None or born <= version:
                continue
            decision = decide(node, graph, state.opsets, prove=state.options.prove)
            if decision.rewrite is not None:
                state.rewrites.append(decision.rewrite)
                fired.append(f"{decision.node}: {decision.rewrite.rule}")
            else:
                blocked.append(f"{node.op_type} (first at opset {born}; {decision.explain()})")
    return fired, blocked


class OpsetPass(Pass):
    name = "opset"
    summary = "convert the default-domain opset into the target's range"

    def run(self, state: PipelineState) -> PassOutcome:
        current, wanted = destination(state)
        if current is None or current == wanted:
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
