"""`deploycc build`: legalize, build the target's engine, verify it against the original, take a
latency summary, and leave everything a deployment needs in one directory, written atomically.

    OUTDIR/model.legalized.onnx   the legalized model (+ .data when large)
    OUTDIR/<artifact>             model.ort.onnx | model.ort | model.xml+bin | model.plan | bundle/
    OUTDIR/manifest.json          reproducibility and cache key (no times, no absolute paths)
    OUTDIR/report.json, report.md the full record, and what a person reads

The build is the stage list of pipeline/build_stages.py run over one build context by the runner
(pipeline/stages.py), with its retries; this module opens the output directory, plans the shapes,
and writes the manifest and the reports from the context the stages leave.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError, PrecisionRefused
from deploycc.options import BuildOptions
from deploycc.pipeline.build_stages import BUILD_STAGES
from deploycc.pipeline.context import LEGALIZED, SAMPLE_DESCRIBED, VERIFY_INPUTS, BuildContext
from deploycc.pipeline.outcome import Clock, listing, next_step_after, summary_of, write_reports
from deploycc.pipeline.stages import as_exported, fixed_at_drawn_sizes, run_with_retries
from deploycc.records.build import BuildReport
from deploycc.taxonomy import Precision
from deploycc.verify.exact import exact_integers

if TYPE_CHECKING:
    from deploycc.records.shapes import ShapePlan
    from deploycc.targets.schema import Target

__all__ = ["LEGALIZED", "SAMPLE_DESCRIBED", "VERIFY_INPUTS", "build", "resolve_precision"]


def build(model: str | Path, target: Target, outdir: str | Path, options: BuildOptions | None = None,
          *, progress: Callable[[str], None] | None = None) -> BuildReport:
    """Legalize, build the engine, verify and time it. A model bound for a GPU is judged against
    the spec's integer arithmetic (verify/exact.py), as the GPU computes it."""
    with exact_integers(target.device.kind == "GPU"):
        return _build(model, target, outdir, options, progress=progress)


def _build(model: str | Path, target: Target, outdir: str | Path, options: BuildOptions | None = None,
           *, progress: Callable[[str], None] | None = None) -> BuildReport:
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.pipeline.shape_policy import plan_shapes
    from deploycc.quantize import check_ready

    options = options or BuildOptions()
    source, outdir = Path(model), Path(outdir)
    precision, notes = resolve_precision(options, target)
    check_ready(target, precision, options.quantize)  # a tool missing, --require-int8 unmet: before any work
    backend = get_backend(target.backend.kind)
    seconds: dict[str, float] = {}
    clock = Clock(seconds, progress)
    samples, options = _samples(source, options, precision)
    given = (options.legalize.inputs, options.quantize.calibration, options.quantize.validation)
    with io.StagedDirectory(outdir, force=options.force,
                            protect=(source, *(Path(p) for p in given if p is not None))) as staged:
        staging = staged.staging
        if staged.replaces_failed:
            notes.append(f"replaces {outdir}/, which held only the report of a failed build")
        if samples is not None and options.legalize.inputs is None:
            options = _verify_on_a_sample(options, samples.validation[0], staging)
        clock("shapes")
        shapes, options = plan_shapes(source, target, options)
        notes += shapes.notes

        def start(options: BuildOptions, shapes: ShapePlan | None) -> BuildContext:
            return BuildContext(source=source, target=target, options=options, staging=staging,
                                backend=backend, precision=precision, clock=clock, notes=notes,
                                samples=samples, shapes=shapes)

        context = run_with_retries(start, options, shapes, lambda context: BUILD_STAGES,
                                   (fixed_at_drawn_sizes, as_exported))
        _describe_inputs(context)
        _keep_inputs(context)
        clock("manifest")
        manifest = _write_manifest(context)
        report = _report(context, outdir, manifest["build_hash"], seconds)
        clock.stop()
        write_reports(staging, report)
        staged.commit()
    return report


def _samples(source: Path, options: BuildOptions, precision: Precision) -> tuple[Any, BuildOptions]:
    """An int8 build's calibration and validation samples, read before any work (bad data is refused
    then), and the options without the arrays an API caller passed: the manifest records the options,
    not the samples."""
    if precision != Precision.INT8:
        return None, options
    from deploycc.quantize import load_samples

    samples = load_samples(source, options.quantize)
    return samples, dataclasses.replace(options, quantize=dataclasses.replace(
        options.quantize, samples=None, validation_samples=None))


