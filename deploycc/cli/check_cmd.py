"""`deploycc check MODEL --target T [--target T2 ...]`."""

from __future__ import annotations

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.report import console


@click.command("check")
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("-t", "--target", "targets", multiple=True, default=("ort-cpu",), show_default=True,
              help="Target name, alias or .toml file; repeat for several (a matrix is printed).")
@click.option("--jetpack", help="Resolve Jetson targets at this JetPack release.")
@click.option("--dla", is_flag=True, help="Also say which nodes a DLA core can run.")
@click.option("--explain", is_flag=True,
              help="Say which rule would fix each illegal node (nothing is rewritten).")
@click.option("--capabilities", multiple=True, type=click.Path(dir_okay=False),
              help="A probed capability table (`deploycc probe -o FILE`) laid over the declared one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def check_command(ctx: click.Context, model: str, targets: tuple[str, ...], jetpack: str | None,
                  dla: bool, explain: bool, capabilities: tuple[str, ...], as_json: bool) -> None:
    """List every node a target would refuse, grouped as op | count | reason | nodes.

    Exit code 0 when every node is legal on every target, 1 when any is illegal.
    """
    report = api.check(model, list(targets), jetpack=jetpack, dla=dla, explain=explain,
                       capabilities=capabilities)
    emit(report, as_json, console.render_check)
    ctx.exit(report.exit_code)
