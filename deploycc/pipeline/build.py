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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.backends.base import Artifact, BackendError, BackendUnavailable, BuildRequest, Profile
from deploycc.errors import EXIT_FINDINGS, EXIT_OK, OptionError
from deploycc.options import BuildOptions
from deploycc.results import Result
from deploycc.taxonomy import BuildStatus
from deploycc.verify.inputs import SYMBOLIC_DIM_SIZE, SYMBOLIC_SIZE_LADDER
from deploycc.verify.runner import RunError

if TYPE_CHECKING:
    from deploycc.bench.latency import LatencyStats
    from deploycc.pipeline.legalize import LegalizeReport
    from deploycc.quantize import QuantizeReport
    from deploycc.targets.schema import Target
    from deploycc.verify.verification import Verification

LEGALIZED = "model.legalized.onnx"
VERIFIED, PENDING, FAILED = BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE, BuildStatus.FAILED
NEEDS_INPUTS = BuildStatus.NEEDS_INPUTS


@dataclass
class BuildReport(Result):
    model: str
    target: str
    outdir: str
    status: str  # verified | pending-on-device | failed
    stage: str  # the last stage reached: legalize | build | verify | bench | done
    summary: str
    next_step: str
    precision: str
    legalize: LegalizeReport | None
    artifact: Artifact | None
    verification: Verification | None
    benchmark: LatencyStats | None
    build_hash: str = ""
    failure_category: str | None = None  # the backend's own failure category, when it gave one
    files: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    quantization: QuantizeReport | None = None  # --precision int8: how it was quantized and judged
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_FINDINGS if self.status in (FAILED, NEEDS_INPUTS) else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["exit_code"] = self.exit_code
        return data


def _next_step(status: str, stage: str, message: str, target: Target) -> str:
    if status == VERIFIED:
        return "deploy the artifact; `deploycc bench` for a full benchmark"
    if status == PENDING:
        return ("copy bundle/ to the device, run `python3 run_on_device.py` there (builds, verifies and "
                "times the engine), then `deploycc device import OUTDIR bundle/result.json`")
    if status == NEEDS_INPUTS:
        return "give inputs the model takes: --inputs data.npz (one array per input name)"
    return {
        "legalize": "see the illegal nodes below: `deploycc check --explain` names the rule each needs; "
                    "a missing rule or a different target/opset is the way forward",
        "build": f"the {target.backend.kind} build failed: {message}",
        "verify": "the engine differs from the original beyond the precision's tolerance: try a higher "
                  "precision (--precision fp32) or inspect the output named above",
    }.get(stage, message)


