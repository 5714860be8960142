"""A torch model's export, for people: each exporter tried, its proofs against torch, what the
trace fixed of the inputs' data and torch's own warnings, and torch against the final artifact;
a few console lines, and report.md's section."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

if TYPE_CHECKING:
    from rich.console import Console

    from deploycc.records.export import ExportReport
    from deploycc.records.verification import Verification


def render_export(out: Console, export: ExportReport) -> None:
    """A torch model's export: one line per exporter tried, then torch against the final artifact."""
    for note in export.notes:
        out.print(escape(f"  export: {note}"))
    for attempt in export.attempts:
        if attempt.failure is not None:
            out.print(escape(f"  export {attempt.exporter}: {attempt.failure.line()}"), style="yellow")
            continue
        proofs = ", ".join(f"{'ok' if p.verification.passed else 'FAILED'} at "
                           f"{' '.join('x'.join(map(str, dims)) for dims in p.shapes.values())}"
                           for p in attempt.proofs)
        outcome = f"; {attempt.outcome}" if attempt.outcome else ""
        out.print(escape(f"  export {attempt.exporter}: opset {attempt.opset_written}, {attempt.nodes} "
                         f"nodes, proven against torch {proofs}{outcome}"))
        for note in attempt.notes:
            out.print(escape(f"    {note}"), style="yellow")
        if attempt.trace_warnings and not attempt.data_guards:
            out.print(escape(f"    torch warned {len(attempt.trace_warnings)} time(s) while tracing, on "
                             "sizes only (fixed in a static export, proven at a second size in a dynamic "
                             "one); in report.md"))
    if export.final is not None:
        verdict = "ok" if export.final.passed else f"FAILED: {export.final.problem}"
        out.print(escape(f"  torch against {export.final_against}: {verdict}, {_measured(export.final)}"))


def _measured(final: Verification) -> str:
    """How far the final artifact is from torch: the worst output, or a decoder's generation."""
    if final.generation is not None:
        return final.generation.line()
    return f"max abs {max((o.max_abs_error for o in final.outputs), default=0.0):.2e}"


def export_lines(export: ExportReport) -> list[str]:
    """A torch model's export: each exporter tried, its proofs against torch, and the one kept."""
    lines = ["## Export from PyTorch", "",
             f"`{export.source}` ({export.kind}), example inputs {dims_text(export.example_shapes)}; "
             f"{export.target}'s order: {', '.join(export.order)}, opset ceiling {export.opset_ceiling}.", "",
             "| exporter | opset asked / written | nodes | dynamic | proofs against torch | outcome | s |",
             "|---|---|---|---|---|---|---|"]
    for attempt in export.attempts:
        dynamic = ", ".join(f"{name}[{axis}]={dim}" for name, axes in attempt.dynamic.items()
                            for axis, dim in axes.items()) or "none"
        proofs = "; ".join(f"{'ok' if p.verification.passed else 'FAILED'} at {dims_text(p.shapes)}"
                           for p in attempt.proofs) or "-"
        outcome = attempt.failure.line() if attempt.failure else f"{attempt.outcome}: {attempt.summary}"
        lines.append(f"| {attempt.exporter} | {attempt.opset_requested} / {attempt.opset_written or '-'} | "
                     f"{attempt.nodes if attempt.nodes is not None else '-'} | {dynamic} | {proofs} | "
                     f"{outcome} | {attempt.seconds:.1f} |")
    lines += [""] + [f"- {note}" for note in export.notes]
    lines += [f"- {attempt.exporter}: {note}" for attempt in export.attempts for note in attempt.notes]
    for attempt in export.attempts:
        lines += [f"- {attempt.exporter}: the inputs' data decides at {guard}"
                  for guard in attempt.data_guards]
        lines += [f"- {attempt.exporter}: torch's TracerWarning: `{text}`" for text in attempt.trace_warnings]
    lines += [f"- {export.line()}"]
    if export.final is not None:
        verdict = "ok" if export.final.passed else f"FAILED ({export.final.problem})"
        lines.append(f"- torch against {export.final_against} on {export.final.inputs}: {verdict}, "
                     f"{_measured(export.final)} ({export.final.precision} tolerances)")
    return [*lines, ""]


def dims_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"`{name}` {'x'.join(map(str, dims)) or 'scalar'}"
                     for name, dims in shapes.items()) or "-"
