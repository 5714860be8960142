"""`deploycc check`: every node judged against every requested target, all refusals listed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.analysis.placement import predict_placement
from deploycc.graph.graphs import all_graphs, graph_label, opset_map
from deploycc.legality.conversion_target import ConversionTarget, NodeVerdict
from deploycc.legality.graph_level import graph_findings
from deploycc.records.check import CheckReport, NodeGroup, TargetVerdict  # re-exported: records, in records/
from deploycc.taxonomy import Legality, Severity

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import Target


def _group(verdicts: list[NodeVerdict], status: Legality) -> list[NodeGroup]:
    groups: dict[tuple[str, str, str], NodeGroup] = {}
    for verdict in verdicts:
        if verdict.status != status:
            continue
        label = verdict.node if verdict.graph == "main" else f"{verdict.graph}/{verdict.node}"
        items = ([(r.category, r.summary, r.detail) for r in verdict.reasons] if status == Legality.ILLEGAL
                 else [("condition", c, "") for c in verdict.conditions])
        for category, summary, detail in items:
            key = (verdict.op, category, summary)
            group = groups.setdefault(key, NodeGroup(verdict.op, 0, category, summary, []))
            group.count += 1
            group.nodes.append(label)
            if detail:
                group.details.append(f"{label}: {detail}")
    return sorted(groups.values(), key=lambda g: (-g.count, g.op, g.reason))


def _judge_graphs(model: ir.Model, judge: ConversionTarget) -> list[NodeVerdict]:
    opsets = opset_map(model)
    verdicts = []
    for graph in all_graphs(model.graph):
        label = graph_label(model, graph)
        for node in graph:
            verdicts.append(judge.judge(node, opsets, label))
    return verdicts


NO_RULE_NEXT = "no rule applies: --partition runs it on the host"


def explain_fixes(model: ir.Model, target: Target) -> list[dict[str, str]]:
    """For every illegal node, the rule the legalize pass would apply to it, or why each declines.
    The pass's own decision, asked the same way (the target must accept what a rule writes, and
    the rewrite must prove equal), so a rule named here is one legalize keeps."""
    from deploycc.rules.engine import decide

    judge = ConversionTarget(target)
    opsets = opset_map(model)
    fixes = []
    for graph in all_graphs(model.graph):
        label = graph_label(model, graph)
        for node in graph:
            if judge.judge(node, opsets, label).status != Legality.ILLEGAL:
                continue
            decision = decide(node, graph, opsets, apply=False, graph_label=label,
                              accepts=judge.accepts(opsets, label))
            fixes.append({"node": decision.node, "op": decision.op,
                          "fix": decision.rewrite.rule if decision.rewrite else "",
                          "explanation": decision.explain() if decision.rewrite
                          else f"{decision.explain()}; {NO_RULE_NEXT}"})
    return fixes


def judge_model(model: ir.Model, target: Target, *, dla: bool = False,
                probed: dict[str, str] | None = None, legalized: bool = False) -> TargetVerdict:
    """One target's verdict on an already loaded (and shape-inferred) model; `legalized` for
    legalize's result, which nothing converts afterwards (graph_findings)."""
    judge = ConversionTarget(target, dla=dla, probed=probed)
    verdicts = _judge_graphs(model, judge)
    findings = graph_findings(model, target, legalized=legalized)
    counts: dict[str, int] = {legality: 0 for legality in Legality}
    for verdict in verdicts:
        counts[verdict.status] += 1
    dla_split: dict[str, list[str]] | None = None
    if judge.with_dla:
        dla_split = {"dla": [], "gpu-fallback": [], "uncertain": []}
        for verdict in verdicts:
            if verdict.dla is not None:
                dla_split[verdict.dla].append(verdict.node)
    return TargetVerdict(
        target=target.name,
        backend=target.backend.kind,
        backend_version=target.backend.version,
        jetpack=target.jetpack.release if target.jetpack else None,
        op_table=target.ops.name,
        legal=counts[Legality.ILLEGAL] == 0 and not any(f.severity == Severity.ILLEGAL for f in findings),
        counts=counts,
        illegal=_group(verdicts, Legality.ILLEGAL),
        conditional=_group(verdicts, Legality.CONDITIONAL),
        graph_findings=findings,
        dla=dla_split,
    )


def check_model(path: str | Path, targets: list[Target], *, dla: bool = False,
                explain: bool = False, capabilities: dict[str, dict[str, str]] | None = None) -> CheckReport:
    """`capabilities`: probed tables by target name (`deploycc probe -o FILE`), laid over the declared."""
    from deploycc.graph.shapes import hand_over, load_inferred

    loaded = load_inferred(path)
    model = loaded.model
    notes = list(loaded.notes)
    node_count = sum(len(g) for g in all_graphs(model.graph))
    report = CheckReport(
        path=str(loaded.path),
        node_count=node_count,
        opset_imports={(k or "ai.onnx"): v for k, v in sorted(model.opset_imports.items())},
        notes=notes,
        targets=[_verdict(model, target, dla, explain, (capabilities or {}).get(target.name))
                 for target in targets],
    )
    hand_over(loaded)  # the verdicts only read it: legalize, next, takes it as read
    return report


def _verdict(model: ir.Model, target: Target, dla: bool, explain: bool,
             probed: dict[str, str] | None) -> TargetVerdict:
    verdict = judge_model(model, target, dla=dla, probed=probed)
    verdict.placement = predict_placement(model, target)
    if explain:
        verdict.fixes = explain_fixes(model, target)
    return verdict

