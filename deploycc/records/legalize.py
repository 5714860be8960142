"""What `legalize` did to a model: each pass's record, every rewrite, the verdict after, and the
verification against the original."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# At run time, not only for the type checker: a report read back from report.json needs them.
from deploycc.analysis.check import TargetVerdict
from deploycc.errors import EXIT_FINDINGS, EXIT_OK
from deploycc.results import Result
from deploycc.rules.engine import Rewrite
from deploycc.verify.verification import Verification


@dataclass
class PassRecord:
    """One pass as the pass manager's instruments saw it."""

    name: str
    ran: bool
    seconds: float = 0.0
    modified: bool = False
    nodes_before: int = 0
    nodes_after: int = 0
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    ops_added: dict[str, int] = field(default_factory=dict)
    ops_removed: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)


@dataclass
class Unresolved:
    """A node still illegal after every rule was tried."""

    node: str
    op: str
    reasons: list[str]
    rules_tried: list[str]


@dataclass
class LegalizeReport(Result):
    source: str
    output: str | None
    target: str
    mode: str
    success: bool
    summary: str
    opset: dict[str, int | None]
    nodes: dict[str, int]
    passes: list[PassRecord]
    rewrites: list[Rewrite]
    final: TargetVerdict
    unresolved: list[Unresolved]
    verification: Verification | None
    signature_changes: list[str]
    notes: list[str]
    fed_layouts: dict[str, list[int]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Why the model as exported (axes as asked) was no better, when deploycc's result was refused
    # and that fallback was tried: then deploycc did not make the model worse.
    as_exported: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.success else EXIT_FINDINGS

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["exit_code"] = self.exit_code
        return data
