"""`deploycc build --engine-only BUNDLE`, on the device: build, verify and time the engine a device
bundle describes, and write the reports `build` writes. A stage list over the build context, as
`build` is: the bundle's model stands where a legalized one would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from deploycc.backends.base import BackendError, BackendUnavailable
from deploycc.device.bundle import BUNDLE_FILE, is_bundle, read_bundle
from deploycc.errors import OptionError
from deploycc.options import BuildOptions
from deploycc.pipeline.build_stages import bench_stage
from deploycc.pipeline.context import BuildContext
from deploycc.pipeline.outcome import Clock, listing, next_step_after, summary_of, write_reports
from deploycc.pipeline.stages import BuildStage, run_stages
from deploycc.records.build import BuildReport
from deploycc.taxonomy import BuildStatus, Stage


def build_from_bundle(bundle_path: Path, outdir: Path | None, options: BuildOptions, *,
                      target: str | None, jetpack: str | None,
                      progress: Callable[[str], None] | None = None) -> BuildReport:
    """On the device: build, verify and time the engine a device bundle describes."""
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.targets import registry

    if not is_bundle(bundle_path):
        raise OptionError(f"{bundle_path}: not a device bundle (no {BUNDLE_FILE})",
                          hint="--engine-only takes the bundle/ folder that `deploycc build` wrote")
    settings = read_bundle(bundle_path)["settings"]
    if target not in (None, "ort-cpu", settings["target"]):
        raise OptionError(f"the bundle was made for {settings['target']}, not {target}")
    resolved = registry.resolve(settings["target"], jetpack or settings.get("jetpack"))
    backend = get_backend(resolved.backend.kind)
    reason = backend.unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"cannot build the engine here: {reason}",
                                 hint=f"run this on the {settings['target']}")
    outdir = outdir or bundle_path.parent / "engine"
    seconds: dict[str, float] = {}
    with io.StagedDirectory(outdir, force=options.force, protect=(bundle_path,)) as staged:
        if backend.stages.bundle_request is None:
            raise OptionError(f"{backend.kind} writes no device bundle to build an engine from")
        request = backend.stages.bundle_request(bundle_path, staged.staging, resolved)
        context = BuildContext(source=request.model, target=resolved, options=options, staging=staged.staging,
                               backend=backend, precision=request.precision, clock=Clock(seconds, progress),
                               notes=[], request=request, stage=Stage.BUILD)
        run_stages(context, ENGINE_ONLY_STAGES)
        context.clock.stop()
        status, stage, message = context.status, context.stage, context.message
        report = BuildReport(
            model=str(request.model), target=resolved.name, outdir=str(outdir), status=status, stage=stage,
            summary=summary_of(status, message, resolved, context.artifact),
            next_step=next_step_after(status, stage, message, resolved),
            precision=request.precision, legalize=None, artifact=context.artifact,
            verification=context.verification, benchmark=context.benchmark, files=listing(staged.staging),
            seconds=seconds)
        write_reports(staged.staging, report)
        staged.commit()
    return report


def _engine_stage(context: BuildContext) -> None:
    assert context.request is not None
    try:
        context.artifact = context.backend.build(context.request)
    except BackendError as error:
        context.stop(message=str(error))


def _verify_stage(context: BuildContext) -> None:
    """The engine against the bundle's model on ONNX Runtime, at the precision it was built in."""
    from deploycc.verify.verification import compare_all, reference_outputs

    assert context.artifact is not None and context.request is not None
    context.stage = Stage.VERIFY
    try:
        drawn = context.inputs()
        expected, reference = reference_outputs(context.source, drawn.original_feeds)
        context.engine = context.backend.load(context.artifact, context.staging, context.request)
        verification = context.verification = compare_all(
            expected, context.engine.run(drawn.feeds), reference=reference, inputs=drawn.described,
            precision=context.precision, original=(context.source, drawn.original_feeds))
    except BackendError as error:
        context.artifact = None
        context.stop(message=str(error))
        return
    context.feeds = drawn.feeds
    if verification.passed:
        context.status, context.stage, context.message = BuildStatus.VERIFIED, Stage.DONE, "verified"
    else:
        context.stop(message=f"verification failed: {verification.problem}")


ENGINE_ONLY_STAGES: tuple[BuildStage[BuildContext], ...] = (
    BuildStage("build", _engine_stage),
    BuildStage("verify", _verify_stage),
    BuildStage("bench", bench_stage, wanted=lambda c: c.options.bench and c.status == BuildStatus.VERIFIED),
)
