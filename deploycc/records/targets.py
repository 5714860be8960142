"""`deploycc targets`: one line per target, as the listing shows it and `--json` prints it."""

from __future__ import annotations

from dataclasses import dataclass

from deploycc.results import Result


@dataclass
class TargetSummary:
    name: str
    description: str
    aliases: list[str]
    backend: str
    backend_version: str
    device: str
    opset_min: int
    opset_max: int
    opset_preferred: int
    op_table: str
    supported_ops: int
    jetpack: str | None
    jetpack_available: list[str]
    dla_cores: int
    source_file: str


@dataclass
class TargetListing(Result):
    targets: list[TargetSummary]
