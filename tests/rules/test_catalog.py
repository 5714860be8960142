"""The catalog itself: every rule registered by name, documented, and tested in this folder."""

from __future__ import annotations

import json
from pathlib import Path

from deploycc.rules.catalog import FAMILIES, all_rules, graph_rules
from tests.cli.test_cli import run


def test_every_rule_has_math_and_its_own_test() -> None:
    here = Path(__file__)
    tests = "".join(p.read_text() for p in here.parent.glob("test_*.py") if p != here)
    rules = all_rules()
    assert len(rules) >= 30
    for name, rule in rules.items():
        assert rule.family in FAMILIES, name
        summary = rule.summary()
        assert rule.__doc__, f"{name} has no docstring"
        # The first line names the op the rule rewrites, then states what it becomes.
        named = summary.split(rule.op_type, 1)[1] if rule.op_type != "*" and rule.op_type in summary else (
            summary if rule.op_type == "*" else None)
        assert named is not None, f"{name}: the first docstring line does not name {rule.op_type}"
        assert any(sign in named for sign in (":", "=", "->")), f"{name} states no math after the op's name"
        assert f'"{name}"' in tests, f"rule {name} has no test in tests/rules"


def test_every_whole_graph_rule_is_documented_and_tested() -> None:
    """Whole-graph rules are tested on whole models (tests/pipeline): each name appears in a test."""
    tests = "".join(p.read_text() for p in Path(__file__).parents[1].rglob("test_*.py"))
    rules = graph_rules()
    assert [rule.name for rule in rules] == ["float64-to-float32", "qoperator-to-qdq",
                                             "dynamic-quantization-to-float", "dequantize-to-float"]
    for rule in rules:
        assert rule.family in FAMILIES and rule.__doc__ and "->" in rule.summary(), rule.name
        assert f'"{rule.name}"' in tests, f"whole-graph rule {rule.name} has no test"


def test_rules_command_lists_the_catalog() -> None:
    result = run("rules", "--json")
    assert result.returncode == 0
    listed = {row["name"] for row in json.loads(result.stdout)}
    assert listed == set(all_rules()) | {rule.name for rule in graph_rules()}
