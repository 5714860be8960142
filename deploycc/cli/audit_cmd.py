"""`deploycc audit PATH... --target T... -o OUTDIR`."""

from __future__ import annotations

import click

from deploycc.cli import emit
from deploycc.cli.build_cmd import PRECISION_CHOICE
from deploycc.device import BOARD_ENGINE, RUNNER_ENGINES
from deploycc.records.audit import DEFAULT_STAGES, STAGES, AuditOptions


def parse_exporters(text: str | None) -> tuple[str, ...]:
    from deploycc.errors import OptionError
    from deploycc.targets.loader import EXPORTERS

    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise OptionError(f"unknown exporter {unknown[0]!r} in --exporters", hint=", ".join(EXPORTERS))
    return names


@click.command("audit")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-t", "--target", "targets", multiple=True, required=True,
              help="Target name (repeatable), or 'all'.")
@click.option("-o", "--output", "outdir", required=True, type=click.Path(path_type=str),
              help="Where cells, builds and reports go (a rerun resumes there).")
@click.option("--stages", default=",".join(DEFAULT_STAGES), show_default=True,
              help=f"Comma-separated stages from: {', '.join(STAGES)}.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Cells in parallel (local executor).")
@click.option("--timeout", type=float, default=600, show_default=True, help="Seconds per cell.")
@click.option("--memory-limit", "memory_limit_mb", type=int, help="MiB of address space per cell.")
@click.option("--fresh", is_flag=True, help="Ignore results from earlier runs.")
@click.option("--batch", type=int, help="Fix dynamic batch dims to N before legalizing.")
@click.option("--dynamic-batch", "batch_range", metavar="MIN:OPT:MAX",
              help="Keep the batch dynamic; TensorRT profiles use this range.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DIMS",
              help="Fix an input's dims, e.g. input:1x3x224x224 (models without that input: unchanged).")
@click.option("--shape-range", multiple=True, metavar="NAME:MIN:OPT:MAX",
              help="A TensorRT profile for one input, dims as 1x3x224x224.")
@click.option("--partition", is_flag=True,
              help="Try each model refused as a whole again with host segments (counted apart).")
@click.option("--reports-only", is_flag=True,
              help="Keep only each cell's report.md and report.json, not its models and engines.")
@click.option("--stored-only", is_flag=True,
              help="Run nothing: report the models whose every target's cell OUTDIR holds (an audit's "
                   "progress while it runs, or after it was stopped).")
@click.option("--jetpack", help="Resolve Jetson targets at this JetPack release.")
@click.option("--precision", type=PRECISION_CHOICE,
              help="Build in this precision (default: each target's); int8 calibrates on the samples a "
                   "model's hints file names as \"calibration\".")
@click.option("--max-drop", type=float, default=0.01, show_default=True, help="int8: the accuracy budget.")
@click.option("--metric", default="auto", show_default=True,
              help="int8: top1, cosine, sqnr or module:function.")
@click.option("--no-fp16-analysis", "no_half_analysis", is_flag=True,
              help="fp16/bf16 targets: skip finding what half breaks, as build's flag does (conversion "
                   "success alone).")
@click.option("--exporters", metavar="NAME[,NAME]",
              help="PyTorch models: the exporters to try, in this order, on every target (dynamo, "
                   "torchscript; default: each target's own order).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--ray-address", help="Ray cluster address (default: start or join a local one).")
@click.option("--device-engine", type=click.Choice(RUNNER_ENGINES), default=BOARD_ENGINE,
              show_default=True,
              help="Ray: what the runner on a board runs TensorRT cells with (onnxruntime checks the loop "
                   "on a node without TensorRT).")
@click.option("--device-python", help="Ray: the board's Python for the runner (default: the Ray worker's).")
@click.option("--json", "as_json", is_flag=True, help="Print audit.json instead of a summary.")
def audit_command(paths: tuple[str, ...], targets: tuple[str, ...], outdir: str, stages: str, jobs: int,
                  timeout: float, memory_limit_mb: int | None, fresh: bool, batch: int | None,
                  batch_range: str | None, shapes: tuple[str, ...], shape_range: tuple[str, ...],
                  partition: bool, reports_only: bool, stored_only: bool, jetpack: str | None,
                  precision: str | None,
                  max_drop: float, metric: str, no_half_analysis: bool, exporters: str | None,
                  executor: str, ray_address: str | None,
                  device_engine: str, device_python: str | None, as_json: bool) -> None:
    """Which models deploy on which targets, and what blocks the rest. Exit 0 when the audit ran.

    PATHS: .onnx files, folders (their .onnx and .pt2 files), list files (one entry per line), and
    PyTorch models as `build` takes them (.pt2, .pt, package.module:factory, file.py:factory)."""
    from pathlib import Path

    from deploycc import api
    from deploycc.cli.build_cmd import as_precision, parse_batch_range, parse_shape_range
    from deploycc.passes.axes import parse_shape
    from deploycc.report import console
    from deploycc.report.progress import progress_bar
    from deploycc.taxonomy import CellStatus

    options = AuditOptions(stages=tuple(s.strip() for s in stages.split(",") if s.strip()), jobs=jobs,
                           timeout=timeout, memory_limit_mb=memory_limit_mb, fresh=fresh, batch=batch,
                           executor=executor, ray_address=ray_address, partition=partition,
                           reports_only=reports_only, stored_only=stored_only,
                           device_engine=device_engine, device_python=device_python,
                           precision=as_precision(precision),
                           max_drop=max_drop, metric=metric,
                           exporters=parse_exporters(exporters), half_analysis=not no_half_analysis,
                           batch_range=parse_batch_range(batch_range) if batch_range else None,
                           shapes=dict(parse_shape(text) for text in shapes),
                           shape_ranges=dict(parse_shape_range(text) for text in shape_range))
    with progress_bar("auditing", quiet=as_json) as update:
        def progress(counts, total) -> None:
            update(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "starting",
                   sum(counts.values()), total)

        def finished(cell, done, total) -> None:  # a line per cell where the bar is silent (a pipe, a log)
            outcome = f"failed ({cell.category}) at {cell.stage}" if cell.status == CellStatus.FAILED \
                else cell.status
            update.line(f"[{done}/{total}] {Path(cell.model).name} @ {cell.target}: {outcome}"
                        f"{', regressed' if cell.regressed else ''}, {cell.seconds:.1f} s")

        report = api.audit(list(paths), list(targets), outdir, options, jetpack=jetpack, progress=progress,
                           finished=finished)
    emit(report, as_json, console.render_audit)
