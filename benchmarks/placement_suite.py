"""Where ONNX Runtime's GPU providers will run real models, predicted by `check`, as exported and
after `legalize`: per model the TensorRT (or CUDA) subgraphs, the nodes left on the CPU and the
Memcpy borders, on ort-trt and ort-cuda.

    python benchmarks/placement_suite.py [--corpus benchmarks/corpus] [--corpus benchmarks/heldout]
                                         [--name placement-zoo]

Results: results/NAME.json and the NAME block of RESULTS.md (NAME: placement by default). No GPU
is needed: this is the prediction, which a GPU host's runner (`run_on_device.py --engine onnxruntime-gpu`)
measures against.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_page import put_block  # noqa: E402
from deploycc import api  # noqa: E402


def marks(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


TARGETS = ("ort-trt", "ort-cuda")


def _predicted(path: Path, target: str) -> dict:
    placement = api.check(path, [target], precision=None).targets[0].placement
    assert placement is not None
    return {"subgraphs": placement.subgraphs, "cpu_nodes": placement.cpu_nodes, "memcpy": placement.memcpy,
            "off_primary": [f"{o.node} ({o.op}) -> {o.provider.removesuffix('ExecutionProvider')}: {o.reason}"
                            for o in placement.off_primary][:20]}


def measure(model: Path, target: str, work: Path) -> dict:
    row: dict = {"model": model.stem, "target": target}
    try:
        row["exported"] = _predicted(model, target)
        legalized = work / f"{model.stem}.{target}.onnx"
        started = time.monotonic()
        report = api.legalize(model, target, legalized, force=True)
        row["legalize_s"] = round(time.monotonic() - started, 1)
        row["after"] = _predicted(legalized if legalized.exists() else model, target)
        row["legalized"] = bool(report.success)
    except Exception as error:  # a model check or legalize cannot read: said, not counted
        lines = str(error).strip().splitlines()
        row["error"] = (lines[0] if lines else type(error).__name__)[:200]
    return row


def summary(rows: list[dict], corpora: list[str], name: str) -> tuple[str, dict]:
    numbers: dict = {}
    begin, end = marks(name)
    title = "ONNX Runtime GPU placement predicted" + (f" ({name})" if name != "placement" else "")
    lines = [begin, f"## {title}", "",
             f"Made by `benchmarks/placement_suite.py` ({time.strftime('%Y-%m-%d')}) over "
             + ", ".join(f"`{c}`" for c in corpora) + ": `check` on each model as exported and after "
             "`legalize` for the target (no GPU: the prediction the runner's measured placement is held "
             "to).", "",
             "| target | models | one subgraph, 0 CPU nodes as exported | after legalize "
             "| CPU nodes left (models) |",
             "|---|---|---|---|---|"]
    for target in TARGETS:
        done = [r for r in rows if r["target"] == target and "error" not in r]
        clean = [r for r in done if r["exported"]["subgraphs"] <= 1 and r["exported"]["cpu_nodes"] == 0]
        after = [r for r in done if r["after"]["subgraphs"] <= 1 and r["after"]["cpu_nodes"] == 0]
        left = [r for r in done if r["after"]["cpu_nodes"]]
        numbers[target] = {"models": len(done), "one_subgraph_exported": len(clean),
                           "one_subgraph_after": len(after), "with_cpu_nodes_after": len(left),
                           "failed": sum(1 for r in rows if r["target"] == target and "error" in r)}
        share = 100 * len(after) / len(done) if done else 0.0
        lines.append(f"| {target} | {len(done)} | {len(clean)} | {len(after)} ({share:.1f}%) | "
                     f"{sum(r['after']['cpu_nodes'] for r in left)} ({len(left)}) |")
    lines += ["", "| model | target | subgraphs / CPU nodes / Memcpy as exported | after legalize | "
                  "what stays off the primary provider |", "|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["target"], r["model"])):
        if "error" in row:
            lines.append(f"| {row['model']} | {row['target']} | | | not run: {row['error'][:80]} |")
            continue
        before, after = row["exported"], row["after"]
        if before["subgraphs"] <= 1 and not before["cpu_nodes"] and after == before:
            continue  # one subgraph, nothing on the CPU, before and after: counted above
        lines.append(f"| {row['model']} | {row['target']} | "
                     f"{before['subgraphs']} / {before['cpu_nodes']} / "
                     f"{before['memcpy']} | {after['subgraphs']} / {after['cpu_nodes']} / "
                     f"{after['memcpy']} | "
                     f"{'; '.join(after['off_primary'][:3])[:200]} |")
    return "\n".join([*lines, end]), numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", type=Path, help="a folder of .onnx models (repeatable)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--name", default="placement", help="results/NAME.json and RESULTS.md's NAME block")
    args = parser.parse_args()
    corpora = args.corpus or [HERE / "corpus"]
    models, seen = [], set()
    for corpus in corpora:  # a file name in two folders is one model, taken from the first
        for model in sorted(corpus.glob("*.onnx"))[:args.limit]:
            if model.name not in seen:
                seen.add(model.name)
                models.append(model)
    from rich.progress import Progress

    rows = []
    with tempfile.TemporaryDirectory(prefix="deploycc-placement-") as folder, Progress() as progress:
        task = progress.add_task("placement", total=len(models) * len(TARGETS))
        for model in models:
            for target in TARGETS:
                rows.append(measure(model, target, Path(folder)))
                row = rows[-1]
                progress.console.print(f"{model.stem} {target}: " + (row.get("error") or
                                       f"{row['exported']['subgraphs']}/{row['exported']['cpu_nodes']} -> "
                                       f"{row['after']['subgraphs']}/{row['after']['cpu_nodes']}"))
                progress.advance(task)
    names = [str(c.relative_to(HERE.parent)) if c.is_relative_to(HERE.parent) else str(c) for c in corpora]
    block, numbers = summary(rows, names, args.name)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"{args.name}.json").write_text(json.dumps({"summary": numbers, "models": rows},
                                                                   indent=1) + "\n")
    put_block(block, *marks(args.name))
    print(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    main()
