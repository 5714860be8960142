"""The real-model audit: `deploycc audit` over the corpus that benchmarks/corpus.py makes, for every
target, and the table of what deploys where into RESULTS.md and results/corpus-audit.{json,md}.

    python benchmarks/corpus.py                 # once: the models (about 60), offline but for PyPI
    python benchmarks/corpus_audit.py [--jobs 2] [--target ort-cpu ...] [--fresh]

Per target: the models ONNX Runtime runs as exported (the baseline every target is held to),
those legal as exported, legal after deploycc, built, verified, and every failure with its
class. A cell legal as exported but refused after deploycc is a regression (a deploycc bug): it is
listed first. Cells are cached by model, target and deploycc version in the audit folder, so a
rerun after a change redoes only what changed (`--fresh` redoes all).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from deploycc import api  # noqa: E402
from deploycc.audit.run import AuditOptions  # noqa: E402
from deploycc.records.audit import HOST_SEGMENTS  # noqa: E402

TARGETS = ("ort-cpu", "openvino-cpu", "jetson-xavier", "jetson-nano", "jetson-orin", "gpu-trt10")
GOALS = {"ort-cpu": 0.97, "openvino-cpu": 0.93, "jetson-xavier": 0.90, "jetson-nano": 0.80,
         "jetson-orin": 0.90, "gpu-trt10": 0.90}
MARK_BEGIN, MARK_END = "<!-- corpus-audit:begin -->", "<!-- corpus-audit:end -->"
# What counts as a success per target: a verified build where the engine is built here, the
# legalized and verified bundle where TensorRT builds it on the device.
DONE = {"verified", "benchmarked", "legalized", "legal-as-exported"}


def ort_runs(corpus: Path) -> dict[str, bool]:
    """Model stem -> whether ONNX Runtime ran it as exported (corpus.py records it)."""
    models = json.loads((corpus / "manifest.json").read_text())["models"]
    return {Path(entry["file"]).stem: entry.get("ort") == "ok" for entry in models.values()}


def tables(report, runs: dict[str, bool]) -> tuple[str, dict]:
    by_target: dict[str, list] = {t: [] for t in report.targets}
    for cell in report.cells:
        by_target[cell.target].append(cell)
    rows = ["| target | models ORT runs | legal as exported | after deploycc | goal | with host segments | "
            "regressed | failure classes |", "|---|---|---|---|---|---|---|---|"]
    summary = {}
    failures = []
    for target, cells in by_target.items():
        counted = [c for c in cells if runs.get(Path(c.model).stem, True)]
        exported = sum(1 for c in counted if c.legal_as_exported)
        done = sum(1 for c in counted if c.status in DONE)
        hosted = sum(1 for c in counted if c.status == HOST_SEGMENTS)
        regressed = sum(1 for c in counted if c.regressed)
        classes = Counter(str(c.category) for c in counted if c.status == "failed")
        total = len(counted) or 1
        goal = GOALS.get(target)
        summary[target] = {"models": len(counted), "legal_as_exported": exported, "after_deploycc": done,
                           "rate": round(done / total, 4), "goal": goal, "regressed": regressed,
                           "with_host_segments": hosted, "classes": dict(classes)}
        rows.append(f"| {target} | {len(counted)} | {exported} ({exported / total:.0%}) | "
                    f"**{done} ({done / total:.0%})** | {f'{goal:.0%}' if goal else ''} | "
                    f"{done + hosted} ({(done + hosted) / total:.0%}) | {regressed} | "
                    + ", ".join(f"{k} {v}" for k, v in classes.most_common()) + " |")
        failures += [c for c in counted if c.status in ("failed", HOST_SEGMENTS)]
    lines = [*rows, "", "\"with host segments\": deployed whole, or with what no rule makes legal on ONNX "
             "Runtime CPU (`--partition`; chain verified against the original). Every cell that did not "
             "deploy whole, with its class and cause (and, in the class column, whether host segments "
             "deploy it):", "",
             "| model | target | class | stage | cause |", "|---|---|---|---|---|"]
    for cell in sorted(failures, key=lambda c: (not c.regressed, c.target, c.model)):
        cause = cell.message.replace("|", "/").replace("\n", " ")[:220]
        flag = " **regressed**" if cell.regressed else ""
        if cell.status == HOST_SEGMENTS:
            split = cell.details.get("partition", {})
            flag += (f"; with host segments ({', '.join(split.get('host_ops', []))} on the host, "
                     f"{split.get('device_flops_share', 0):.1%} of FLOPs on the device)")
        lines.append(f"| {Path(cell.model).stem} | {cell.target} | {cell.category}{flag} | {cell.stage} | "
                     f"{cause} |")
    return "\n".join(lines), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus")
    parser.add_argument("--out", type=Path, default=HERE / "corpus-audit")
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--name", default="corpus-audit",
                        help="results/NAME.{json,md} and its own block in RESULTS.md (heldout-audit for "
                             "`--corpus benchmarks/heldout`)")
    args = parser.parse_args()
    listing = args.corpus / "corpus.txt"
    if not listing.exists():
        sys.exit(f"{listing} not found: make the corpus first (python benchmarks/corpus.py)")
    from deploycc.report.progress import progress_bar

    options = AuditOptions(jobs=args.jobs, timeout=args.timeout, fresh=args.fresh, memory_limit_mb=12288,
                           partition=True)
    with progress_bar("auditing the corpus") as update:
        def progress(counts, total) -> None:
            update(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "starting",
                   sum(counts.values()), total)

        def finished(cell, done, total) -> None:  # a line per cell in a log, where the bar is silent
            update.line(f"[{done}/{total}] {Path(cell.model).stem} @ {cell.target}: {cell.status}"
                        f"{f' ({cell.category})' if cell.category else ''}, {cell.seconds:.1f} s")

        report = api.audit([str(listing)], list(args.targets or TARGETS), args.out, options,
                           progress=progress, finished=finished)
    text, summary = tables(report, ort_runs(args.corpus))
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"{args.name}.json").write_text(json.dumps(
        {"summary": summary, "cells": [c.__dict__ for c in report.cells]}, indent=1, default=str) + "\n")
    held_out = args.name != "corpus-audit"
    command = f"python benchmarks/corpus_audit.py{' --corpus ' + args.corpus.name if held_out else ''}"
    origin = ("`benchmarks/heldout.py` (shipped in PyPI wheels; no hints: the targets' shape policy)"
              if held_out else "`benchmarks/corpus.py` (`make corpus`)")
    heading = (f"## {'Held-out set' if held_out else 'Real-model corpus'} audit\n\nMade by `{command}` "
               f"over {len(report.models)} models from {origin}; raw data in `results/{args.name}.json`. "
               "Stages check, legalize, build, verify; TensorRT targets with "
               "every dynamic dim fixed from the model's hints (TensorRT builds on the device, so "
               "\"after deploycc\" there is legal and verified on ORT); a model refused as a whole is tried "
               "again with host segments (`--partition`), counted apart. Rates are of the models ONNX "
               "Runtime runs as exported.\n\n")
    (results / f"{args.name}.md").write_text(heading + text + "\n")
    from results_page import put_block

    begin, end = (MARK_BEGIN, MARK_END) if not held_out else (f"<!-- {args.name}:begin -->",
                                                              f"<!-- {args.name}:end -->")
    put_block(f"{begin}\n{heading}{text}\n{end}", begin, end)
    for target, row in summary.items():
        print(f"{target}: {row['after_deploycc']}/{row['models']} ({row['rate']:.0%}), legal as exported "
              f"{row['legal_as_exported']}, regressed {row['regressed']}, {row['classes']}")


if __name__ == "__main__":
    main()
