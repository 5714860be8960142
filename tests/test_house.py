"""The house rules a reader relies on, held by tests: every module fits on a few screens, and a
status, a legality or a precision is spelled once, in deploycc/taxonomy.py, never compared
against its string elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

from deploycc.taxonomy import BuildStatus, CellStatus, Legality, Precision

PACKAGE = Path(__file__).parents[1] / "deploycc"
# The board's runner is one file on purpose: the bundle carries it alone, to a Python that has no
# deploycc (a split would be a second file to copy, keep in step and check for Python 3.6).
WHOLE_BY_DESIGN = {"device/run_on_device.py"}
LIMIT = 500


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_is_under_500_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) >= LIMIT}
    assert set(long) <= WHOLE_BY_DESIGN, long


def test_statuses_legality_and_precision_are_compared_as_enums() -> None:
    """`precision == "int8"` or `status in ("verified", ...)` spells a taxonomy value again; the
    board's runner cannot import the taxonomy (its test holds its spelling to it)."""
    values = sorted({m.value for enum in (BuildStatus, CellStatus, Legality, Precision) for m in enum})
    quoted = rf"[\"']({'|'.join(map(re.escape, values))})[\"']"
    compared = re.compile(rf"(==|!=)\s*{quoted}|{quoted}\s*(==|!=)|\bin\s*[(\[{{][^)\]}}]*{quoted}")
    found = [f"{p.relative_to(PACKAGE)}:{number}: {line.strip()}" for p in _modules()
             if p.name not in ("taxonomy.py", "run_on_device.py")
             for number, line in enumerate(p.read_text().splitlines(), 1) if compared.search(line)]
    assert not found, "\n".join(found)
