"""`deploycc bench BUILD_DIR_OR_MODEL --target T`."""

from __future__ import annotations

from pathlib import Path

import click

from deploycc.cli import emit
from deploycc.errors import OptionError


def _batches(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise OptionError(f"--batch {text!r}: expected sizes like 1,2,4,8") from None
    if not values or min(values) < 1:
        raise OptionError(f"--batch {text!r}: sizes must be at least 1")
    return values


@click.command("bench")
@click.argument("subject", type=click.Path(exists=True, path_type=str))
@click.option("-t", "--target",
              help="Target for a model file (default ort-cpu); a build directory knows its own.")
@click.option("--jetpack", help="Resolve a Jetson target at this JetPack release.")
@click.option("--warmup", type=int, help="Warm-up runs (default: until the latency is stable).")
@click.option("--iterations", type=int, help="Timed runs (default 100).")
@click.option("--duration", type=float, help="Time for this many seconds instead of a run count.")
@click.option("--batch", "batch_sizes", help="Sweep batch sizes, e.g. 1,2,4,8 (dynamic-batch models).")
@click.option("--threads", type=int, help="CPU threads for the backend.")
@click.option("--streams", type=int, default=1, show_default=True,
              help="Parallel runners for a throughput run (OpenVINO streams / concurrent ORT sessions).")
@click.option("--compare-to", type=click.Path(exists=True, path_type=str),
              help="Another build directory or model, timed interleaved with this one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def bench_command(ctx: click.Context, subject: str, target: str | None, jetpack: str | None,
                  warmup: int | None, iterations: int | None, duration: float | None, batch_sizes: str | None,
                  threads: int | None, streams: int, compare_to: str | None, as_json: bool) -> None:
    """Latency percentiles, throughput, memory and FLOPs of a build's engine or a model as-is."""
    from deploycc import api
    from deploycc.bench.run import BenchOptions
    from deploycc.report import console
    from deploycc.report.progress import progress_bar

    if iterations is not None and duration is not None:
        raise OptionError("give --iterations or --duration, not both")
    options = BenchOptions(warmup=warmup, iterations=iterations, duration=duration,
                           batches=_batches(batch_sizes), threads=threads, streams=streams,
                           compare_to=Path(compare_to) if compare_to else None)
    with progress_bar("benchmarking", quiet=as_json) as update:
        report = api.bench(subject, target, options, jetpack=jetpack, progress=update)
    emit(report, as_json, console.render_bench)
