"""The cells two audits of the same models and targets disagree on: run `deploycc audit` with the
code before a change and after it (e.g. `PYTHONPATH=<a git worktree of the old commit>`), then

    python benchmarks/audit_diff.py BEFORE/audit.json AFTER/audit.json [--markdown OUT.md]

Per (model, target): the cell's status, stage, failure class, the build's status and its
summary line; prints every cell that differs and both sides' tallies, exit 1 when any differ.
Standard library only, so it runs in any of the project's environments."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

Key = tuple[str, str]
Seen = tuple[Any, ...]


def cells(path: Path) -> dict[Key, Seen]:
    """(model, target) -> what the cell came to, from an audit.json."""
    found: dict[Key, Seen] = {}
    for cell in json.loads(path.read_text())["cells"]:
        details = cell.get("details") or {}
        found[(cell["model"], cell["target"])] = (cell.get("status"), cell.get("stage"), cell.get("category"),
                                                  details.get("build_status"), details.get("summary"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--markdown", type=Path, help="also write the comparison as a Markdown table")
    args = parser.parse_args()
    before, after = cells(args.before), cells(args.after)
    keys = sorted(set(before) | set(after))
    changed = [key for key in keys if before.get(key) != after.get(key)]
    tallies = {side: Counter(seen[0] for seen in found.values()) for side, found in
               (("before", before), ("after", after))}
    lines = [f"{len(keys)} cells, {len(changed)} changed",
             *(f"{side}: {', '.join(f'{k} {v}' for k, v in sorted(tally.items()))}"
               for side, tally in tallies.items())]
    lines += [f"  {Path(m).name} @ {t}: {before.get((m, t))} -> {after.get((m, t))}" for m, t in changed]
    print("\n".join(lines))
    if args.markdown is not None:
        rows = ["| model | target | before | after |", "|---|---|---|---|"]
        rows += [f"| {Path(m).name} | {t} | {before.get((m, t))} | {after.get((m, t))} |" for m, t in changed]
        args.markdown.write_text("\n".join(lines[:3] + [""] + (rows if changed else [])) + "\n")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
