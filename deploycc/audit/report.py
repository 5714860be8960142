"""Audit reports: audit.json (every cell), audit.md, and a self-contained audit.html (inline
CSS and script, no network) with the model x target matrix coloured by status (each cell with
its reason, and a link to its build's report.md relative to the page, so the folder can be moved;
models grouped by the family and exporter their hints name, each group with a summary row; a
click on a column's head sorts the models of every group by it, failures first),
the success rate per target as exported vs after deploycc, and the top failure causes with their
models.
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from deploycc.records.audit import HOST_SEGMENTS, TargetTally
from deploycc.taxonomy import CellStatus, Failure

if TYPE_CHECKING:
    from deploycc.records.audit import AuditReport, CellResult

COLOURS: dict[str, str] = {
    CellStatus.LEGAL_AS_EXPORTED: "#9be7a0", CellStatus.LEGALIZED: "#c8ecb0", CellStatus.BUILT: "#d8f0b8",
    CellStatus.VERIFIED: "#7fd88a", CellStatus.BENCHMARKED: "#5cc96b", CellStatus.FAILED: "#f3a3a3",
    CellStatus.HOST_SEGMENTS: "#a7c7f2"}
NAMED_OPS = (Failure.UNSUPPORTED_OP, Failure.OPSET, Failure.DTYPE)  # failures worth naming the ops of


def summarize(cells: list[CellResult], targets: list[str]
              ) -> tuple[list[TargetTally], list[dict[str, object]]]:
    """Per target, the cells legal as exported and deployed after deploycc; and the ten most
    frequent failure causes with the cells they hit."""
    by_target: dict[str, list] = defaultdict(list)
    for cell in cells:
        by_target[cell.target].append(cell)
    summary = []
    for target in targets:
        mine = by_target[target]  # not `cells`: the causes below count every target's
        exported = sum(1 for c in mine if c.legal_as_exported)
        succeeded = sum(1 for c in mine if c.succeeded)
        total = len(mine) or 1
        summary.append(TargetTally(target, len(mine), exported, succeeded,
                                   round(exported / total, 4), round(succeeded / total, 4),
                                   sum(1 for c in mine if c.regressed),
                                   sum(1 for c in mine if c.status == HOST_SEGMENTS)))
    causes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cell in cells:
        if cell.status == CellStatus.FAILED:
            what = f"{cell.category}: {', '.join(cell.blocking_ops[:3])}" if cell.blocking_ops and \
                cell.category in NAMED_OPS else str(cell.category)
            causes[(what, cell.stage)].append(f"{Path(cell.model).name} @ {cell.target}")
    ranked = sorted(causes.items(), key=lambda item: -len(item[1]))
    top = [{"cause": cause, "stage": stage, "count": len(hits), "cells": hits[:10]}
           for (cause, stage), hits in ranked[:10]]
    return summary, top


def _with_host(summary) -> str:
    """Deployed whole or with host segments, of all cells (the share apart in brackets)."""
    both = summary.succeeded + summary.with_host_segments
    return f"{both} ({both / (summary.cells or 1):.0%}; +{summary.with_host_segments})"


def _label(path: str) -> str:
    return Path(path).name


def _link(cell: CellResult) -> str | None:
    """The cell's report.md as a URL relative to the audit's folder (None where no build wrote one)."""
    path = cell.details.get("report")
    return quote(str(path)) if path else None


def markdown(report: AuditReport) -> str:
    lines = ["# deploycc audit", "",
             f"{len(report.models)} model(s) x {len(report.targets)} target(s), stages "
             f"{', '.join(report.stages)}; {report.reused} cell(s) reused from an earlier run; "
             f"{report.seconds:.1f} s.", "", "## Success rate per target", "",
             "| target | cells | legal as exported | after deploycc | with host segments | regressed |",
             "|---|---|---|---|---|---|"]
    for s in report.summary:
        lines.append(f"| {s.target} | {s.cells} | {s.legal_as_exported} ({s.rate_as_exported:.0%}) | "
                     f"{s.succeeded} ({s.rate_after_deploycc:.0%}) | {_with_host(s)} | {s.regressed} |")
    regressions = [c for c in report.cells if c.regressed]
    if regressions:
        lines += ["", f"**{len(regressions)} cell(s) worse after deploycc than as exported "
                      "(a deploycc bug each):** " + ", ".join(f"{_label(c.model)} @ {c.target}"
                                                             for c in regressions)]
    set_aside = [c for c in report.cells
                 if c.details.get("backend_failed_on_deploycc_model") and not c.regressed]
    if set_aside:
        lines += ["", f"**{len(set_aside)} cell(s) built as exported: the backend failed on deploycc's model "
                      "(a deploycc bug each):** " + ", ".join(f"{_label(c.model)} @ {c.target}"
                                                             for c in set_aside)]
    lines += ["", "## Matrix", "", "| model | " + " | ".join(report.targets) + " |",
              "|---" * (len(report.targets) + 1) + "|"]
    grid = {(c.model, c.target): c for c in report.cells}
    for model in report.models:
        row = []
        for target in report.targets:
            cell = grid[(model, target)]
            text = cell.status if cell.status != CellStatus.FAILED else f"failed ({cell.category})"
            text = f"**{text}, regressed**" if cell.regressed else text
            link = _link(cell)
            row.append(f"[{text}]({link})" if link else text)
        lines.append(f"| {_label(model)} | " + " | ".join(row) + " |")
    if report.top_failures:
        lines += ["", "## Top failure causes", ""]
        for item in report.top_failures:
            hits = item["cells"]
            assert isinstance(hits, list)
            lines.append(f"- {item['cause']} at {item['stage']} ({item['count']}): " + ", ".join(hits))
    return "\n".join(lines) + "\n"


def page(report: AuditReport) -> str:
    e = html.escape
    grid = {(c.model, c.target): c for c in report.cells}
    groups = []
    for family, models in _grouped(report):
        rows = []
        if family is not None:  # the family's own row: its models deployed after deploycc, per target
            counts = []
            for target in report.targets:
                mine = [grid[(model, target)] for model in models]
                counts.append(f"<td><b>{sum(1 for c in mine if c.succeeded)}/{len(mine)}</b></td>")
            rows.append(f'<tr class="family"><th>{e(family or "no family")} ({len(models)})</th>'
                        f"{''.join(counts)}</tr>")
        rows.extend(_model_row(model, report, grid) for model in models)
        groups.append(f"<tbody>{''.join(rows)}</tbody>")
    return _document(report, groups)


def _grouped(report: AuditReport) -> list[tuple[str | None, list[str]]]:
    """The models by family, families in name order (those without one last), each with a row of
    its own; one group without a heading where no model's hints name a family."""
    if not report.families:
        return [(None, list(report.models))]
    groups: dict[str, list[str]] = defaultdict(list)
    for model in report.models:
        groups[report.families.get(model, "")].append(model)
    return sorted(groups.items(), key=lambda item: (item[0] == "", item[0]))


