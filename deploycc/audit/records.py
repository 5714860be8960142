"""The audit's records: a summary per target and the whole report. Plain data: the runner
builds them complete, the reports and the console read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.audit.cells import CellResult
from deploycc.results import Result


@dataclass
class TargetTally:
    target: str
    cells: int
    legal_as_exported: int
    succeeded: int
    rate_as_exported: float
    rate_after_deploycc: float
    regressed: int = 0  # legal as exported, refused after deploycc: each one a deploycc bug
    with_host_segments: int = 0  # refused as a whole, deployable with host segments (--partition)


@dataclass
class AuditReport(Result):
    outdir: str
    models: list[str]
    targets: list[str]
    stages: list[str]
    cells: list[CellResult]
    summary: list[TargetTally]
    top_failures: list[dict[str, object]]
    counts: dict[str, int]
    seconds: float = 0.0
    reused: int = 0
    notes: list[str] = field(default_factory=list)
