"""benchmarks/RESULTS.md is written by several suites, each owning the block between its markers."""

from __future__ import annotations

from pathlib import Path

PAGE = Path(__file__).resolve().parent / "RESULTS.md"


def put_block(block: str, begin: str, end: str, page: Path = PAGE) -> None:
    """`block` (from `begin` to `end`, markers included) in place of the page's block between those
    markers, or appended when the page has none yet."""
    text = page.read_text() if page.exists() else ""
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)
