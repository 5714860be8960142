"""What `deploycc check` found: every node judged against each target, grouped by reason, the
graph-level findings, and (ONNX Runtime with a GPU provider) where each node will run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deploycc.records.half import HalfPrecisionReport
from deploycc.results import EXIT_FINDINGS, EXIT_OK, Result, SkippedStep, unasked
from deploycc.taxonomy import Severity

CPU = "CPUExecutionProvider"  # where ONNX Runtime runs what no provider ahead of it takes


@dataclass
class GraphFinding:
    severity: Severity
    category: str
    message: str


@dataclass
class OffPrimary:
    """A node the primary provider does not take: where it goes instead, and why."""

    node: str
    op: str
    provider: str
    reason: str


@dataclass
class Border:
    """A tensor crossing between a GPU provider and the CPU: one Memcpy."""

    tensor: str
    source: str  # provider that writes it
    target: str  # provider that reads it
    bytes: int


@dataclass
class PlacementPrediction:
    target: str
    primary: str
    counts: dict[str, int] = field(default_factory=dict)  # provider -> nodes
    subgraphs: int = 0  # runs of nodes on the primary provider, in topological order
    subgraph_sizes: list[int] = field(default_factory=list)
    # the runs themselves, as indices of the main graph's nodes in order
    runs: list[list[int]] = field(default_factory=list, repr=False)
    borders: list[Border] = field(default_factory=list)
    off_primary: list[OffPrimary] = field(default_factory=list)
    note: str = ""

    @property
    def memcpy(self) -> int:
        return len(self.borders)

    @property
    def cpu_nodes(self) -> int:
        return self.counts.get(CPU, 0)

    def line(self) -> str:
        counts = ", ".join(f"{provider.removesuffix('ExecutionProvider')} {n}"
                           for provider, n in self.counts.items())
        crossing = sum(b.bytes for b in self.borders)
        return (f"{counts}; {self.subgraphs} {self.primary.removesuffix('ExecutionProvider')} subgraph(s), "
                f"{self.memcpy} Memcpy ({crossing} bytes at the graph's shapes)")


@dataclass
class NodeGroup:
    """Nodes of one op that share a verdict reason: one row of `op | count | reason | nodes`."""

    op: str
    count: int
    category: str
    reason: str
    nodes: list[str]
    details: list[str] = field(default_factory=list)


@dataclass
class TargetVerdict:
    target: str
    backend: str
    backend_version: str
    jetpack: str | None
    op_table: str
    legal: bool
    counts: dict[str, int]
    illegal: list[NodeGroup]
    conditional: list[NodeGroup]
    graph_findings: list[GraphFinding]
    dla: dict[str, list[str]] | None = None
    fixes: list[dict[str, str]] | None = None  # with --explain: the rule that would fix each node
    # ONNX Runtime with a GPU provider: each node's provider, the subgraphs and Memcpy borders
    placement: PlacementPrediction | None = None


@dataclass
class CheckReport(Result):
    path: str
    node_count: int
    opset_imports: dict[str, int]
    notes: list[str]
    targets: list[TargetVerdict]
    # `check --precision fp16` (and the default on targets that build fp16): what half breaks
    half: HalfPrecisionReport | None = None
    # The safety steps that did not run (the fp16 analysis) and why; with `strict` (--strict)
    # one the user did not ask to skip is exit 1
    skipped_steps: list[SkippedStep] = field(default_factory=list)
    strict: bool = False

    @property
    def exit_code(self) -> int:
        legal = all(t.legal for t in self.targets)
        return EXIT_OK if legal and not (self.strict and unasked(self.skipped_steps)) else EXIT_FINDINGS

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["legal"] = all(t.legal for t in self.targets)
        return data
