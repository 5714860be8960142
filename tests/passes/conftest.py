"""A whole-graph rule that is wrong on purpose, registered for one test at a time."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from deploycc.rules.base import GraphRule
from deploycc.rules.catalog import GRAPH_RULES, graph_rules
from deploycc.targets.schema import Target


class NegatesRelu(GraphRule):
    """Relu -> Neg: wrong on purpose, so that its proof fails and the legalize pass undoes it."""

    name = "test-negates-relu"
    family = "tests"

    def refused(self, model: ir.Model, target: Target) -> list[ir.Node] | None:
        nodes = [node for node in model.graph if node.op_type == "Relu"]
        return nodes or None

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        for node in nodes:
            node.op_type = "Neg"
        return len(nodes)


@pytest.fixture
def negates_relu(monkeypatch: pytest.MonkeyPatch) -> GraphRule:
    """The catalog with NegatesRelu registered last, for this test only."""
    graph_rules()  # the families first, so the catalog's own rules keep their order
    rule = NegatesRelu()
    monkeypatch.setitem(GRAPH_RULES, rule.name, rule)
    return rule
