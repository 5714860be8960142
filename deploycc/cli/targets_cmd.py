"""`deploycc targets [show NAME]`."""

from __future__ import annotations

import json

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.report import console


@click.group("targets", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def targets(ctx: click.Context, as_json: bool) -> None:
    """List the deployment targets deploycc knows (built-in and DEPLOYCC_TARGET_PATH)."""
    if ctx.invoked_subcommand is not None:
        return
    listing = api.list_targets()
    emit(listing, as_json, console.render_targets)


@targets.command("show")
@click.argument("name")
@click.option("--jetpack", help="Resolve a Jetson target at this JetPack release (e.g. 4.6.1).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with the full op table).")
def show(name: str, jetpack: str | None, as_json: bool) -> None:
    """Show one target in full: backend, device, opsets, dtypes, shapes, ops, provenance."""
    target = api.get_target(name, jetpack=jetpack)
    if as_json:
        click.echo(json.dumps(target.to_dict(with_ops=True), indent=2))
    else:
        console.render_target(target)
