"""The errors deploycc reports to a user, each with the exit code the CLI turns it into.

Exit codes (documented in the README and `deploycc --help`):
  0  success (everything legal / built / verified)
  1  the model was judged and found wanting (illegal nodes, failed verification, a torch model
     no exporter could export and prove; with --strict, a safety step skipped)
  2  unusable input or options (missing file, malformed model or target file, bad flag)
"""

from __future__ import annotations

# The codes live in results.py, below the records that give them; re-exported here with the errors.
from deploycc.results import EXIT_FINDINGS, EXIT_USAGE
from deploycc.results import EXIT_OK as EXIT_OK


class DeployccError(Exception):
    """An error with a one-line message meant for the user, and a hint on what to do next."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None, *, cli_hint: str | None = None) -> None:
        """`hint` in the Python API's terms; `cli_hint`, where the command line's differ (a flag
        for a keyword argument), is what the CLI prints instead."""
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.cli_hint = cli_hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"

    def for_cli(self) -> str:
        """The one line the command line prints: its own hint where it has one."""
        hint = self.cli_hint or self.hint
        return self.message if not hint else f"{self.message} ({hint})"


class ModelInputError(DeployccError):
    """The model file is missing, unreadable, malformed or unsafe to read."""


class TargetError(DeployccError):
    """A target name is unknown or a target file is malformed."""


class OptionError(DeployccError):
    """A command-line option or API argument is invalid."""


class OutputExists(OptionError):
    """An output file or directory exists and was not to be replaced: force=True replaces it in
    Python, --force on the command line."""

    def __init__(self, path: object) -> None:
        super().__init__(f"{path}: already exists", hint="pass force=True to replace it",
                         cli_hint="pass --force to replace it")
        self.args = (path,)  # as it was made: the error survives pickling (an audit cell's process)


class DynamicShapeError(OptionError):
    """Dims the target needs fixed (or given a range for) are dynamic: the audit's
    "dynamic-shape" category, fixed with --shape, --batch or a profile range."""


class ExportFailed(DeployccError):
    """No exporter could export a torch model for the target and prove the export: a finding
    about the model (exit 1), classified in the message (frontend/failures.py)."""

    exit_code = EXIT_FINDINGS
    record: object = None  # the ExportReport: each attempt, classified (set by the front end)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that no `except Exception` on the way can swallow it;
    staging folders are removed on the way out and the CLI exits 130."""


class PrecisionRefused(OptionError):
    """The target declares it lacks the precision asked for (int8 on the Jetson Nano), and says
    what to use instead; the audit counts such a cell as failed for its precision."""

    def __init__(self, target: str, precision: str, reason: str, instead: str) -> None:
        super().__init__(f"{target} has no {precision}: {reason}",
                         hint=f"use --precision {instead}, or --allow-fallback to build {instead} instead")
        self.target, self.precision, self.reason, self.instead = target, precision, reason, instead
