"""`deploycc inspect MODEL`."""

from __future__ import annotations

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.report import console


@click.command("inspect")
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def inspect_command(model: str, as_json: bool) -> None:
    """IR version, opsets, I/O, op histogram, parameters, external data, redundancy."""
    report = api.inspect(model)
    emit(report, as_json, console.render_inspect)
