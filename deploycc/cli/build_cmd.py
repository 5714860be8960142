"""`deploycc build MODEL --target T -o OUTDIR` (and `deploycc build BUNDLE --engine-only`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.cli.legalize_cmd import options_from_flags, pipeline_options
from deploycc.cli.torch_flags import torch_options, torch_source
from deploycc.errors import OptionError
from deploycc.options import BuildOptions, QuantizeOptions
from deploycc.taxonomy import LegalizeMode, Precision

# The precisions a build takes on the command line; the flag's string becomes a Precision here.
PRECISION_CHOICE = click.Choice([p.value for p in (Precision.FP32, Precision.FP16, Precision.BF16,
                                                   Precision.INT8, Precision.INT4,
                                                   Precision.INT8_WEIGHTS)])


# `build` also takes "auto": the fastest within the accuracy budget, measured (pipeline/precision_search.py)
AUTO = "auto"
BUILD_PRECISION_CHOICE = click.Choice([*PRECISION_CHOICE.choices, AUTO])


def as_precision(name: str | None) -> Precision | None:
    return None if name is None else Precision(name)


def parse_batch_range(text: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"(\d+):(\d+):(\d+)", text.strip())
    if not match:
        raise OptionError(f"--dynamic-batch {text!r}: expected MIN:OPT:MAX, e.g. 1:8:32")
    low, opt, high = (int(g) for g in match.groups())
    if not 1 <= low <= opt <= high:
        raise OptionError(f"--dynamic-batch {text!r}: needs 1 <= MIN <= OPT <= MAX")
    return low, opt, high


def parse_shape_range(text: str) -> tuple[str, tuple[list[int], list[int], list[int]]]:
    parts = text.split(":")
    if len(parts) != 4:
        raise OptionError(f"--shape-range {text!r}: expected NAME:MIN:OPT:MAX, "
                          "e.g. x:1x3x224x224:8x3x224x224:32x3x224x224")
    try:
        dims = [[int(d) for d in part.split("x")] for part in parts[1:]]
    except ValueError:
        raise OptionError(f"--shape-range {text!r}: dims must be integers separated by 'x'") from None
    if len({len(d) for d in dims}) != 1 or any(a > b for lo, hi in ((dims[0], dims[1]), (dims[1], dims[2]))
                                                for a, b in zip(lo, hi, strict=True)):
        raise OptionError(f"--shape-range {text!r}: MIN <= OPT <= MAX per dim, all of one rank")
    return parts[0], (dims[0], dims[1], dims[2])


@click.command("build")
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("-t", "--target", default="ort-cpu", show_default=True, help="Target name, alias or .toml.")
@click.option("-o", "--output", "outdir", type=click.Path(path_type=str),
              help="Output directory (default: MODEL's stem.TARGET here; refused if it exists, "
                   "unless --force).")
@click.option("--jetpack", help="Resolve a Jetson target at this JetPack release.")
@click.option("--precision", type=BUILD_PRECISION_CHOICE,
              help="Engine precision (default: auto: of the target's precisions, the fastest whose engine "
                   "is within the accuracy budget, timed here against fp32; a device target: its default). "
                   "Name one (fp32) to pin it.")
@click.option("--calibration", type=click.Path(path_type=Path),
              help="int8: a folder of .npz samples keyed by input name, to calibrate on.")
@click.option("--validation", type=click.Path(path_type=Path),
              help="int8: samples to judge accuracy on (default: a fifth of the calibration set).")
@click.option("--max-drop", type=float, default=0.01, show_default=True,
              help="int8: how far the metric may fall below the fp32 model's.")
@click.option("--metric", default="auto", show_default=True,
              help="int8: top1, cosine, sqnr, or module:function (auto: top1 for classifiers, else cosine).")
@click.option("--allow-fallback", is_flag=True,
              help="A target without the precision builds the one it suggests instead (reported).")
@click.option("--require-int8", is_flag=True,
              help="int8: fail (exit 1) rather than build in float when the guard keeps float.")
@click.option("--no-fp16-analysis", "no_half_analysis", is_flag=True,
              help="fp16/bf16: skip finding what half breaks; every layer builds in half.")
@click.option("--strict", is_flag=True,
              help="Fail (exit 1) when a safety step was skipped: the fp16 analysis, the INT8 guard, "
                   "verification (each skip is a warning and in report.json's skipped_steps either way).")
@click.option("--format", "artifact_format", type=click.Choice(["onnx", "ort"]), default="onnx",
              show_default=True, help="ONNX Runtime artifact: optimized ONNX or ORT format.")
@click.option("--fail-on-fallback", is_flag=True, help="Refuse when nodes leave the target's device/EP.")
@click.option("--dynamic-batch", "batch_range", metavar="MIN:OPT:MAX",
              help="Keep the batch dynamic; TensorRT profiles use this range.")
@click.option("--shape-range", multiple=True, metavar="NAME:MIN:OPT:MAX",
              help="A TensorRT profile for one input, dims as 1x3x224x224.")
@click.option("--dla-core", type=int, help="Build for this DLA core (Jetson Xavier/Orin).")
@click.option("--gpu-fallback/--no-gpu-fallback", default=True, show_default=True,
              help="Let layers DLA cannot run fall back to the GPU.")
@click.option("--workspace-mb", type=int, help="TensorRT workspace (default: the target's).")
@click.option("--no-bench", is_flag=True, help="Skip the latency summary.")
@click.option("--force", is_flag=True, help="Replace OUTDIR if it exists.")
@click.option("--engine-only", is_flag=True, help="MODEL is a device bundle: build its engine only.")
@click.option("--partition", is_flag=True,
              help="Run what no rule makes legal on the host (ONNX Runtime CPU): device and host segments.")
@click.option("--min-segment-nodes", type=int, default=1, show_default=True,
              help="With --partition: a smaller device segment runs on the host.")
@pipeline_options(dynamic_batch_flag=False)
@torch_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report instead of a summary.")
@click.pass_context
def build_command(ctx: click.Context, model: str, target: str, outdir: str | None, jetpack: str | None,
                  precision: str | None, calibration: Path | None, validation: Path | None, max_drop: float,
                  metric: str, allow_fallback: bool, require_int8: bool, no_half_analysis: bool,
                  strict: bool, artifact_format: str,
                  fail_on_fallback: bool, batch_range: str | None,
                  shape_range: tuple[str, ...], dla_core: int | None, gpu_fallback: bool,
                  workspace_mb: int | None, no_bench: bool, force: bool, engine_only: bool, partition: bool,
                  min_segment_nodes: int, as_json: bool, **flags) -> None:
    """Legalize MODEL, build TARGET's engine, verify it, and write OUTDIR atomically.

    MODEL is an ONNX file, or a PyTorch model (model.pt2, model.pt, module.path:factory), which is
    exported for TARGET first (its exporters in order, its opset ceiling) and proven against torch.

    Exit code 0 when built and verified (or bundled for a device), 1 when the model could not be
    made legal, built or verified (report.md says which stage and why) or, with --strict, a safety
    step was skipped, 2 on bad input or options.
    """
    source = torch_source(model, flags)
    options = BuildOptions(
        legalize=options_from_flags(dynamic_batch=False, **flags),
        precision=None if precision == AUTO else as_precision(precision),
        choose_precision=precision in (None, AUTO),
        artifact_format=artifact_format, fail_on_fallback=fail_on_fallback,
        batch_range=parse_batch_range(batch_range) if batch_range else None,
        shape_ranges=dict(parse_shape_range(text) for text in shape_range), dla_core=dla_core,
        gpu_fallback=gpu_fallback, workspace_mb=workspace_mb, bench=not no_bench, force=force,
        engine_only=engine_only, half_analysis=not no_half_analysis, strict=strict,
        quantize=QuantizeOptions(calibration=calibration, validation=validation, max_drop=max_drop,
                                 metric=metric, allow_fallback=allow_fallback, require_int8=require_int8))
    if source is None and not engine_only:
        from deploycc import io

        io.peek(model, check=True)  # a missing or malformed model is refused before anything is announced
    if outdir is None and not engine_only:
        outdir = _announced_outdir(source.label if source is not None else model, target, jetpack, as_json)
    partition = partition or (not engine_only and flags.get("mode") is None
                              and api.get_target(target, jetpack=jetpack).mode == LegalizeMode.PARTITION)
    report, render = _run_build(model, source, target, Path(outdir) if outdir else None, options, jetpack,
                                engine_only=engine_only, partition=partition,
                                min_segment_nodes=min_segment_nodes, quiet=as_json)
    emit(report, as_json, render)
    ctx.exit(report.exit_code)


def _announced_outdir(label: str, target: str, jetpack: str | None, as_json: bool) -> str:
    """The default OUTDIR (MODEL's stem.TARGET here), said on stderr unless the output is JSON."""
    outdir = str(api.default_outdir(label, api.get_target(target, jetpack=jetpack)))
    if not as_json:
        click.echo(f"deploycc: writing {outdir}/ (no -o given)", err=True)
    return outdir


def _run_build(model: str, source: Any, target: str, outdir: Path | None, options: BuildOptions,
               jetpack: str | None, *, engine_only: bool, partition: bool, min_segment_nodes: int,
               quiet: bool) -> tuple[Any, Callable[[Any], None]]:
    """The build the flags ask for (a torch model's, a partitioned one, or an ONNX model's or device
    bundle's), and the console renderer of its report."""
    from deploycc.report import console
    from deploycc.report.progress import progress_status

    report: Any
    if source is not None and not partition:
        if engine_only:
            raise OptionError("--engine-only takes a device bundle, not a torch model")
        with progress_status("building", quiet=quiet) as update:
            report = api.build_torch(source, target=target, outdir=outdir, options=options, jetpack=jetpack,
                                     progress=update)
        return report, console.render_build
    if partition:
        if engine_only:
            raise OptionError("--partition and --engine-only do not go together")
        with progress_status("building segments", quiet=quiet):
            report = api.build_partitioned(source or model, target, outdir, options, jetpack=jetpack,
                                           min_segment_nodes=min_segment_nodes)
        return report, console.render_partition
    with progress_status("building", quiet=quiet) as update:
        report = api.build(model, target=target, outdir=outdir, options=options, jetpack=jetpack,
                           progress=update)
    return report, console.render_build
