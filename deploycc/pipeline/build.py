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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError, PrecisionRefused
from deploycc.options import BuildOptions
from deploycc.pipeline.build_stages import BUILD_STAGES
from deploycc.pipeline.context import (
    LEGALIZED,
    SAMPLE_DESCRIBED,
    VERIFY_INPUTS,
    BuildContext,
    verifying_on_sample,
)
from deploycc.pipeline.outcome import Clock, listing, next_step_after, summary_of, write_reports
from deploycc.pipeline.stages import BuildStage, as_exported, fixed_at_drawn_sizes, run_with_retries
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

    source, outdir = Path(model), Path(outdir)
    prepared = prepare(source, target, options or BuildOptions())  # bad options or data: before any work
    given = (prepared.options.legalize.inputs, prepared.options.quantize.calibration,
             prepared.options.quantize.validation)
    with io.StagedDirectory(outdir, force=prepared.options.force,
                            protect=(source, *(Path(p) for p in given if p is not None))) as staged:
        if staged.replaces_failed:
            prepared.notes.append(f"replaces {outdir}/, which held only the report of a failed build")
        context = run_build(staged.staging, source, target, prepared, progress=progress)
        report = report_of(context, outdir)
        write_reports(staged.staging, report)
        staged.commit()
    return report


@dataclass
class Prepared:
    """What a build settles before any work: the precision it builds in (and the note of a fallback
    taken), the int8 samples read, and the options the manifest records."""

    options: BuildOptions
    precision: Precision
    notes: list[str]
    samples: Any = None


def prepare(source: Path, target: Target, options: BuildOptions) -> Prepared:
    """The precision (refused where the target lacks it), the tools it needs (a tool missing,
    --require-int8 unmet), and the int8 samples (bad data refused): before any folder is made."""
    from deploycc.quantize import check_ready

    precision, notes = resolve_precision(options, target)
    check_ready(target, precision, options.quantize)
    samples, options = _samples(source, target, options, precision)
    return Prepared(options, precision, notes, samples)


def run_build(staging: Path, source: Path, target: Target, prepared: Prepared, *,
              progress: Callable[[str], None] | None = None,
              after: tuple[BuildStage[BuildContext], ...] = ()) -> BuildContext:
    """The build's stage list in `staging` (a folder the caller holds), with its retries: the shape
    plan, then BUILD_STAGES, the caller's stages `after` them (the torch front end's proof), and the
    stages every build ends with (its inputs kept, its manifest). Returns the context it ended with."""
    from deploycc.backends.registry import get_backend
    from deploycc.pipeline.shape_policy import plan_shapes

    backend = get_backend(target.backend.kind)
    clock = Clock({}, progress)
    options, samples, notes = prepared.options, prepared.samples, prepared.notes
    if samples is not None and options.legalize.inputs is None:
        options = verifying_on_sample(options, samples.validation[0], staging / VERIFY_INPUTS)
    clock("shapes")
    shapes, options = plan_shapes(source, target, options)
    notes += shapes.notes

    def start(options: BuildOptions, shapes: ShapePlan | None) -> BuildContext:
        return BuildContext(source=source, target=target, options=options, staging=staging, backend=backend,
                            precision=prepared.precision, clock=clock, notes=notes, samples=samples,
                            shapes=shapes)

    stages = (*BUILD_STAGES, *after, *FINISHING_STAGES)
    context = run_with_retries(start, options, shapes, lambda context: stages,
                               (fixed_at_drawn_sizes, as_exported))
    clock.stop()
    return context


def _samples(source: Path, target: Target, options: BuildOptions,
             precision: Precision) -> tuple[Any, BuildOptions]:
    """An int8 build's (or an int8 candidate's) calibration and validation samples, read before
    any work (bad data is refused then), and the options without the arrays an API caller passed:
    the manifest records the options, not the samples."""
    int8_candidate = options.searches_precision and Precision.INT8 in target.precision.supported and (
        options.quantize.calibration is not None or options.quantize.samples is not None)
    if precision != Precision.INT8 and not int8_candidate:
        return None, options
    from deploycc.quantize import load_samples

    samples = load_samples(source, options.quantize)
    return samples, dataclasses.replace(options, quantize=dataclasses.replace(
        options.quantize, samples=None, validation_samples=None))


def _manifest_stage(context: BuildContext) -> None:
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
    context.build_hash = manifest["build_hash"]


def report_of(context: BuildContext, outdir: Path) -> BuildReport:
    """The build's record, from the context its stages left."""
    c = context
    return BuildReport(
        model=str(c.source), target=c.target.name, outdir=str(outdir), status=c.status, stage=c.stage,
        summary=summary_of(c.status, c.message, c.target, c.artifact),
        next_step=c.next_step or next_step_after(c.status, c.stage, c.message, c.target, c.artifact),
        precision=c.precision, legalize=c.legalized, artifact=c.artifact, verification=c.verification,
        benchmark=c.benchmark, build_hash=c.build_hash, failure_category=c.failure_category,
        files=listing(c.staging), seconds=c.clock.seconds, peak_rss_mib=c.clock.peak_mib,
        quantization=c.quantization, notes=c.notes,
        shapes=c.shapes, half=c.half, precision_choice=c.precision_choice,
        original_on_backend=c.original_on_backend, skipped_steps=c.skipped,
        strict=c.options.strict)


def _describe_inputs_stage(context: BuildContext) -> None:
    """The verifications name an int8 build's sample by its file name, not the staging path."""
    drawn = context.legalized.verification if context.legalized is not None else None
    for judged in (drawn, context.verification):
        if judged is not None and judged.inputs is not None:
            judged.inputs = context.described(judged.inputs)


def _keep_inputs_stage(context: BuildContext) -> None:
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


# What every build ends with, however its stages ended it
FINISHING_STAGES: tuple[BuildStage[BuildContext], ...] = (
    BuildStage("describe-inputs", _describe_inputs_stage, label=lambda c: None, always=True),
    BuildStage("keep-inputs", _keep_inputs_stage, label=lambda c: None, always=True),
    BuildStage("manifest", _manifest_stage, always=True),
)


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
