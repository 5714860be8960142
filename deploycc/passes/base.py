"""The pass contract: what every pass shares and returns.

A pass reads `PipelineState` (the user's options, the model being rewritten, the records),
rewrites `state.model` in place (or, declaring `in_place = False`, may put a new model there),
and returns a `PassOutcome`; the pass manager
(`pipeline/manager.py`) wraps it with instruments (time, node counts, op histograms, invariants).
The passes and their order are listed once, in `deploycc/passes/__init__.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.options import LegalizeOptions
    from deploycc.rules.engine import Decision, Rewrite
    from deploycc.targets.schema import Target


@dataclass
class PassOutcome:
    modified: bool
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class PipelineState:
    model: ir.Model
    target: Target
    options: LegalizeOptions
    source: Path
    rewrites: list[Rewrite] = field(default_factory=list)
    unresolved: list[Decision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signature_changes: list[str] = field(default_factory=list)  # what the user asked to change
    retyped_outputs: set[str] = field(default_factory=set)  # outputs whose type changed on purpose
    fed_layouts: dict[str, list[int]] = field(default_factory=dict)  # input -> perm to the model's layout
    source_opset: int | None = None
    source_nodes: int = 0
    judged_branches: set[ir.Node] = field(default_factory=set)  # top-level Ifs passes/branches.py judged

    @property
    def opsets(self) -> dict[str, int]:
        from deploycc.graph.graphs import opset_map

        return opset_map(self.model)


class Pass:
    """One step of the pipeline, addressable by name (`--disable-pass NAME`)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    optional: ClassVar[bool] = False  # runs only when asked for (the onnxsim simplifier)
    # onnx-ir's `in_place`: True when the pass rewrites `state.model` itself and leaves that same
    # object there (the manager checks it). False when it may put a new model in its place (opset
    # conversion through protobuf, onnxsim's result, a whole-graph rewrite undone from its bytes);
    # "may", not "always" as in onnx-ir, since those passes also have runs that change nothing or
    # convert in place, so the tests, not the manager, hold each such pass to a run that replaces.
    in_place: ClassVar[bool] = True

    def wanted(self, options: LegalizeOptions) -> bool:
        return not self.optional

    def changes_signature(self, options: LegalizeOptions) -> bool:
        """True when the user asked this pass to change graph inputs/outputs (--keep-outputs).

        Every other run must keep input and output names, dtypes and ranks.
        """
        return False

    def rule_names(self, state: PipelineState) -> list[str]:
        """The named rules this pass may apply on this target, in the order it applies them
        (each can be set aside with `--disable-rule`); [] for a pass that is one step. The
        catalog's rules are not listed here: the manager records those that fired."""
        return []

    def run(self, state: PipelineState) -> PassOutcome:
        raise NotImplementedError
