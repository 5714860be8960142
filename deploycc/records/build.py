"""What `deploycc build` did: the legalization, the artifact, its verification and latency, and,
once a bundled build's result comes back from the board, what happened there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# At run time, not only for the type checker: `device import` reads the report back from JSON.
from deploycc.records.artifact import Artifact
from deploycc.records.bench import LatencyStats
from deploycc.records.device import DeviceResult
from deploycc.records.export import ExportReport
from deploycc.records.half import HalfPrecisionReport
from deploycc.records.legalize import LegalizeReport
from deploycc.records.precision import PrecisionChoice
from deploycc.records.quantize import QuantizeReport
from deploycc.records.shapes import ShapePlan
from deploycc.records.verification import Verification
from deploycc.results import EXIT_FINDINGS, EXIT_OK, Result, SkippedStep, unasked
from deploycc.taxonomy import BuildStatus, Failure, Precision, Stage

SUCCEEDED = (BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE, BuildStatus.VERIFIED_ON_DEVICE)


@dataclass
class BuildReport(Result):
    model: str
    target: str
    outdir: str
    status: BuildStatus
    stage: Stage  # the last stage reached: legalize | quantize | build | verify | done (or the board's)
    summary: str
    next_step: str
    precision: Precision
    legalize: LegalizeReport | None
    artifact: Artifact | None
    verification: Verification | None
    benchmark: LatencyStats | None
    build_hash: str = ""
    failure_category: Failure | None = None  # the backend's own failure category, when it gave one
    files: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # this process's peak during each stage
    quantization: QuantizeReport | None = None  # --precision int8: how it was quantized and judged
    notes: list[str] = field(default_factory=list)
    shapes: ShapePlan | None = None  # what each input is built for, verified and timed at
    device: DeviceResult | None = None  # the board's result, once `deploycc device import` read it
    export: ExportReport | None = None  # a torch model's export: both exporters' attempts and proofs
    half: HalfPrecisionReport | None = None  # fp16/bf16: what half breaks, and the layers kept in fp32
    precision_choice: PrecisionChoice | None = None  # --precision auto: every candidate tried
    # Asked only where the backend failed on deploycc's model: whether it builds and runs the model
    # as exported (True: deploycc made it worse than doing nothing, a deploycc bug; None: not asked)
    original_on_backend: bool | None = None
    # The safety steps that did not run (the fp16 analysis, the INT8 guard, verification) and why;
    # with `strict` (--strict) one the user did not ask to skip fails the build
    skipped_steps: list[SkippedStep] = field(default_factory=list)
    strict: bool = False

    @property
    def exit_code(self) -> int:
        if self.status not in SUCCEEDED or (self.strict and unasked(self.skipped_steps)):
            return EXIT_FINDINGS
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.pop("device")
        data["exit_code"] = self.exit_code
        if self.device is not None:  # after the exit code: the board's result came later
            data["device"] = self.device.to_dict()
        return data
