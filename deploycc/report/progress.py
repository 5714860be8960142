"""Progress on stderr while a command runs: a status line naming the step, or a bar over many
items (one plain line per finished item off a terminal)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console


class progress_status:
    """A rich status line naming the running step (silent with --json or off a terminal)."""

    def __init__(self, title: str, quiet: bool = False) -> None:
        self.title, self.quiet = title, quiet
        self._status: Any = None

    def __enter__(self):
        out = Console(stderr=True)
        if not self.quiet and out.is_terminal:
            self._status = out.status(f"{self.title}...")
            self._status.__enter__()

        def update(step: str) -> None:
            if self._status is not None:
                self._status.update(f"{self.title}: {step}")

        return update

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)


class progress_bar:  # a context manager: named like one
    """Progress of a long run, on stderr. On a terminal a rich bar, moved by calling the object:
    update(stage, done, total). Off a terminal (a pipe, a CI log) a bar shows nothing for minutes,
    so there `line(text)` prints one plain line per finished item, flushed. `quiet` (--json)
    silences the bar; the lines stay, since they go to stderr and stdout keeps the JSON."""

    def __init__(self, title: str, quiet: bool = False) -> None:
        self.title, self.quiet = title, quiet
        self._progress: Any = None
        self._task: Any = None
        self._plain = False

    def __enter__(self) -> progress_bar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        out = Console(stderr=True)
        self._plain = not out.is_terminal
        if not self.quiet and out.is_terminal:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=out, transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.title, total=None)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self.title}: {stage}", completed=done,
                                  total=total or None)

    def line(self, text: str) -> None:
        """One finished item, as plain text off a terminal (on one, the bar counts it)."""
        if self._plain:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
