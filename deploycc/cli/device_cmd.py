"""`deploycc device import OUTDIR result.json`: a board's result back into the build."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("device")
def device_command() -> None:
    """Results from the device: the bundle's run_on_device.py writes result.json on the board."""


@device_command.command("import")
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def import_command(ctx: click.Context, outdir: Path, result: Path) -> None:
    """Merge RESULT into OUTDIR's report.json, report.md and manifest.json.

    Exit code 0 when the engine was verified on the device, 1 when it failed there, 2 when the
    result is unreadable or from another bundle (the directory is left as it was).
    """
    from deploycc.pipeline.device import VERIFIED_ON_DEVICE, import_result

    report = import_result(outdir, result)
    click.echo(f"{report['status']}: {report['summary']}")
    ctx.exit(0 if report["status"] == VERIFIED_ON_DEVICE else 1)
