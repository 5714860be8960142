"""The fp16 analysis over real models: what half precision breaks in each, the layers deploycc
keeps in fp32 and their share of the FLOPs, and what the analysis costs against one plain run of
the model (the verification run it stands beside).

    python benchmarks/fp16_suite.py [--corpus benchmarks/corpus] [--corpus benchmarks/heldout] ...

Each model runs on the inputs the clean-up suite draws for it (its hints, or the sizes deploycc's
own verification draws at), as the fp16 targets' builds would. Results: results/fp16.json and
the "fp16-analysis" block of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.cleanup_vs_peers import feeds_for  # noqa: E402
from benchmarks.results_page import put_block  # noqa: E402
from deploycc.fp16 import analyze_half  # noqa: E402
from deploycc.taxonomy import Precision  # noqa: E402
from deploycc.verify.runner import run_ort  # noqa: E402

MARK_BEGIN, MARK_END = "<!-- fp16-analysis:begin -->", "<!-- fp16-analysis:end -->"
SHARE_GOAL, SHARE_LIMIT = 0.01, 0.05  # the issue's: median below 1%, none above 5% without a reason


def measure(model: Path) -> dict:
    """One model: the analysis, and the time of one plain run on the same inputs."""
    row: dict = {"model": model.stem}
    try:
        feeds = feeds_for(model)
        started = time.monotonic()
        run_ort(model, feeds, optimize=True, threads=0)
        row["plain_run_s"] = round(time.monotonic() - started, 3)
        report = analyze_half(model, feeds, Precision.FP16, inputs="hints")
    except Exception as error:  # a model ORT cannot run on these inputs: said, not counted
        lines = str(error).strip().splitlines()
        row["error"] = (lines[0] if lines else type(error).__name__)[:200]
        return row
    row.update(layers=report.layers, kept=report.kept, share=report.kept_flops_share,
               flagged=[str(flag) for flag in report.flagged], beyond_range=sum(
                   flag.why == "beyond range" for flag in report.flagged),
               error_all_half=report.error_all_half, error_with_kept=report.error_with_kept,
               within_all_half=report.within_all_half, within_with_kept=report.within_with_kept,
               runs=report.runs, seconds=report.seconds, reason=report.reason)
    return row


def summary(rows: list[dict], corpora: list[str]) -> tuple[str, dict]:
    analysed = [row for row in rows if "error" not in row and row["layers"] > 0]
    shares = [row["share"] for row in analysed]
    kept = [row for row in analysed if row["kept"]]
    over = [row for row in analysed if row["share"] > SHARE_LIMIT]
    unstated = [row for row in over if not row["reason"]]
    costs = [row["seconds"] / max(row["plain_run_s"], 1e-3) for row in analysed]
    numbers = {"models": len(rows), "analysed": len(analysed), "failed": len(rows) - len(analysed),
               "median_share": statistics.median(shares) if shares else 0.0,
               "max_share": max(shares, default=0.0), "with_kept": len(kept),
               "over_limit": len(over), "over_limit_unstated": len(unstated),
               "flagged_models": sum(1 for row in analysed if row["beyond_range"]),
               "within_all_half": sum(1 for row in analysed if row["within_all_half"]),
               "not_within_with_kept": sum(1 for row in analysed if not row["within_with_kept"]),
               "median_cost_ratio": statistics.median(costs) if costs else 0.0,
               "median_runs": statistics.median([row["runs"] for row in analysed]) if analysed else 0,
               "total_seconds": round(sum(row["seconds"] for row in analysed), 1)}
    lines = [MARK_BEGIN, "## fp16 analysis on real models", "",
             f"Made by `benchmarks/fp16_suite.py` ({time.strftime('%Y-%m-%d')}) over "
             + ", ".join(f"`{c}`" for c in corpora) + ": every float model run on ORT CPU at its hints, "
             "half emulated between layers, the fewest layers kept in fp32 so that the emulated output is "
             "within the fp16 tolerance (atol 1e-2, rtol 1e-2, cosine 0.999).", "",
             f"- models: {numbers['models']}, analysed {numbers['analysed']} "
             f"(others: ORT cannot run them on these inputs, or no float32 layer)",
             f"- within fp16 tolerance with every layer in fp16: {numbers['within_all_half']} of "
             f"{numbers['analysed']}; a tensor beyond fp16's range in {numbers['flagged_models']}",
             f"- FLOPs kept in fp32: median {100 * numbers['median_share']:.2f}% (goal < 1%), "
             f"max {100 * numbers['max_share']:.2f}%; {numbers['with_kept']} model(s) keep a layer; "
             f"{numbers['over_limit']} above 5% ({numbers['over_limit_unstated']} without a stated reason)",
             f"- not brought within tolerance by keeping layers: {numbers['not_within_with_kept']} "
             "(the reason is stated per model)",
             f"- cost: median {numbers['median_cost_ratio']:.1f}x one plain ORT run of the model "
             f"(median {numbers['median_runs']} emulation run(s)); {numbers['total_seconds']} s in all", "",
             "| model | layers | kept in fp32 | FLOPs share | max error all fp16 | with kept | flagged "
             "| runs | s | plain run s | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (-r.get("share", -1), r["model"])):
        if "error" in row:
            lines.append(f"| {row['model']} | | | | | | | | | | not run: {row['error'][:80]} |")
            continue
        lines.append(f"| {row['model']} | {row['layers']} | {', '.join(row['kept'][:4]) or '-'}"
                     f"{' ...' if len(row['kept']) > 4 else ''} | {100 * row['share']:.2f}% | "
                     f"{row['error_all_half']:.3g} | {row['error_with_kept']:.3g} | {row['beyond_range']} | "
                     f"{row['runs']} | {row['seconds']} | {row['plain_run_s']} | {row['reason'][:120]} |")
    return "\n".join([*lines, MARK_END]), numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", type=Path, help="a folder of .onnx models (repeatable)")
    parser.add_argument("--limit", type=int, help="at most this many models per corpus")
    parser.add_argument("--reports-only", action="store_true",
                        help="rewrite the RESULTS.md block from results/fp16.json without running")
    args = parser.parse_args()
    corpora = args.corpus or [HERE / "corpus"]
    from rich.progress import Progress

    rows = []
    models = [] if args.reports_only else [m for c in corpora for m in sorted(c.glob("*.onnx"))[:args.limit]]
    if args.reports_only:
        rows = json.loads((HERE / "results" / "fp16.json").read_text())["models"]
    with Progress() as progress:
        task = progress.add_task("fp16 analysis", total=len(models))
        for model in models:
            progress.update(task, description=model.stem[:40])
            rows.append(measure(model))
            row = rows[-1]
            progress.console.print(f"{model.stem}: " + (row["error"] if "error" in row else
                                   f"{len(row['kept'])} kept, {100 * row['share']:.2f}% FLOPs, "
                                   f"{row['runs']} runs, {row['seconds']} s"))
            progress.advance(task)
    names = [str(c.relative_to(HERE.parent)) if c.is_relative_to(HERE.parent) else str(c) for c in corpora]
    block, numbers = summary(rows, names)
    (HERE / "results").mkdir(exist_ok=True)
    document = {"summary": numbers, "models": rows}
    (HERE / "results" / "fp16.json").write_text(json.dumps(document, indent=1) + "\n")
    put_block(block, MARK_BEGIN, MARK_END)
    print(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    main()
