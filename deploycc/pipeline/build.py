"""`deploycc build`: legalize, build the target's engine, verify it against the original, take a
latency summary, and leave everything a deployment needs in one directory, written atomically.

    OUTDIR/model.legalized.onnx   the legalized model (+ .data when large)
    OUTDIR/<artifact>             model.ort.onnx | model.ort | model.xml+bin | model.plan | bundle/
    OUTDIR/manifest.json          reproducibility and cache key (no times, no absolute paths)
    OUTDIR/report.json, report.md the full record, and what a person reads
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.backends.base import Artifact, BackendError, BackendUnavailable, BuildRequest
from deploycc.errors import OptionError, PrecisionRefused
from deploycc.options import BuildOptions
from deploycc.pipeline.outcome import RUN_REFUSED, Clock, listing, next_step_after, summary_of, write_reports
from deploycc.pipeline.placement import plan_placement, write_prediction
from deploycc.records.build import BuildReport
from deploycc.results import SkippedStep
from deploycc.taxonomy import BuildStatus, Failed, Failure, Precision, SafetyStep, Stage
from deploycc.verify.exact import exact_integers
from deploycc.verify.runner import RunError

if TYPE_CHECKING:
    from deploycc.bench.latency import LatencyStats
    from deploycc.fp16 import HalfPrecisionReport
    from deploycc.quantize import QuantizeReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.targets.schema import Target
    from deploycc.verify.verification import Verification

LEGALIZED = "model.legalized.onnx"
VERIFIED, PENDING, FAILED = BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE, BuildStatus.FAILED
NEEDS_INPUTS = BuildStatus.NEEDS_INPUTS


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
    step = Clock(seconds, progress)
    samples = None
    if precision == Precision.INT8:
        from deploycc.quantize import load_samples

        samples = load_samples(source, options.quantize)  # bad data is refused before any work
        # read now: the manifest records the options, not the samples an API caller passed
        options = dataclasses.replace(options, quantize=dataclasses.replace(
            options.quantize, samples=None, validation_samples=None))
    given = (options.legalize.inputs, options.quantize.calibration, options.quantize.validation)
    with io.StagedDirectory(outdir, force=options.force,
                            protect=(source, *(Path(p) for p in given if p is not None))) as staged:
        staging = staged.staging
        if staged.replaces_failed:
            notes.append(f"replaces {outdir}/, which held only the report of a failed build")
        if samples is not None and options.legalize.inputs is None:
            options = _verify_on_a_sample(options, samples.validation[0], staging)
        step("shapes")
        shapes, options = plan_shapes(source, target, options)
        notes += shapes.notes
        done = _stages(source, target, options, staging, backend, step, precision, samples, notes)
        static = _fixed_at_samples(options, done)
        if static is not None:
            # The backend cannot type the graph with these dims dynamic (OpenVINO, a rank that
            # follows the batch): what its hint says, at the sizes verification drew.
            _empty(staging)
            notes.append(f"{target.backend.kind} could not build with dynamic dims ({done.message}); "
                         f"built with them fixed at the verified sizes")
            options = static
            shapes, _ = plan_shapes(source, target, options)
            done = _stages(source, target, options, staging, backend, step, precision, samples, notes)
        if done.original_on_backend and options.legalize.only_passes != ("axes",):
            # Never worse than doing nothing: the backend runs the model as exported and not
            # deploycc's (a deploycc bug), so the result is the one it was given, axes as asked.
            from deploycc.pipeline.legalize import as_exported_options

            _empty(staging)
            failed = f"{target.backend.kind} failed on deploycc's model ({done.message})"
            notes.append(f"{failed} and runs the model as exported: built that one, axes as asked "
                         "(a deploycc bug: please report it)")
            options = dataclasses.replace(options, legalize=as_exported_options(options.legalize))
            done = _stages(source, target, options, staging, backend, step, precision, samples, notes)
            done.original_on_backend = True
        legalized, artifact, verification = done.legalized, done.artifact, done.verification
        _keep_inputs(source, staging, options, done)
        step("manifest")
        environment = backend.environment() if backend.unavailable_reason() is None else \
            {"unavailable": backend.unavailable_reason() or ""}
        from deploycc.pipeline.manifest import build_manifest

        manifest = build_manifest(model=source, target=target, options=options, legalized=legalized,
                                  artifact=artifact, outdir=staging, status=done.status,
                                  environment=environment)
        manifest_text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        (staging / "manifest.json").write_text(manifest_text)
        travelling = backend.device_folder(artifact) if artifact is not None else None
        if travelling is not None:  # the folder that goes to the device carries its manifest
            (staging / travelling / "manifest.json").write_text(manifest_text)
        report = BuildReport(
            model=str(source), target=target.name, outdir=str(outdir), status=done.status, stage=done.stage,
            summary=summary_of(done.status, done.message, target, artifact),
            next_step=next_step_after(done.status, done.stage, done.message, target, artifact),
            precision=done.precision, legalize=legalized, artifact=artifact, verification=verification,
            benchmark=done.benchmark, build_hash=manifest["build_hash"],
            failure_category=done.failure_category, files=listing(staging), seconds=seconds,
            quantization=done.quantization, notes=notes, shapes=shapes, half=done.half,
            original_on_backend=done.original_on_backend, skipped_steps=done.skipped, strict=options.strict)
        step.stop()
        write_reports(staging, report)
        staged.commit()
    return report


@dataclass
class _Done:
    """What the stages inside the staging folder came to."""

    legalized: LegalizeReport
    status: BuildStatus
    stage: Stage
    message: str
    precision: Precision
    artifact: Artifact | None = None
    quantization: QuantizeReport | None = None
    half: HalfPrecisionReport | None = None
    verification: Verification | None = None
    benchmark: LatencyStats | None = None
    failure_category: Failure | None = None
    feeds: dict[str, Any] | None = None  # the inputs the engine was verified on
    original_on_backend: bool | None = None  # BuildReport.original_on_backend
    skipped: list[SkippedStep] = field(default_factory=list)  # BuildReport.skipped_steps


def _stages(source: Path, target: Target, options: BuildOptions, staging: Path, backend: Any, step: Clock,
            precision: Precision, samples: Any, notes: list[str]) -> _Done:
    """Legalize, quantize, build, verify and bench, into the staging folder."""
    from deploycc.pipeline.legalize import legalize

    step("legalize")
    legalized = legalize(source, target, options.legalize, output=staging / LEGALIZED)
    done = _Done(legalized, FAILED, Stage.LEGALIZE, legalized.summary, precision)
    if legalized.verification is not None and legalized.verification.needs_inputs:
        done.status, done.stage = NEEDS_INPUTS, Stage.VERIFY
    engine_model = staging / LEGALIZED
    quantization = None
    if legalized.success and samples is not None:
        from deploycc.quantize import quantize_for_target

        step("quantize")
        quantization = done.quantization = quantize_for_target(staging / LEGALIZED, target, options.quantize,
                                                               samples, staging)
        if options.quantize.require_int8 and quantization.decision != Precision.INT8:
            done.stage = Stage.QUANTIZE
            done.message = f"--require-int8: the guard kept {quantization.decision}: {quantization.reason}"
        else:
            engine_model, done.precision = _engine_input(quantization, staging, notes)
            if quantization.unjudged and done.precision == Precision.INT8:
                done.skipped.append(SkippedStep(SafetyStep.INT8_GUARD, quantization.unjudged))
    if not legalized.success or done.stage == Stage.QUANTIZE:
        return done
    if done.precision in (Precision.FP16, Precision.BF16) and options.half_analysis:
        step(done.precision.value)
        done.half = _half_analysis(source, staging, legalized, options, done.precision, done.skipped)
    elif done.precision in (Precision.FP16, Precision.BF16):
        done.skipped.append(SkippedStep(SafetyStep.half_analysis(done.precision),
                                        "--no-fp16-analysis: every layer builds in "
                                        f"{done.precision}", asked=True))
    step("build")
    done.stage = Stage.BUILD
    placement = plan_placement(staging / LEGALIZED, target, notes)
    request = BuildRequest(
        model=engine_model, outdir=staging, target=target, precision=done.precision,
        fail_on_fallback=options.fail_on_fallback, bundle_only=options.bundle_only,
        calibration_cache=staging / quantization.calibration_cache
        if quantization is not None and quantization.calibration_cache else None,
        fp32_model=staging / LEGALIZED if quantization is not None else None,
        backend_options=backend.backend_options(options),
        fp32_layers=tuple(done.half.kept) if done.half is not None else (),
        min_segment_nodes=placement.min_segment_nodes)
    backend.prepare(request, options)  # the backend's own completion (TensorRT: profiles, the DLA's model)
    try:
        done.artifact = artifact = backend.build(request)
        if artifact.pending_on_device:
            done.status, done.stage, done.message = PENDING, Stage.DONE, artifact.notes[0]
            write_prediction(placement, staging, backend.device_folder(artifact), notes)
            done.feeds = _add_reference(source, staging, artifact, backend, legalized, options,
                                        done.precision, done.skipped)
        else:
            step("verify")
            done.stage = Stage.VERIFY
            done.verification, done.benchmark, done.feeds = _verify_and_bench(
                source, staging, artifact, backend, request, legalized, options, step)
            if done.verification.passed:
                done.status, done.stage, done.message = VERIFIED, Stage.DONE, "verified"
            elif done.verification.needs_inputs:
                done.status, done.message = NEEDS_INPUTS, done.verification.problem
            else:
                done.message = f"verification failed: {done.verification.problem}"
    except (BackendError, BackendUnavailable) as error:
        done.message = str(error)
        done.failure_category = getattr(error, "category", None)
        if getattr(error, "stage", None) == Failed.LOAD:  # the engine built but does not load
            done.stage = Stage.BUILD
        elif getattr(error, "stage", None) == Failed.RUN:  # it loaded and refused the inputs: not a mismatch
            done.failure_category = done.failure_category or Failure.BACKEND_ERROR
            done.message = f"{RUN_REFUSED}: {error}"
        done.original_on_backend = _original_runs_on_backend(backend, request, source, staging, legalized,
                                                             options)
    except RunError as error:  # the reference run, when legalize did not verify
        done.status, done.message = (NEEDS_INPUTS if error.stage == Failed.RUN else FAILED), str(error)
    for judged in (legalized.verification, done.verification):
        if judged is not None and judged.inputs == str(staging / VERIFY_INPUTS):
            judged.inputs = SAMPLE_DESCRIBED  # not the staging path
    return done


def _half_analysis(source: Path, staging: Path, legalized: LegalizeReport, options: BuildOptions,
                   precision: Precision, skipped: list[SkippedStep]) -> HalfPrecisionReport | None:
    """What half precision breaks in the legalized model, on the inputs verification drew, and the
    layers to keep in fp32; None (a skipped step, said) where ORT cannot run the model on them.
    Nameless nodes are named first: the engines find a kept layer by its name."""
    from deploycc.fp16 import analyze_half, name_nodes_in_file
    from deploycc.verify.verification import drawn_content, signature_feeds

    drawn = legalized.verification
    try:
        name_nodes_in_file(staging / LEGALIZED)
        feeds, _, described = signature_feeds(staging / LEGALIZED, options.legalize, legalized.fed_layouts,
                                               drawn.shapes if drawn else None, source, drawn_content(drawn))
        if described == str(staging / VERIFY_INPUTS):
            described = SAMPLE_DESCRIBED
        return analyze_half(staging / LEGALIZED, feeds, precision, inputs=described,
                            tolerance=verification_precision(legalized, precision))
    except (RunError, OptionError) as error:
        why = str(error)
    except Exception as error:  # the analysis is advice: the build goes on in plain {precision}
        why = f"{type(error).__name__}: {str(error).strip()[:200]}"
    skipped.append(SkippedStep(SafetyStep.half_analysis(precision),
                               f"{why}; every layer builds in {precision}"))
    return None


def _fixed_at_samples(options: BuildOptions, done: _Done) -> BuildOptions | None:
    """Options with every dynamic dim fixed at the size verification drew, when the backend could
    not build the graph with them dynamic and some are; else None."""
    drawn = done.legalized.verification
    if done.failure_category != Failure.DYNAMIC_SHAPE or drawn is None or not drawn.shapes:
        return None
    fixed: dict[str, list[int | str]] = {name: list(dims) for name, dims in drawn.shapes.items()}
    if all(options.legalize.shapes.get(name) == dims for name, dims in fixed.items()):
        return None
    legalize = dataclasses.replace(options.legalize, shapes={**options.legalize.shapes, **fixed}, batch=None)
    return dataclasses.replace(options, legalize=legalize, shape_ranges={})


def _empty(folder: Path) -> None:
    import shutil

    for path in folder.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _keep_inputs(source: Path, staging: Path, options: BuildOptions, done: _Done) -> None:
    """verify-inputs.npz, whatever the outcome: the inputs the engine (or, when it was not reached,
    legalization's verification) ran on, so a failure can be reproduced; the reports name it."""
    import numpy as np

    from deploycc.verify.verification import drawn_content, signature_feeds

    target, feeds, legalized = staging / VERIFY_INPUTS, done.feeds, done.legalized
    drawn = legalized.verification
    if options.legalize.inputs is not None or (feeds is None and drawn is None):
        return  # the user's own file (named in the report), or nothing was drawn
    if feeds is None:
        graph_file = staging / LEGALIZED if (staging / LEGALIZED).exists() else source
        try:
            feeds, _, _ = signature_feeds(graph_file, options.legalize, legalized.fed_layouts,
                                          drawn.shapes if drawn else None, source, drawn_content(drawn))
        except Exception:  # the inputs could not be drawn at all: nothing to keep
            return
    np.savez(target, **feeds)
    for judged in (drawn, done.verification):
        if judged is not None:
            judged.inputs_file = VERIFY_INPUTS


VERIFY_INPUTS = "verify-inputs.npz"
SAMPLE_DESCRIBED = f"{VERIFY_INPUTS} (the first validation sample)"


def _verify_on_a_sample(options: BuildOptions, sample: dict[str, Any], staging: Path) -> BuildOptions:
    """Verification feeds a validation sample: an int8 model is calibrated for real data, and
    random inputs outside its ranges would judge the clipping, not the model."""
    import numpy as np

    np.savez(staging / VERIFY_INPUTS, **sample)
    return dataclasses.replace(options, legalize=dataclasses.replace(options.legalize,
                                                                     inputs=staging / VERIFY_INPUTS))


def _engine_input(quantized: QuantizeReport, staging: Path, notes: list[str]) -> tuple[Path, Precision]:
    """The model the backend builds from, and in which precision, after quantization (a backend
    that builds its INT8 from the float model and the scales takes it in `prepare`)."""
    if quantized.decision != Precision.INT8:
        notes.append(f"built in {quantized.decision}: {quantized.reason}")
        return staging / LEGALIZED, quantized.decision
    return staging / quantized.model, Precision.INT8


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


def _add_reference(source: Path, staging: Path, artifact: Artifact, backend: Any, legalized: LegalizeReport,
                   options: BuildOptions, precision: Precision, skipped: list[SkippedStep]) -> dict[str, Any]:
    """The inputs verification drew and the original's outputs on them, for the device to judge
    its engine by; a model ORT cannot run on them leaves the bundle without (said in a note, and
    a skipped verification: the board cannot judge its engine). Returns the inputs."""
    from deploycc.verify.verification import drawn_content, reference_outputs, signature_feeds

    drawn = legalized.verification
    feeds, original_feeds, described = signature_feeds(staging / LEGALIZED, options.legalize,
                                                       legalized.fed_layouts, drawn.shapes if drawn else None,
                                                       source, drawn_content(drawn))
    try:
        expected, _ = reference_outputs(source, original_feeds)
    except RunError as error:
        artifact.notes.append(f"no reference data for the device: {error}")
        skipped.append(SkippedStep(SafetyStep.VERIFICATION, f"no reference data for the device ({error}): "
                                   "the board builds and times the engine but cannot verify it"))
        return feeds
    if described == str(staging / VERIFY_INPUTS):  # the staging path would change every build's hash
        described = SAMPLE_DESCRIBED
    backend.add_reference(artifact, staging, feeds, expected, precision, described)
    return feeds


def _verify_and_bench(source: Path, staging: Path, artifact: Artifact, backend: Any,
                      request: BuildRequest, legalized: LegalizeReport, options: BuildOptions,
                      step: Clock) -> tuple[Verification, LatencyStats | None, dict[str, Any]]:
    """The engine against the original on the inputs legalization verified on; when the engine
    refuses them (OpenVINO's pooling refuses a width the original takes), the next sizes both
    take. Returns the verification, the latency summary and the inputs."""
    from deploycc import io
    from deploycc.bench.latency import measure
    from deploycc.verify.verification import (
        attempts_for,
        compare_all,
        drawn_content,
        drawn_shapes,
        reference_outputs,
        signature_feeds,
        within_backend_on_original,
    )

    drawn = legalized.verification
    candidates: list[dict[str, list[int]] | None] = [drawn.shapes if drawn and drawn.shapes else None]
    if options.legalize.inputs is None:
        model = io.peek(staging / LEGALIZED).model  # read only; signature_feeds peeks at it too
        plain = dataclasses.replace(options.legalize, sample_shapes={})
        first = (drawn.attempt if drawn else 0) + 1
        later = range(first, attempts_for(model.graph, plain, model.metadata_props))
        candidates += [drawn_shapes(model.graph, plain, k, model.metadata_props) for k in later]
    runner = backend.load(artifact, staging, request)
    try:
        refused: BackendError | None = None
        for shapes in candidates:
            feeds, original_feeds, described = signature_feeds(staging / LEGALIZED, options.legalize,
                                                               legalized.fed_layouts, shapes, source,
                                                               drawn_content(drawn))
            try:
                actual = runner.run(feeds)
            except BackendError as error:
                if error.stage != Failed.RUN:
                    raise
                refused = refused or error
                continue
            try:
                expected, reference = reference_outputs(source, original_feeds)
            except RunError as error:
                if error.stage != Failed.RUN or shapes is candidates[0]:
                    raise
                continue  # the engine's fallback size is one the original refuses
            break
        else:
            assert refused is not None
            raise refused
        verification = compare_all(expected, actual, reference=reference, inputs=described,
                                   precision=verification_precision(legalized, request.precision),
                                   original=(source, original_feeds))
        if not verification.passed and not verification.needs_inputs:
            on_original = _backend_on_original(backend, request, source, staging, original_feeds)
            if on_original is not None:
                within_backend_on_original(verification, expected, on_original)
        verification.shapes = {name: list(array.shape) for name, array in feeds.items()}
        benchmark = None
        if options.bench and verification.passed:
            step("bench")
            benchmark = measure(runner, feeds, iterations=options.bench_iterations)
        return verification, benchmark, feeds
    finally:
        runner.close()


def _asks_backend_on_original(request: BuildRequest) -> bool:
    """Whether the backend's result on the model as exported says anything here: not for a
    bundle-only target (nothing runs here), nor for int8 builds, whose float original says nothing
    of the quantized engine's rounding."""
    return not (request.precision == Precision.INT8 or request.fp32_model is not None or request.bundle_only)


def _backend_on_original(backend: Any, request: BuildRequest, source: Path, staging: Path,
                         feeds: dict[str, Any]) -> dict[str, Any] | None:
    """The backend's own outputs for the model as exported, where it builds and runs it here (what
    a user gets without deploycc); None where it does not (an op it lacks, a bundle-only target), and
    for int8 builds, whose float original says nothing of the quantized engine's rounding."""
    if not _asks_backend_on_original(request):
        return None
    folder = staging / ".as-exported-engine"
    try:
        original = dataclasses.replace(request, model=source, outdir=folder)
        folder.mkdir(exist_ok=True)
        runner = backend.load(backend.build(original), folder, original)
        try:
            return runner.run(feeds)
        finally:
            runner.close()
    except Exception:  # whatever the backend raises of the original: no comparison, as before
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _original_runs_on_backend(backend: Any, request: BuildRequest, source: Path, staging: Path,
                              legalized: LegalizeReport, options: BuildOptions) -> bool | None:
    """Whether the backend builds and runs the model as exported, on the inputs verification drew,
    asked where it failed on deploycc's model: True is worse than doing nothing. None where it cannot
    be asked here (_asks_backend_on_original) or the inputs cannot be drawn."""
    from deploycc.verify.verification import drawn_content, signature_feeds

    if not _asks_backend_on_original(request):
        return None
    drawn = legalized.verification
    try:
        _, original_feeds, _ = signature_feeds(staging / LEGALIZED, options.legalize, legalized.fed_layouts,
                                               drawn.shapes if drawn and drawn.shapes else None, source,
                                               drawn_content(drawn))
    except Exception:  # no inputs to ask with: not asked
        return None
    return _backend_on_original(backend, request, source, staging, original_feeds) is not None


def verification_precision(legalized: LegalizeReport, precision: Precision) -> Precision:
    from deploycc.pipeline.manager import source_ops
    from deploycc.verify.verification import computes_in_float16, tolerance_precision

    return tolerance_precision(source_ops(legalized.passes), precision,
                               float16=computes_in_float16(Path(legalized.source)))
