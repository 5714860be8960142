"""What `legalize` did to a model: each pass's record, every rewrite, the verdict after, and the
verification against the original."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, TypeVar

# At run time, not only for the type checker: a report read back from report.json needs them.
from deploycc.records.check import TargetVerdict
from deploycc.records.export import ExportReport
from deploycc.records.rewrite import Rewrite
from deploycc.records.verification import Verification
from deploycc.results import EXIT_FINDINGS, EXIT_OK, Result


class SetsAside(Protocol):
    """Options that set passes and rules aside (options.LegalizeOptions, a layer above): a
    dataclass with these fields, so that a blame gives back the options it was given, one more aside."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    disable_passes: tuple[str, ...]
    disable_rules: tuple[str, ...]


Options = TypeVar("Options", bound=SetsAside)


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
    # The named rules the pass applied (the catalog's), or may have applied (its own, in order):
    # what blame bisects over and `--disable-rule` sets aside.
    rules: list[str] = field(default_factory=list)


@dataclass
class Blame:
    """The first pass (and rule in it) whose result no longer verifies, with what it changed."""

    pass_name: str
    rule: str | None
    output: str  # the first output that differs
    problem: str  # the comparison's numbers for it
    set_aside: bool = False  # legalize ran again without it, and kept that result

    def __str__(self) -> str:
        where = f"pass {self.pass_name}" + (f", rule {self.rule}" if self.rule else "")
        return f"{where}: {self.problem}" if self.problem else where

    def without(self, options: Options) -> Options:
        """The options with the blamed rule, or the whole pass when no rule was found, set aside."""
        if self.rule is not None:
            return replace(options, disable_rules=(*options.disable_rules, self.rule))
        return replace(options, disable_passes=(*options.disable_passes, self.pass_name))


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
    # The passes or rules whose results failed verification, in the order they were found; each
    # set aside (legalize ran again without it) unless the model as exported had to be kept.
    blame: list[Blame] = field(default_factory=list)
    export: ExportReport | None = None  # a torch model's export, before legalization

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.success else EXIT_FINDINGS

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["exit_code"] = self.exit_code
        return data
