"""`deploycc check MODEL --target T [--target T2 ...]`."""

from __future__ import annotations

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.cli.torch_flags import torch_options, torch_source
from deploycc.errors import OptionError
from deploycc.report import console
from deploycc.taxonomy import Precision


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
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
              help="Find what fp16 (bf16) breaks and the layers a build keeps in fp32 (default: where a "
                   "target builds in fp16, as the Jetsons do; fp32 skips it).")
@click.option("--inputs", type=click.Path(exists=True, dir_okay=False),
              help="An .npz of inputs for the fp16 analysis (default: drawn as verification draws them).")
@click.option("--strict", is_flag=True,
              help="Exit 1 when the fp16 analysis was skipped (a warning and in --json's skipped_steps "
                   "either way).")
@torch_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def check_command(ctx: click.Context, model: str, targets: tuple[str, ...], jetpack: str | None,
                  dla: bool, explain: bool, capabilities: tuple[str, ...], precision: str | None,
                  inputs: str | None, strict: bool, as_json: bool, **flags) -> None:
    """List every node a target would refuse, grouped as op | count | reason | nodes.

    MODEL is an ONNX file or a PyTorch model (model.pt2, model.pt, module.path:factory), which is
    exported for each target as `build` would export it, and the export checked.

    Exit code 0 when every node is legal on every target, 1 when any is illegal (or no exporter
    could export the torch model, or with --strict the fp16 analysis was skipped).
    """
    source = torch_source(model, flags)
    if source is not None:
        if capabilities:
            raise OptionError("--capabilities takes an ONNX model", hint="check the exported file instead")
        if inputs:
            raise OptionError("--inputs takes an ONNX model", hint="a torch model's fp16 analysis runs on "
                              "its example inputs (--example-inputs)")
        report = api.check_torch(source, targets=list(targets), jetpack=jetpack, dla=dla, explain=explain,
                                 precision=Precision(precision) if precision else "target", strict=strict)
    else:
        report = api.check(model, list(targets), jetpack=jetpack, dla=dla, explain=explain,
                           capabilities=capabilities,
                           precision=Precision(precision) if precision else "target",
                           inputs=inputs, strict=strict)
    emit(report, as_json, console.render_check)
    ctx.exit(report.exit_code)
