"""The safety steps that did not run (BuildReport and CheckReport's `skipped_steps`), for people:
a warning line each on the console and a section of report.md, and with --strict the exit 1
they make. A step turned off by its own flag is a note, and --strict accepts it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from deploycc.results import unasked

if TYPE_CHECKING:
    from rich.console import Console

    from deploycc.results import SkippedStep


def render_skipped(out: Console, skipped: list[SkippedStep], strict: bool) -> None:
    for step in skipped:
        out.print(f"  [yellow]{'note' if step.asked else 'warning'}[/yellow]: {escape(step.line())}")
    refused = unasked(skipped) if strict else []
    if refused:
        out.print(f"[red]--strict: {len(refused)} safety step(s) skipped "
                  f"({', '.join(str(step.step) for step in refused)}): exit 1[/red]")


def skipped_section(skipped: list[SkippedStep], strict: bool) -> list[str]:
    """report.md's section (none where nothing was skipped)."""
    if not skipped:
        return []
    lines = ["## Skipped safety steps", ""]
    lines += [f"- **{step.step}**{' (as asked)' if step.asked else ''}: {step.reason}" for step in skipped]
    refused = unasked(skipped)
    if strict and refused:
        lines += ["", f"`--strict`: {len(refused)} skipped without being asked: exit 1"]
    return [*lines, ""]
