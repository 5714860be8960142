"""The pass manager: runs the named passes in order, each wrapped in instruments.

Instruments record per pass the wall time, node counts and op histograms before and after, and
check the invariants every pass owes the user: graph input and output names, dtypes and ranks
unchanged (unless the user asked for the change), and the graph topologically sorted. A pass that
declares `in_place` must also leave `state.model` the same object.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.errors import EXIT_FINDINGS, DeployccError, OptionError
from deploycc.passes.base import Pass, PipelineState
from deploycc.records.legalize import PassRecord

if TYPE_CHECKING:
    import onnx_ir as ir


class InvariantError(DeployccError):
    """A pass broke a promise (signature or order): a deploycc bug, reported as one. legalize
    then runs again without that pass; exit 1 when nothing can be kept."""

    exit_code = EXIT_FINDINGS

    def __init__(self, message: str, pass_name: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.pass_name = pass_name


class PassBroke(InvariantError):
    """A pass raised on this model (a library under it, or a case it did not foresee)."""


def source_ops(records: Sequence[PassRecord]) -> dict[str, int]:
    """The op histogram of the model as loaded: before the first pass that ran."""
    return next((record.ops_before for record in records if record.ran), {})


def histogram(graph: ir.Graph) -> Counter[str]:
    return Counter(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
                   for node in graph)


def signature(graph: ir.Graph) -> list[tuple[str, str, str | None, int | None]]:
    def entry(kind: str, value: ir.Value) -> tuple[str, str, str | None, int | None]:
        dtype = value.dtype.name if value.dtype is not None else None
        rank = len(value.shape) if value.shape is not None else None
        return kind, value.name or "", dtype, rank

    inputs = [entry("input", v) for v in graph.inputs if v.name not in graph.initializers]
    return inputs + [entry("output", v) for v in graph.outputs]


def check_topological(graph: ir.Graph) -> str | None:
    """None when every node reads only values produced before it (or outside this graph)."""
    seen: set[int] = {id(v) for v in graph.inputs} | {id(v) for v in graph.initializers.values()}
    for node in graph:
        for value in node.inputs:
            if value is None or id(value) in seen:
                continue
            producer = value.producer()
            if producer is not None and producer.graph is graph:
                return f"node {node.name or node.op_type} reads '{value.name}' before it is produced"
        seen.update(id(v) for v in node.outputs)
    return None


def select(passes: Sequence[Pass], state: PipelineState) -> list[Pass]:
    options = state.options
    names = {p.name for p in passes}
    for name in (*options.disable_passes, *options.only_passes):
        if name not in names:
            raise OptionError(f"no pass named {name!r}", hint=f"passes: {', '.join(p.name for p in passes)}")
    chosen = []
    for candidate in passes:
        if options.only_passes:
            if candidate.name in options.only_passes:
                chosen.append(candidate)
        elif candidate.name not in options.disable_passes and candidate.wanted(options):
            chosen.append(candidate)
    return chosen


def run_passes(passes: Sequence[Pass], state: PipelineState, *, progress=None) -> list[PassRecord]:
    chosen = select(passes, state)
    records = []
    for candidate in passes:
        if candidate not in chosen:
            records.append(PassRecord(candidate.name, ran=False))
            continue
        if progress is not None:
            progress(candidate.name)
        model = state.model
        before_ops, before_signature = histogram(model.graph), signature(model.graph)
        started = time.perf_counter()
        rewrites_before = len(state.rewrites)
        try:
            outcome = candidate.run(state)
        except DeployccError:
            raise  # the user's input or options, or a finding: reported as such
        except Exception as error:
            raise PassBroke(f"pass {candidate.name!r} broke: {type(error).__name__}: {error}",
                            candidate.name) from error
        seconds = time.perf_counter() - started
        if candidate.in_place and state.model is not model:
            raise InvariantError(f"pass {candidate.name!r} declares in_place but replaced the model; "
                                 "a pass that replaces state.model declares in_place = False", candidate.name)
        graph = state.model.graph  # a pass that is not in_place may have replaced the model
        after_ops = histogram(graph)
        if not candidate.changes_signature(state.options) and signature(graph) != before_signature:
            raise InvariantError(f"pass {candidate.name!r} changed the graph's inputs or outputs: "
                                 f"{before_signature} -> {signature(graph)}", candidate.name)
        problem = check_topological(graph)
        if problem:
            raise InvariantError(f"pass {candidate.name!r} left the graph unsorted: {problem}",
                                 candidate.name)
        fired = list(dict.fromkeys(r.rule for r in state.rewrites[rewrites_before:]))
        records.append(PassRecord(
            name=candidate.name, ran=True, seconds=round(seconds, 4), modified=outcome.modified,
            nodes_before=sum(before_ops.values()), nodes_after=sum(after_ops.values()),
            ops_before=dict(sorted(before_ops.items())), ops_after=dict(sorted(after_ops.items())),
            ops_added=dict(sorted((after_ops - before_ops).items())),
            ops_removed=dict(sorted((before_ops - after_ops).items())),
            notes=outcome.notes, details=outcome.details, rules=fired or candidate.rule_names(state)))
    return records
