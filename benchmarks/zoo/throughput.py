"""The audit's throughput, before and after a change, side by side in one run: `deploycc audit`
over the same zoo models and targets, once with the code at REV (a git worktree of this repository,
first on PYTHONPATH, cells included) and once with the working tree, each into a fresh folder.

    .venv-bench/bin/python benchmarks/zoo/throughput.py --rev 458fd94 [--models 50] [--target T ...]
                                                       [--zoo FOLDER] [--name throughput]
                                                       [--same-work]

Reports cells per hour of each, their ratio, the cells' seconds per target, and whether both
audits reached the same status in every cell; writes benchmarks/zoo/results/NAME.json.
--same-work runs the working tree a third time with --no-fp16-analysis: the work REV's cells did
where REV had no half-precision analysis (458fd94's TensorRT cells had none), a ratio of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SAME_WORK = "after-no-fp16-analysis"


def pick(models: Path, count: int) -> list[str]:
    """The first `count` exports of the zoo, the families in turn (zoo.txt is in that order)."""
    manifest = json.loads((models / "manifest.json").read_text())["models"]
    files = [
        row["file"]
        for entry in manifest.values()
        for row in entry["exports"]
        if row.get("file") and row.get("ort") == "ok" and (models / row["file"]).exists()
    ]
    return [str(models / name) for name in files[:count]]


def audit(
    code: Path, listing: Path, targets: list[str], out: Path, jobs: int, flags: tuple[str, ...] = ()
) -> tuple[float, dict[str, str], dict[str, float]]:
    """The audit's wall time, each cell's status, and the seconds its cells took per target."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [
        sys.executable,
        "-m",
        "deploycc.cli",
        "audit",
        str(listing),
        "-o",
        str(out),
        "--jobs",
        str(jobs),
        "--json",
        *[arg for target in targets for arg in ("--target", target)],
        *flags,
    ]
    started = time.perf_counter()
    child = subprocess.run(command, env=env, capture_output=True, text=True, cwd=code)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        sys.exit(f"audit with {code} failed: {child.stderr.strip().splitlines()[-1:]}")
    report = json.loads(child.stdout)
    per_target: dict[str, float] = {}
    for cell in report["cells"]:
        per_target[cell["target"]] = per_target.get(cell["target"], 0.0) + cell["seconds"]
    statuses = {f"{Path(c['model']).name}@{c['target']}": f"{c['status']}: {c.get('message') or ''}"[:300]
                for c in report["cells"]}
    return seconds, statuses, {target: round(total, 1) for target, total in per_target.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", required=True, help="the code before the change (a commit)")
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--zoo", type=Path, default=HERE / "models")
    parser.add_argument("--name", default="throughput", help="results/NAME.json")
    parser.add_argument("--same-work", action="store_true",
                        help="also the working tree with --no-fp16-analysis (REV had no half analysis)")
    args = parser.parse_args()
    targets = args.targets or ["ort-cpu", "jetson-xavier"]
    work = Path(tempfile.mkdtemp(prefix="deploycc-throughput-"))
    listing = work / "models.txt"
    listing.write_text("".join(f"{m}\n" for m in pick(args.zoo, args.models)))
    before = work / "before"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(before), args.rev],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    try:
        runs = {}
        plan: list[tuple[str, Path, tuple[str, ...]]] = [("before", before, ()), ("after", REPO, ())]
        if args.same_work:
            plan.append((SAME_WORK, REPO, ("--no-fp16-analysis",)))
        for label, code, flags in plan:
            seconds, statuses, per_target = audit(code, listing, targets, work / f"audit-{label}", args.jobs,
                                                  flags)
            # Each audit keeps every build (REV has no --reports-only); the next one starts on the
            # disk this one found, or heavy models fill it and its cells fail early.
            shutil.rmtree(work / f"audit-{label}", ignore_errors=True)
            runs[label] = {
                "seconds": round(seconds, 1),
                "cells": len(statuses),
                "cells_per_hour": round(len(statuses) / seconds * 3600),
                "cell_seconds_per_target": per_target,
                "statuses": statuses,
            }
            print(
                f"{label}: {len(statuses)} cells in {seconds:.0f} s, "
                f"{runs[label]['cells_per_hour']} cells/hour"
            )
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    def status(label: str, cell: str) -> str:
        return str(runs[label]["statuses"].get(cell, "missing")).split(":")[0]

    differ = sorted(cell for cell in runs["before"]["statuses"]
                    if status("after", cell) != status("before", cell))
    ratio = runs["after"]["cells_per_hour"] / max(runs["before"]["cells_per_hour"], 1)
    print(
        f"after / before: {ratio:.2f}x cells per hour; "
        f"cells whose status differs: {len(differ)} {differ[:10]}"
    )
    same_work = {}
    if SAME_WORK in runs:
        same_work = {"ratio_same_work": round(runs[SAME_WORK]["cells_per_hour"]
                                              / max(runs["before"]["cells_per_hour"], 1), 2),
                     "differ_same_work": sorted(cell for cell in runs["before"]["statuses"]
                                                if status(SAME_WORK, cell) != status("before", cell))}
        print(f"{SAME_WORK} / before: {same_work['ratio_same_work']:.2f}x cells per hour; cells whose "
              f"status differs: {len(same_work['differ_same_work'])}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"{args.name}.json").write_text(
        json.dumps(
            {
                "rev_before": args.rev,
                "targets": targets,
                "models": args.models,
                "zoo": str(args.zoo),
                "jobs": args.jobs,
                "ratio": round(ratio, 2),
                **same_work,
                "differ": {cell: {label: runs[label]["statuses"].get(cell) for label in runs}
                           for cell in differ},
                **{k: {kk: vv for kk, vv in v.items() if kk != "statuses"} for k, v in runs.items()},
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