def build(model: str | Path, target: Target, outdir: str | Path, options: BuildOptions | None = None,
          *, progress: Callable[[str], None] | None = None) -> BuildReport:
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.pipeline.legalize import legalize

    options = options or BuildOptions()
    source, outdir = Path(model), Path(outdir)
    precision, notes = _precision(options, target)
    if options.batch_range is not None:
        options.legalize.dynamic_batch = True
    backend = get_backend(target.backend.kind)
    seconds: dict[str, float] = {}
    step = _Clock(seconds, progress)
    samples = None
    if precision == "int8":
        from deploycc.quantize import load_samples

        samples = load_samples(source, options.quantize)  # bad data is refused before any work
        # read now: the manifest records the options, not the samples an API caller passed
        options = dataclasses.replace(options, quantize=dataclasses.replace(
            options.quantize, samples=None, validation_samples=None))
    with io.StagedDirectory(outdir, force=options.force, protect=(source,)) as staged:
        staging = staged.staging
        if samples is not None and options.legalize.inputs is None:
            options = _verify_on_a_sample(options, samples.validation[0], staging)
        step("legalize")
        legalized = legalize(source, target, options.legalize, output=staging / LEGALIZED)
        artifact: Artifact | None = None
        quantization = None
        verification = None
        benchmark = None
        status, stage, message = FAILED, "legalize", legalized.summary
        failure_category: str | None = None
        if legalized.verification is not None and legalized.verification.needs_inputs:
            status, stage = NEEDS_INPUTS, "verify"
        engine_model = staging / LEGALIZED
        if legalized.success and samples is not None:
            from deploycc.quantize import quantize_for_target

            step("quantize")
            quantization = quantize_for_target(staging / LEGALIZED, target, options.quantize, samples,
                                               staging)
            engine_model, precision = _engine_input(quantization, options, staging, notes)
        if legalized.success:
            step("build")
            stage = "build"
            request = BuildRequest(
                model=engine_model, outdir=staging, target=target, precision=precision,
                artifact_format=options.artifact_format, dla_core=options.dla_core,
                gpu_fallback=options.gpu_fallback, fail_on_fallback=options.fail_on_fallback,
                workspace_mb=options.workspace_mb, bundle_only=options.bundle_only,
                calibration_cache=staging / quantization.calibration_cache
                if quantization is not None and quantization.calibration_cache else None,
                fp32_model=staging / LEGALIZED if quantization is not None else None)
            backend.prepare(request, options)
            try:
                artifact = backend.build(request)
                if artifact.pending_on_device:
                    status, stage, message = PENDING, "done", artifact.notes[0]
                    _add_reference(source, staging, artifact, backend, legalized, options, precision)
                else:
                    step("verify")
                    stage = "verify"
                    verification, benchmark = _verify_and_bench(source, staging, artifact, backend,
                                                                request, legalized, options, step)
                    if verification.passed:
                        status, stage, message = VERIFIED, "done", "verified"
                    else:
                        status, message = FAILED, f"verification failed: {verification.problem}"
            except (BackendError, BackendUnavailable) as error:
                message = str(error)
                failure_category = getattr(error, "category", None)
                if getattr(error, "stage", None) == "load":  # the engine built but does not load
                    stage = "build"
            except RunError as error:  # the reference run, when legalize did not verify
                status, message = (NEEDS_INPUTS if error.stage == "run" else FAILED), str(error)
        for judged in (legalized.verification, verification):
            if judged is not None and judged.inputs == str(staging / VERIFY_INPUTS):
                judged.inputs = f"{VERIFY_INPUTS} (the first validation sample)"  # not the staging path
        step("manifest")
        environment = backend.environment() if backend.unavailable_reason() is None else \
            {"unavailable": backend.unavailable_reason() or ""}
        from deploycc.pipeline.manifest import build_manifest

        manifest = build_manifest(model=source, target=target, options=options, legalized=legalized,
                                  artifact=artifact, outdir=staging, status=status, environment=environment)
        manifest_text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        (staging / "manifest.json").write_text(manifest_text)
        if artifact is not None and artifact.kind == "device-bundle":
            (staging / "bundle" / "manifest.json").write_text(manifest_text)
        report = BuildReport(
            model=str(source), target=target.name, outdir=str(outdir), status=status, stage=stage,
            summary=_summary(status, message, target, artifact),
            next_step=_next_step(status, stage, message, target),
            precision=precision, legalize=legalized, artifact=artifact, verification=verification,
            benchmark=benchmark, build_hash=manifest["build_hash"], failure_category=failure_category,
            files=_listing(staging), seconds=seconds, quantization=quantization, notes=notes)
        step.stop()
        _write_reports(staging, report)
        staged.commit()
    return report


VERIFY_INPUTS = "verify-inputs.npz"


def _verify_on_a_sample(options: BuildOptions, sample: dict[str, Any], staging: Path) -> BuildOptions:
    """Verification feeds a validation sample: an int8 model is calibrated for real data, and
    random inputs outside its ranges would judge the clipping, not the model."""
    import numpy as np

    np.savez(staging / VERIFY_INPUTS, **sample)
    return dataclasses.replace(options, legalize=dataclasses.replace(options.legalize,
                                                                     inputs=staging / VERIFY_INPUTS))


def _engine_input(quantized: QuantizeReport, options: BuildOptions, staging: Path,
                  notes: list[str]) -> tuple[Path, str]:
    """The model the backend builds from, and in which precision, after quantization."""
    if quantized.decision != "int8":
        notes.append(f"built in {quantized.decision}: {quantized.reason}")
        return staging / LEGALIZED, quantized.decision
    if options.dla_core is not None and quantized.calibration_cache:
        # The DLA takes implicit INT8 only: the fp32 model with the calibration cache.
        return staging / LEGALIZED, "int8"
    return staging / quantized.model, "int8"


