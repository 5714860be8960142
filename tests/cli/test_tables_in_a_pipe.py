"""Tables printed into a pipe (`| grep`, `| tee`, a CI log) keep every row whole on one line:
no cell is folded onto the next line or cut with "…", whatever COLUMNS says."""

from __future__ import annotations

import json

from deploycc.targets import registry
from tests.cli.test_cli import run


def test_every_rule_is_whole_on_one_line_in_a_pipe() -> None:
    rows = json.loads(run("rules", "--json").stdout)
    listed = run("rules", env={"COLUMNS": "80"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert any("ms-skip-simplified-layer-normalization" in line
               and "com.microsoft::SkipSimplifiedLayerNormalization" in line for line in lines)
    cut = [row["name"] for row in rows
           if not any(row["name"] in line and row["op"] in line and row["summary"] in line for line in lines)]
    assert not cut, cut  # a summary's "weight[leaf]" is text too, not rich markup
    assert "…" not in listed.stdout


def test_a_long_op_restriction_is_whole_on_one_line_in_a_pipe() -> None:
    target = registry.resolve("jetson-xavier")
    notes = ["; ".join(e.restrictions) or e.note or "" for e in target.ops.entries
             if e.restrictions or e.status != "supported"]
    longest = max(notes, key=len)
    assert len(longest) > 200  # wider than the old fixed width of tables in a pipe
    shown = run("targets", "show", "jetson-xavier", env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert any(longest in line for line in shown.stdout.splitlines()), longest
