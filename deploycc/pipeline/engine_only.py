"""`deploycc build --engine-only BUNDLE`, on the device: build, verify and time the engine a device
bundle describes, and write the reports `build` writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from deploycc.backends.base import Artifact, BackendError, BackendUnavailable
from deploycc.device.bundle import BUNDLE_FILE, is_bundle, read_bundle
from deploycc.errors import OptionError
from deploycc.options import BuildOptions
from deploycc.pipeline.outcome import Clock, listing, next_step_after, summary_of, write_reports
from deploycc.records.build import BuildReport
from deploycc.taxonomy import BuildStatus, Stage


def build_from_bundle(bundle_path: Path, outdir: Path | None, options: BuildOptions, *,
                      target: str | None, jetpack: str | None,
                      progress: Callable[[str], None] | None = None) -> BuildReport:
    """On the device: build, verify and time the engine a device bundle describes."""
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.targets import registry
    from deploycc.verify.inputs import generate

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
    step = Clock(seconds, progress)
    with io.StagedDirectory(outdir, force=options.force, protect=(bundle_path,)) as staged:
        staging = staged.staging
        step("build")
        request = backend.bundle_request(bundle_path, staging, resolved)
        model = request.model
        verification, benchmark, status, stage = None, None, BuildStatus.FAILED, Stage.BUILD
        try:
            artifact: Artifact | None = backend.build(request)
            step("verify")
            stage = Stage.VERIFY
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
            status, stage = (BuildStatus.VERIFIED, Stage.DONE) if verification.passed else \
                (BuildStatus.FAILED, Stage.VERIFY)
            message = "verified" if verification.passed else f"verification failed: {verification.problem}"
        except BackendError as error:
            artifact, message = None, str(error)
        step.stop()
        report = BuildReport(
            model=str(model), target=resolved.name, outdir=str(outdir), status=status, stage=stage,
            summary=summary_of(status, message, resolved, artifact),
            next_step=next_step_after(status, stage, message, resolved), precision=request.precision,
            legalize=None, artifact=artifact, verification=verification, benchmark=benchmark,
            files=listing(staging), seconds=seconds)
        write_reports(staging, report)
        staged.commit()
    return report