def _precision(options: BuildOptions, target: Target) -> tuple[str, list[str]]:
    """The precision to build in, and a note when a fallback was taken (`--allow-fallback`)."""
    precision = options.effective_precision(target)
    if precision in target.precision.supported:
        return precision, []
    refusal = target.precision.refusal(precision)
    if refusal is not None and options.quantize.allow_fallback:
        reason, instead = refusal
        return instead, [f"built in {instead}, not {precision}: {reason}"]
    if refusal is not None:
        reason, instead = refusal
        raise OptionError(f"{target.name} has no {precision}: {reason}",
                          hint=f"use --precision {instead}, or --allow-fallback to build {instead} instead")
    raise OptionError(f"{target.name} does not support precision {precision}",
                      hint=f"supported: {', '.join(target.precision.supported)}")


def _add_reference(source: Path, staging: Path, artifact: Artifact, backend: Any, legalized: LegalizeReport,
                   options: BuildOptions, precision: str) -> None:
    """The inputs verification drew and the original's outputs on them, for the device to judge
    its engine by; a model ORT cannot run on them leaves the bundle without (said in a note)."""
    from deploycc.verify.verification import reference_outputs, signature_feeds

    drawn = legalized.verification
    size = drawn.symbolic_size if drawn else SYMBOLIC_DIM_SIZE
    feeds, original_feeds, described = signature_feeds(staging / LEGALIZED, options.legalize,
                                                       legalized.fed_layouts, size)
    try:
        expected, _ = reference_outputs(source, original_feeds)
    except RunError as error:
        artifact.notes.append(f"no reference data for the device: {error}")
        return
    backend.add_reference(artifact, staging, feeds, expected, precision, described)


def _listing(staging: Path) -> list[str]:
    """Every file the output directory will hold, the two reports written last included."""
    files = [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()]
    return sorted([*files, "report.json", "report.md"])


def _write_reports(staging: Path, report: BuildReport) -> None:
    from deploycc.report.markdown import build_markdown

    (staging / "report.json").write_text(report.to_json() + "\n")
    (staging / "report.md").write_text(build_markdown(report))


def _verify_and_bench(source: Path, staging: Path, artifact: Artifact, backend: Any,
                      request: BuildRequest, legalized: LegalizeReport, options: BuildOptions,
                      step: _Clock) -> tuple[Verification, LatencyStats | None]:
    from deploycc.bench.latency import measure
    from deploycc.verify.verification import compare_all, reference_outputs, signature_feeds

    drawn = legalized.verification
    size = drawn.symbolic_size if drawn else SYMBOLIC_DIM_SIZE
    # Larger symbolic dims while the engine rejects the drawn ones (OpenVINO's pooling refuses a
    # width the original takes): a smaller size says nothing about the engine.
    sizes = [s for s in SYMBOLIC_SIZE_LADDER if s >= size] if options.legalize.inputs is None else [size]
    runner = backend.load(artifact, staging, request)
    try:
        for size in sizes:
            feeds, original_feeds, described = signature_feeds(staging / LEGALIZED, options.legalize,
                                                               legalized.fed_layouts, size)
            try:
                actual = runner.run(feeds)
                break
            except BackendError as error:
                if error.stage != "run" or size == sizes[-1]:
                    raise
        expected, reference = reference_outputs(source, original_feeds)
        verification = compare_all(expected, actual, reference=reference, inputs=described,
                                   precision=verification_precision(legalized, request.precision),
                                   original=(source, original_feeds))
        benchmark = None
        if options.bench and verification.passed:
            step("bench")
            benchmark = measure(runner, feeds, iterations=options.bench_iterations)
        return verification, benchmark
    finally:
        runner.close()


def verification_precision(legalized: LegalizeReport, precision: str) -> str:
    from deploycc.pipeline.manager import source_ops
    from deploycc.verify.verification import tolerance_precision

    return tolerance_precision(source_ops(legalized.passes), precision)