def _model_row(model: str, report: AuditReport, grid: dict[tuple[str, str], CellResult]) -> str:
    e = html.escape
    cells = []
    for target in report.targets:
        cell = grid[(model, target)]
        text = cell.status if cell.status != CellStatus.FAILED else f"failed: {cell.category}"
        text += " (regressed)" if cell.regressed else ""
        link = _link(cell)
        shown = f'<a href="{e(link)}">{e(text)}</a>' if link else e(text)
        # the reason as text on the page: a tooltip is invisible on a phone, a print or a search
        why = f'<div class="why">at {e(cell.stage)}: {e(cell.message)}</div>' if cell.message else ""
        # the sort key: failures first, then the least done; the rank of a status, then its text
        rank = SORT_RANK.get(cell.status, len(SORT_RANK))
        cells.append(f'<td data-key="{rank} {e(text)}" style="background:{COLOURS.get(cell.status, "#eee")}">'
                     f"{shown}{why}</td>")
    return f'<tr><th data-key="{e(_label(model))}">{e(_label(model))}</th>{"".join(cells)}</tr>'


# A column sorted on the page puts these first, in this order (the cells to look at)
SORT_RANK = {status: rank for rank, status in enumerate((
    CellStatus.FAILED, CellStatus.HOST_SEGMENTS, CellStatus.LEGALIZED, CellStatus.BUILT,
    CellStatus.LEGAL_AS_EXPORTED, CellStatus.VERIFIED, CellStatus.BENCHMARKED))}
