"""What `build --partition` did: the segments, why each host node runs there and why each cut
tensor crosses engines, the device's share of the FLOPs, and the chain verified against the
original."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deploycc.records.legalize import LegalizeReport
from deploycc.records.verification import Verification
from deploycc.results import EXIT_FINDINGS, EXIT_OK, Result
from deploycc.taxonomy import BuildStatus, Precision


@dataclass
class PartitionReport(Result):
    model: str
    target: str
    outdir: str
    status: BuildStatus  # verified | pending-on-device | failed
    summary: str
    precision: Precision
    segments: list[dict[str, Any]]
    host_nodes: dict[str, list[str]]  # node -> why it runs on the host (illegal, or kept there)
    cuts: list[dict[str, Any]]  # each cut tensor: name, dtype, shape, bytes, and why it crosses engines
    device_flops_share: float  # of the FLOPs of one inference, the device segments' share
    legalize: LegalizeReport | None
    chain_on_ort: Verification | None  # every segment on ONNX Runtime CPU
    chain_on_engines: Verification | None  # device segments on their built engines
    notes: list[str] = field(default_factory=list)
    flops: int = 0  # of one inference, every segment's (bench's count, symbolic dims as 1)
    device_flops: int = 0  # the device segments' part of them

    @property
    def exit_code(self) -> int:
        deploys = self.status in (BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE)
        return EXIT_OK if deploys else EXIT_FINDINGS

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["exit_code"] = self.exit_code
        return data
