"""`deploycc rules`: the rewrite rule catalog, one row per rule."""

from __future__ import annotations

import json

import click


@click.command("rules")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def rules_command(as_json: bool) -> None:
    """List every rewrite rule: name, family, the op it replaces, opsets, and its math (whole-graph
    rules too, run before the node rules: their op is what they narrow or the whole graph)."""
    from rich.markup import escape
    from rich.table import Table

    from deploycc.report.console import print_table
    from deploycc.rules.base import GraphRule, Rule
    from deploycc.rules.catalog import all_rules, graph_rules

    rules: list[Rule | GraphRule] = [*all_rules().values(), *graph_rules()]

    rows = [{"name": rule.name, "family": rule.family,
             "op": f"{rule.domain}::{rule.op_type}" if rule.domain else rule.op_type,
             "opsets": f"{rule.since}..{rule.until if rule.until is not None else ''}",
             "summary": rule.summary()} for rule in rules]
    rows.sort(key=lambda r: (r["family"], r["name"]))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} rewrite rules")
    for column in ("name", "family", "op", "opsets", "summary"):
        table.add_column(column)
    for row in rows:
        table.add_row(*map(escape, row.values()))  # a summary's weight[leaf] is math, not markup
    print_table(table)
