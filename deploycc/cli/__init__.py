"""The command line: thin click commands over deploycc's Python API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def emit(report: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """A result as JSON (exactly the API's `to_dict`) or as tables for people."""
    import click  # here, not above: `python -m deploycc.cli` imports this package before it can take Ctrl-C

    if as_json:
        click.echo(report.to_json())
    else:
        render(report)
