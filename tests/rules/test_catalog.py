"""The catalog itself: every rule registered by name, documented, and tested in this folder."""

from __future__ import annotations

import json
from pathlib import Path

from deploycc.rules.catalog import FAMILIES, all_rules
from tests.cli.test_cli import run


def test_every_rule_has_math_and_its_own_test() -> None:
    here = Path(__file__)
    tests = "".join(p.read_text() for p in here.parent.glob("test_*.py") if p != here)
    rules = all_rules()
    assert len(rules) >= 30
    for name, rule in rules.items():
        assert rule.family in FAMILIES, name
        summary = rule.summary()
        assert rule.__doc__ and (":" in summary or "=" in summary), f"{name} states no math in its docstring"
        assert f'"{name}"' in tests, f"rule {name} has no test in tests/rules"


def test_rules_command_lists_the_catalog() -> None:
    result = run("rules", "--json")
    assert result.returncode == 0
    listed = {row["name"] for row in json.loads(result.stdout)}
    assert listed == set(all_rules())
