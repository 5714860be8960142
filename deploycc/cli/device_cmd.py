"""`deploycc device import OUTDIR result.json`: a board's result back into the build."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from deploycc.device import RUNNER_ENGINES


@click.group("device")
def device_command() -> None:
    """Results from the device: the bundle's run_on_device.py writes result.json on the board."""


@device_command.command("import")
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("result", type=click.Path(path_type=Path))
@click.pass_context
def import_command(ctx: click.Context, outdir: Path, result: Path) -> None:
    """Merge RESULT into OUTDIR's report.json, report.md and manifest.json.

    RESULT is the result.json run_on_device.py wrote, or the bundle folder run_on_device.sh
    (trtexec) ran in: its outputs are judged against the reference here.

    Exit code 0 when the engine was verified on the device, 1 when it failed there, 2 when the
    result is unreadable or from another bundle (the directory is left as it was).
    """
    from deploycc.pipeline.device_import import import_result

    report = import_result(outdir, result)
    click.echo(f"{report.status}: {report.summary}")
    ctx.exit(report.exit_code)


@device_command.command("run")
@click.argument("outdir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--host", required=True, help="user@board, or a Host of ~/.ssh/config.")
@click.option("--port", type=int, help="SSH port (default: ssh's).")
@click.option("--identity", type=click.Path(dir_okay=False, path_type=Path), help="SSH private key.")
@click.option("--ssh-option", multiple=True, metavar="KEY=VALUE", help="Passed to ssh as -o.")
@click.option("--python", default="python3", show_default=True, help="The board's Python (3.6 or newer).")
@click.option("--engine", type=click.Choice(RUNNER_ENGINES),
              help="Default: the bundle's own (TensorRT; onnxruntime-gpu for ort-cuda and ort-trt). "
                   "onnxruntime: ORT stands in for it (any host).")
@click.option("--iterations", type=int, default=200, show_default=True)
@click.pass_context
def run_command(ctx: click.Context, outdir: Path, host: str, port: int | None, identity: Path | None,
                ssh_option: tuple[str, ...], python: str, engine: str | None, iterations: int) -> None:
    """Copy OUTDIR/bundle to HOST, build, verify and time the engine there, import the result.

    Uses the system's ssh (the bundle goes as a tar stream). Exit code 0 verified on the
    device, 1 failed there (or the run left no result), 2 when the host cannot be reached or
    OUTDIR has no bundle.
    """
    from deploycc.device.remote import Remote, run_on_board
    from deploycc.pipeline.device_import import import_result

    remote = Remote(host, port, identity, list(ssh_option))
    result = run_on_board(outdir, remote, python=python, engine=engine, iterations=iterations)
    try:
        report = import_result(outdir, result)
    finally:  # the fetched copy's folder (its content is in OUTDIR now, or the import said why not)
        shutil.rmtree(result.parent, ignore_errors=True)
    click.echo(f"{report.status}: {report.summary}")
    ctx.exit(report.exit_code)
