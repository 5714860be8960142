"""How a build's end is told and kept: its one-line summary and next step, the time of each
stage, the listing of the output folder, and the two reports written from the one record."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.taxonomy import BuildStatus, Stage

if TYPE_CHECKING:
    from deploycc.backends.base import Artifact
    from deploycc.records.build import BuildReport
    from deploycc.targets.schema import Target

# An engine that refuses inputs its original takes (OpenVINO's pooling checks its kernel against
# the input where ONNX Runtime does not): a backend error at verify, never a numeric mismatch.
RUN_REFUSED = "the engine could not run inputs the original model takes"


# What a device bundle leaves pending and the runner's command line, unless the artifact's settings
# say otherwise (`pending`, `runner`): the TensorRT bundle's
PENDING_WHAT, RUNNER_COMMAND = "the TensorRT engine", "python3 run_on_device.py"


def next_step_after(status: BuildStatus, stage: Stage, message: str, target: Target,
                    artifact: Artifact | None = None) -> str:
    """What the user does next, after a build that ended so (report.json's `next_step`)."""
    if status == BuildStatus.VERIFIED:
        return "deploy the artifact; `deploycc bench` for a full benchmark"
    if status == BuildStatus.PENDING_ON_DEVICE:
        runner = (artifact.settings.get("runner") if artifact is not None else None) or RUNNER_COMMAND
        return (f"copy bundle/ to the device, run `{runner}` there (builds, verifies and "
                "times the engine), then `deploycc device import OUTDIR bundle/result.json`")
    if status == BuildStatus.NEEDS_INPUTS:
        return "give inputs the model takes: --inputs data.npz (one array per input name)"
    if stage == Stage.VERIFY and message.startswith(RUN_REFUSED):
        return (f"the {target.backend.kind} engine refuses these input sizes: verify at the sizes the model "
                "is meant for (--inputs, or --shape NAME:DIMS to build for them)")
    return {
        Stage.LEGALIZE: "no rule rewrites the illegal nodes below (`deploycc check --explain` says why each "
                        "declines): --partition runs them on the host, or choose a different target/opset",
        Stage.BUILD: f"the {target.backend.kind} build failed: {message}",
        Stage.QUANTIZE: "see the INT8 section of report.md: a larger --max-drop, samples closer to what the "
                        "model will see, or no --require-int8 to build in float",
        Stage.VERIFY: "the engine differs from the original beyond the precision's tolerance: try a higher "
                      "precision (--precision fp32) or inspect the output named above",
    }.get(stage, message)


def summary_of(status: BuildStatus, message: str, target: Target, artifact: Artifact | None) -> str:
    """The build's end in one line (report.json's `summary`)."""
    if status == BuildStatus.VERIFIED and artifact is not None:
        return f"built {artifact.kind} for {target.name} and verified it against the original"
    if status == BuildStatus.PENDING_ON_DEVICE:
        what = (artifact.settings.get("pending") if artifact is not None else None) or PENDING_WHAT
        return f"legalized and bundled for {target.name}; {what} is pending on the device"
    return message


def listing(staging: Path) -> list[str]:
    """Every file the output directory will hold, the two reports written last included."""
    files = [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()]
    return sorted({*files, "report.json", "report.md"})  # once each: a torch build's staging holds them


def write_reports(staging: Path, report: BuildReport) -> None:
    """report.json and report.md, from the one record."""
    from deploycc.report.markdown import build_markdown

    (staging / "report.json").write_text(report.to_json() + "\n")
    (staging / "report.md").write_text(build_markdown(report))


class Clock:
    """Times each stage, and the peak RSS of this process during it (the kernel's VmHWM, reset at
    each stage's start: `memory`; off for a clock inside another's stage, which its resets would
    cut short), and tells the progress display which one is running."""

    def __init__(self, seconds: dict[str, float], progress: Callable[[str], None] | None,
                 memory: bool = True) -> None:
        self.seconds, self.progress, self.memory = seconds, progress, memory
        self.peak_mib: dict[str, float] = {}
        self.measuring = False  # the current stage's peak is being measured
        self.current: str | None = None
        self.started = time.perf_counter()

    def __call__(self, stage: str) -> None:
        from deploycc.bench.memory import reset_peak

        self.stop()
        self.current, self.started = stage, time.perf_counter()
        self.measuring = self.memory and reset_peak()
        if self.progress is not None:
            self.progress(stage)

    def stop(self) -> None:
        from deploycc.budget import status_kib

        if self.current is not None:
            self.seconds[self.current] = round(time.perf_counter() - self.started, 3)
            peak = status_kib("VmHWM") if self.measuring else None
            if peak is not None:
                self.peak_mib[self.current] = round(peak / 1024, 1)
            self.current = None
