"""Applying the catalog to one node: try each rule for its op, prove the first that accepts,
rewrite, and remember why every other rule declined (the final report lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deploycc.graph.graphs import node_label
from deploycc.records.rewrite import Rewrite  # re-exported: a record, in records/
from deploycc.rules.base import Builder, Decline, Site
from deploycc.rules.catalog import rules_for

if TYPE_CHECKING:
    import onnx_ir as ir


@dataclass
class Decision:
    """What the catalog did for one node: the rewrite, or every rule's reason for declining."""

    node: str
    op: str
    rewrite: Rewrite | None = None
    declined: list[tuple[str, str]] = field(default_factory=list)

    def explain(self) -> str:
        if self.rewrite is not None:
            return f"rule {self.rewrite.rule}"
        if not self.declined:
            return f"no rule in the catalog rewrites {self.op}"
        return "; ".join(f"{rule} declined: {reason}" for rule, reason in self.declined)


def domain_of(node: ir.Node) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def _replace(graph: ir.Graph, node: ir.Node, builder: Builder, outputs: list[ir.Value]) -> None:
    import onnx_ir as ir

    from deploycc.rules.proof import compared_outputs

    indices = compared_outputs(node, len(outputs))
    new_values = []
    for index in indices:
        value = outputs[index]
        if value.producer() is None or value.producer() not in builder.nodes:
            value = builder.op("Identity", value)  # never hand a graph output name to an input
        new_values.append(value)
    ir.convenience.replace_nodes_and_values(graph, node, [node], builder.nodes,
                                            [node.outputs[i] for i in indices], new_values)


def decide(node: ir.Node, graph: ir.Graph, opsets: dict[str, int], *, apply: bool = True,
           prove: bool = True, graph_label: str = "main",
           accepts: Callable[[ir.Node], bool] | None = None,
           families: tuple[str, ...] | None = None, disabled: Collection[str] = ()) -> Decision:
    """Try the catalog's rules for `node` (of `families` only, when given, and none of
    `disabled`); with apply, rewrite with the first that accepts."""
    from deploycc.rules.proof import FAILED
    from deploycc.rules.proof import prove as prove_rewrite

    domain = domain_of(node)
    site_opset = opsets.get(domain, 1)
    label = node_label(node)
    decision = Decision(node=label, op=node.op_type if not domain else f"{domain}::{node.op_type}")
    for rule in rules_for(domain, node.op_type):
        if families is not None and rule.family not in families:
            continue
        if rule.name in disabled:
            decision.declined.append((rule.name, "set aside (--disable-rule, or blamed for a failed "
                                                 "verification)"))
            continue
        site = Site(node, node.inputs, site_opset, accepts)
        builder = Builder(opsets.get("", 1), f"{label}/{rule.name}")
        try:
            reason = rule.applies_at(site_opset) or rule.writes_at(builder.opset) or rule.check(site)
            if reason is None:
                used_beyond = [i for i in range(1, len(node.outputs)) if site.output_used(i)]
                outputs = list(rule.expand(site, builder))
                if any(i >= len(outputs) for i in used_beyond):
                    raise Decline(f"output {used_beyond[-1]} is used and the rule does not produce it")
        except Decline as declined:
            reason = str(declined)
        except Exception as error:  # a malformed node a rule did not foresee: decline, never crash
            reason = f"cannot rewrite this node ({type(error).__name__}: {str(error)[:120]})"
        if reason is not None:
            decision.declined.append((rule.name, reason))
            continue
        certificate = None
        if prove:  # without apply too: `check --explain` names the rule legalize would keep
            try:
                certificate = prove_rewrite(rule, node, opsets, site_opset, label)
            except Decline as declined:
                decision.declined.append((rule.name, str(declined)))
                continue
            if certificate.status == FAILED:
                decision.declined.append((rule.name, f"proof failed: {certificate.detail}"))
                continue
        if not apply:
            decision.rewrite = Rewrite(rule.name, label, decision.op, graph_label, len(builder.nodes),
                                       certificate)
            return decision
        _replace(graph, node, builder, outputs)
        decision.rewrite = Rewrite(rule.name, label, decision.op, graph_label, len(builder.nodes),
                                   certificate)
        return decision
    return decision