# Sorts each group's model rows (its summary row stays first) by the clicked column's data-key;
# a second click on the same column reverses the order.
SORT_SCRIPT = """
document.querySelectorAll("table.matrix thead th").forEach(function (head, column) {
  head.addEventListener("click", function () {
    var down = head.dataset.order !== "up";
    document.querySelectorAll("table.matrix thead th").forEach(function (h) { delete h.dataset.order; });
    head.dataset.order = down ? "up" : "down";
    document.querySelectorAll("table.matrix tbody").forEach(function (group) {
      var rows = Array.prototype.filter.call(group.rows, function (r) {
        return !r.classList.contains("family");
      });
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.key, y = b.cells[column].dataset.key;
        return (down ? 1 : -1) * x.localeCompare(y, undefined, {numeric: true});
      });
      rows.forEach(function (r) { group.appendChild(r); });
    });
  });
});
"""


def _document(report: AuditReport, groups: list[str]) -> str:
    e = html.escape
    rates = "".join(
        f"<tr><th>{e(s.target)}</th>"
        f"<td>{s.legal_as_exported}/{s.cells} ({s.rate_as_exported:.0%})</td>"
        f"<td><b>{s.succeeded}/{s.cells} ({s.rate_after_deploycc:.0%})</b></td>"
        f"<td>{e(_with_host(s))}</td><td>{s.regressed}</td></tr>" for s in report.summary)
    failures = "".join(
        f"<li><b>{e(str(f['cause']))}</b> at {e(str(f['stage']))} ({f['count']}): "
        f"{e(', '.join(str(c) for c in f['cells']))}</li>"  # type: ignore[attr-defined]
        for f in report.top_failures)
    headers = "".join(f'<th title="sort by {e(t)}">{e(t)}</th>' for t in report.targets)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>deploycc audit</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; font-size: 14px; }}
caption {{ font-weight: bold; text-align: left; padding: 4px 0; }}
td {{ max-width: 28em; vertical-align: top; }}
td a {{ color: inherit; }}
tr.family th, tr.family td {{ background: #f2f2f2; border-top: 2px solid #888; }}
.why {{ font-size: 12px; color: #444; overflow-wrap: anywhere; }}
table.matrix thead th {{ cursor: pointer; }}
table.matrix thead th[data-order="up"]::after {{ content: " \\25B2"; }}
table.matrix thead th[data-order="down"]::after {{ content: " \\25BC"; }}
</style></head><body>
<h1>deploycc audit</h1>
<p>{len(report.models)} model(s) &times; {len(report.targets)} target(s),
stages {e(', '.join(report.stages))}; {report.reused} cell(s) reused; {report.seconds:.1f} s.</p>
<table><caption>Success rate per target: as exported vs after deploycc, and with host segments</caption>
<tr><th>target</th><th>legal as exported</th><th>after deploycc</th><th>with host segments</th>
<th>regressed</th></tr>{rates}</table>
<table class="matrix">
<caption>Model &times; target (a click on a column's head sorts each group by it)</caption>
<thead><tr><th title="sort by model">model</th>{headers}</tr></thead>{''.join(groups)}</table>
<h2>Top failure causes</h2><ul>{failures or '<li>none</li>'}</ul>
<script>{SORT_SCRIPT}</script>
</body></html>
"""


def write_reports(report: AuditReport, outdir: Path) -> None:
    from deploycc.io import write_text_atomic

    write_text_atomic(outdir / "audit.json", report.to_json() + "\n")
    write_text_atomic(outdir / "audit.md", markdown(report))
    write_text_atomic(outdir / "audit.html", page(report))