def _write_manifest(context: BuildContext) -> dict[str, Any]:
    """manifest.json, in the output folder and in the folder that travels to the device."""
    from deploycc.pipeline.manifest import build_manifest

    backend, artifact = context.backend, context.artifact
    environment = backend.environment() if backend.unavailable_reason() is None else \
        {"unavailable": backend.unavailable_reason() or ""}
    assert context.legalized is not None
    manifest = build_manifest(model=context.source, target=context.target, options=context.options,
                              legalized=context.legalized, artifact=artifact, outdir=context.staging,
                              status=context.status, environment=environment)
    manifest_text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (context.staging / "manifest.json").write_text(manifest_text)
    travelling = artifact.device_folder if artifact is not None else None
    if travelling is not None:  # the folder that goes to the device carries its manifest
        (context.staging / travelling / "manifest.json").write_text(manifest_text)
    return manifest


def _report(context: BuildContext, outdir: Path, build_hash: str, seconds: dict[str, float]) -> BuildReport:
    c = context
    return BuildReport(
        model=str(c.source), target=c.target.name, outdir=str(outdir), status=c.status, stage=c.stage,
        summary=summary_of(c.status, c.message, c.target, c.artifact),
        next_step=next_step_after(c.status, c.stage, c.message, c.target, c.artifact),
        precision=c.precision, legalize=c.legalized, artifact=c.artifact, verification=c.verification,
        benchmark=c.benchmark, build_hash=build_hash, failure_category=c.failure_category,
        files=listing(c.staging), seconds=seconds, quantization=c.quantization, notes=c.notes,
        shapes=c.shapes, half=c.half, original_on_backend=c.original_on_backend, skipped_steps=c.skipped,
        strict=c.options.strict)


def _describe_inputs(context: BuildContext) -> None:
    """The verifications name an int8 build's sample by its file name, not the staging path."""
    drawn = context.legalized.verification if context.legalized is not None else None
    for judged in (drawn, context.verification):
        if judged is not None and judged.inputs is not None:
            judged.inputs = context.described(judged.inputs)


def _keep_inputs(context: BuildContext) -> None:
    """verify-inputs.npz, whatever the outcome: the inputs the engine (or, when it was not reached,
    legalization's verification) ran on, so a failure can be reproduced; the reports name it."""
    import numpy as np

    feeds: dict[str, Any] | None = context.feeds
    drawn = context.legalized.verification if context.legalized is not None else None
    if context.options.legalize.inputs is not None or (feeds is None and drawn is None):
        return  # the user's own file (named in the report), or nothing was drawn
    if feeds is None:
        try:
            feeds = context.inputs().feeds
        except Exception:  # the inputs could not be drawn at all: nothing to keep
            return
    np.savez(context.staging / VERIFY_INPUTS, **feeds)
    for judged in (drawn, context.verification):
        if judged is not None:
            judged.inputs_file = VERIFY_INPUTS


def _verify_on_a_sample(options: BuildOptions, sample: dict[str, Any], staging: Path) -> BuildOptions:
    """Verification feeds a validation sample: an int8 model is calibrated for real data, and
    random inputs outside its ranges would judge the clipping, not the model."""
    import numpy as np

    np.savez(staging / VERIFY_INPUTS, **sample)
    return dataclasses.replace(options, legalize=dataclasses.replace(options.legalize,
                                                                     inputs=staging / VERIFY_INPUTS))


def resolve_precision(options: BuildOptions, target: Target) -> tuple[Precision, list[str]]:
    """The precision to build in, and a note when a fallback was taken (`--allow-fallback`); a
    precision the target declares it lacks is refused (PrecisionRefused, which the audit maps)."""
    precision = options.effective_precision(target)
    if precision in target.precision.supported:
        return precision, []
    refusal = target.precision.refusal(precision)
    if refusal is not None and options.quantize.allow_fallback:
        reason, instead = refusal
        return instead, [f"built in {instead}, not {precision}: {reason}"]
    if refusal is not None:
        reason, instead = refusal
        raise PrecisionRefused(target.name, precision, reason, instead)
    raise OptionError(f"{target.name} does not support precision {precision}",
                      hint=f"supported: {', '.join(target.precision.supported)}")