def _summary(status: str, message: str, target: Target, artifact: Artifact | None) -> str:
    if status == VERIFIED and artifact is not None:
        return f"built {artifact.kind} for {target.name} and verified it against the original"
    if status == PENDING:
        return f"legalized and bundled for {target.name}; the TensorRT engine is pending on the device"
    return message


class _Clock:
    """Times each stage and tells the progress display which one is running."""

    def __init__(self, seconds: dict[str, float], progress: Callable[[str], None] | None) -> None:
        self.seconds, self.progress = seconds, progress
        self.current: str | None = None
        self.started = time.perf_counter()

    def __call__(self, stage: str) -> None:
        self.stop()
        self.current, self.started = stage, time.perf_counter()
        if self.progress is not None:
            self.progress(stage)

    def stop(self) -> None:
        if self.current is not None:
            self.seconds[self.current] = round(time.perf_counter() - self.started, 3)
            self.current = None


def build_from_bundle(bundle_path: Path, outdir: Path | None, options: BuildOptions, *,
                      target: str | None, jetpack: str | None,
                      progress: Callable[[str], None] | None = None) -> BuildReport:
    """On the device: build, verify and time the engine a device bundle describes."""
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.backends.tensorrt import bundle as bundles
    from deploycc.targets import registry
    from deploycc.verify.inputs import generate

    if not bundles.is_bundle(bundle_path):
        raise OptionError(f"{bundle_path}: not a device bundle (no {bundles.BUNDLE_FILE})",
                          hint="--engine-only takes the bundle/ folder that `deploycc build` wrote")
    settings = bundles.read_bundle(bundle_path)["settings"]
    if target not in (None, "ort-cpu", settings["target"]):
        raise OptionError(f"the bundle was made for {settings['target']}, not {target}")
    resolved = registry.resolve(settings["target"], jetpack or settings.get("jetpack"))
    backend = get_backend("tensorrt")
    reason = backend.unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"cannot build the engine here: {reason}",
                                 hint=f"run this on the {settings['target']}")
    outdir = outdir or bundle_path.parent / "engine"
    seconds: dict[str, float] = {}
    step = _Clock(seconds, progress)
    model = bundle_path / bundles.MODEL_NAME
    with io.StagedDirectory(outdir, force=options.force, protect=(bundle_path,)) as staged:
        staging = staged.staging
        step("build")
        request = BuildRequest(
            model=model, outdir=staging, target=resolved, precision=settings["precision"],
            profiles=[Profile(p["input"], p["min"], p["opt"], p["max"]) for p in settings["profiles"]],
            dla_core=settings["dla_core"], gpu_fallback=settings["gpu_fallback"],
            workspace_mb=settings["workspace_mb"], timing_cache=bundle_path / bundles.TIMING_CACHE)
        verification, benchmark, status, stage = None, None, FAILED, "build"
        try:
            artifact: Artifact | None = backend.build(request)
            step("verify")
            stage = "verify"
            graph = io.load(model, check=False).model.graph
            feeds = generate([v for v in graph.inputs if v.name not in graph.initializers], seed=0)
            from deploycc.verify.verification import compare_all, reference_outputs

            expected, reference = reference_outputs(model, feeds)
            assert artifact is not None
            runner = backend.load(artifact, staging, request)
            try:
                verification = compare_all(expected, runner.run(feeds), reference=reference,
                                           inputs="generated (seed 0)", precision=request.precision,
                                           original=(model, feeds))
                if options.bench and verification.passed:
                    from deploycc.bench.latency import measure

                    step("bench")
                    benchmark = measure(runner, feeds, iterations=options.bench_iterations)
            finally:
                runner.close()
            status, stage = (VERIFIED, "done") if verification.passed else (FAILED, "verify")
            message = "verified" if verification.passed else f"verification failed: {verification.problem}"
        except BackendError as error:
            artifact, message = None, str(error)
        step.stop()
        report = BuildReport(
            model=str(model), target=resolved.name, outdir=str(outdir), status=status, stage=stage,
            summary=_summary(status, message, resolved, artifact),
            next_step=_next_step(status, stage, message, resolved), precision=request.precision,
            legalize=None, artifact=artifact, verification=verification, benchmark=benchmark,
            files=_listing(staging), seconds=seconds)
        _write_reports(staging, report)
        staged.commit()
    return report
