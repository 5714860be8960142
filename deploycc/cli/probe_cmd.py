"""`deploycc probe --target T [-o FILE]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.command("probe")
@click.option("-t", "--target", required=True,
              help="Target whose real backend runs the cases (ORT or OpenVINO).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the probed capability table here.")
@click.option("--limit", type=int, help="Run only the first N cases (the full run takes minutes).")
@click.option("--case", "cases", multiple=True, help="Run only these cases (repeatable), by name.")
@click.option("-j", "--jobs", type=int, default=1, show_default=True,
              help="Chunks of cases run in this many processes at once.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write every case's result here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def probe_command(target: str, output: str | None, limit: int | None, cases: tuple[str, ...], jobs: int,
                  report_path: str | None, as_json: bool) -> None:
    """Run the ONNX conformance cases on a target's backend, as exported and after legalization."""
    from deploycc import api
    from deploycc.audit.probe import capability_table
    from deploycc.errors import OptionError
    from deploycc.io import claim, write_text_atomic

    resolved = api.get_target(target)
    if resolved.backend.builds_on_device:
        raise OptionError(f"probe runs the cases on the backend itself; {resolved.name} needs TensorRT on "
                          "the device", hint="run deploycc probe on the device")
    with claim([], reports=[Path(p) if p else None for p in (output, report_path)]):
        report = _probe(resolved.name, limit, cases, jobs, as_json)
        if output:
            table = capability_table(report)
            write_text_atomic(Path(output), json.dumps(table, indent=1, sort_keys=True) + "\n")
        if report_path:
            write_text_atomic(Path(report_path), report.to_json() + "\n")
    if as_json:
        click.echo(report.to_json())
        return
    click.echo(f"{report.target} ({report.backend}): {report.cases} cases; pass as exported "
               f"{report.passed_raw}, after deploycc {report.passed_legalized}; "
               f"{len(report.disagreements)} disagreement(s) with the declared table; {report.seconds:.0f} s")
    for item in report.disagreements[:20]:
        click.echo(f"  {item['case']}: {item['kind']} {item['detail']}")


def _probe(target: str, limit: int | None, cases: tuple[str, ...], jobs: int, as_json: bool) -> Any:
    from deploycc import api
    from deploycc.report.progress import progress_bar
    from deploycc.taxonomy import CaseOutcome

    with progress_bar(f"probing {target}", quiet=as_json) as update:
        def finished(op: str, results: list, done: int, total: int) -> None:
            # off a terminal, where the bar is silent: a line per op (a full run has ~1,900 cases)
            failing = [r.case for r in results if r.legalized != CaseOutcome.PASS]
            more = f", +{len(failing) - 3}" if len(failing) > 3 else ""
            passed = sum(r.raw == CaseOutcome.PASS for r in results)
            update.line(f"[{done}/{total}] {op}: {passed}/{len(results)} "
                        f"pass as exported, {len(results) - len(failing)}/{len(results)} after deploycc"
                        + (f" (failing after deploycc: {', '.join(failing[:3])}{more})" if failing else ""))

        report = api.probe(target, limit=limit, names=list(cases) or None, jobs=jobs,
                           progress=lambda done, total: update("cases", done, total), finished=finished)
    return report
