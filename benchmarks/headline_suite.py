"""The headline command as a newcomer types it: `deploycc build MODEL --target T`, nothing else, on
every model of the real corpus and every target, set beside the corpus audit (which fixes every
dim from the models' hints: an expert's run) cell by cell.

    python benchmarks/corpus.py              # once: the models
    python benchmarks/corpus_audit.py        # the audit with hints, all six targets
    python benchmarks/headline_suite.py [--jobs 2] [--target T ...] [--fresh]

Each cell runs the real command in its own process, in its own folder, so the default output
directory (`<model stem>.<target>/`) is what a user gets. Per target: cells, the same outcome as
the audit, the exit codes, and every cell that differs with its exit code and the flag its message
names. Also counted: verifications whose every output was degenerate (all about zero, or constant)
yet called ok: the goal is none. Writes results/headline.json, results/headline.md and its block of
RESULTS.md. Cells are cached by model, target and the code's content (`--fresh` redoes them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

TARGETS = ("ort-cpu", "openvino-cpu", "jetson-xavier", "jetson-nano", "jetson-orin", "gpu-trt10")
GOAL = 0.98
DONE = {"verified", "benchmarked", "legalized", "legal-as-exported"}
MARK_BEGIN, MARK_END = "<!-- headline:begin -->", "<!-- headline:end -->"
FLAGS = re.compile(r"--[a-z][a-z0-9-]+")


def code_digest() -> str:
    """The content of what decides a cell's outcome: the package and the target files."""
    digest = hashlib.sha256()
    for folder in (REPO / "deploycc", REPO / "targets"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".toml"):
                digest.update(str(path.relative_to(REPO)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def run_cell(model: Path, target: str, work: Path, timeout: float) -> dict:
    """`deploycc build MODEL --target T` in a fresh folder; what it printed and wrote."""
    folder = work / f"{model.stem}.{target}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "deploycc.cli", "build", str(model), "--target", target]
    started = time.perf_counter()
    try:
        child = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout)
        code, stderr = child.returncode, child.stderr
    except subprocess.TimeoutExpired:
        code, stderr = "timeout", f"did not finish in {timeout:g} s"
    cell = {"model": model.stem, "target": target, "exit": code,
            "seconds": round(time.perf_counter() - started, 1),
            "stderr": stderr.strip().splitlines()[-1][:400] if stderr.strip() else ""}
    out = folder / f"{model.stem}.{target}"
    report_file = out / "report.json"
    if report_file.exists():
        report = json.loads(report_file.read_text())
        cell.update(status=report["status"], stage=report["stage"], summary=report["summary"][:400],
                    next_step=report["next_step"][:400], failure_category=report.get("failure_category"),
                    shapes=" ; ".join(i["accepts"] for i in (report.get("shapes") or {}).get("inputs", [])),
                    strict_json=_strict(report_file.read_text()), **_verification_facts(report))
    cell["said_default_dir"] = "no -o given" in stderr
    shutil.rmtree(folder, ignore_errors=True)  # the engines and models: gigabytes over the corpus
    return cell


def _strict(text: str) -> bool:
    """report.json parses as JSON that JavaScript and jq accept (no NaN, no Infinity)."""
    def refuse(constant: str) -> None:
        raise ValueError(constant)

    try:
        json.loads(text, parse_constant=refuse)
        return True
    except ValueError:
        return False


def _verification_facts(report: dict) -> dict:
    """Per build: the verifications made, and any that passed on outputs that all carry no signal."""
    legalized = report.get("legalize") or {}
    verifications = [v for v in (report.get("verification"), legalized.get("verification")) if v]
    flat_ok = 0
    for verification in verifications:
        floating = [o for o in verification["outputs"] if o["dtype"].startswith("float") and
                    _size(o["shape"]) >= 2]
        if verification["passed"] and floating and all(o.get("degenerate") for o in floating):
            flat_ok += 1
    not_judged = sorted({o["name"] for v in verifications for o in v["outputs"] if o.get("degenerate")})
    inputs = verifications[0]["inputs"] if verifications else ""
    return {"degenerate_ok": flat_ok, "not_judged": not_judged, "verified_on": inputs[:200]}


def _size(shape: list) -> int:
    total = 1
    for dim in shape:
        total *= int(dim)
    return total


def outcome_of_build(cell: dict) -> str:
    """ok (exit 0), needs-inputs, refused (exit 1: not legal, not built or not verified), or the
    exit code (2: bad input or options; anything else is a crash)."""
    if cell["exit"] == 0:
        return "ok"
    if cell.get("status") == "needs-inputs":
        return "needs-inputs"
    return "refused" if cell["exit"] == 1 else f"exit {cell['exit']}"


def outcome_of_audit(cell: dict) -> str:
    """The same classes for an audit cell (a model it deploys only with host segments is refused
    as a whole, as `build` without --partition refuses it)."""
    if cell["status"] in DONE:
        return "ok"
    if cell.get("category") == "needs-inputs":
        return "needs-inputs"
    return "exit 2" if cell.get("category") == "invalid-model" else "refused"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus")
    parser.add_argument("--work", type=Path, default=HERE / "headline-work")
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--audit", type=Path, default=HERE / "results" / "corpus-audit.json",
                        help="the audit with hints to set each cell beside (benchmarks/zoo/results/onnx.json "
                             "for the zoo)")
    parser.add_argument("--name", default="headline",
                        help="results/NAME.{json,md} and its own block in RESULTS.md "
                             "(headline-zoo for the zoo)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the tables from the cells already run, whatever code ran them")
    args = parser.parse_args()
    listing = args.corpus / "corpus.txt"
    if not listing.exists():
        sys.exit(f"{listing} not found: make the corpus first (python benchmarks/corpus.py)")
    models = [Path(line.strip()) if Path(line.strip()).is_absolute() else args.corpus / line.strip()
              for line in listing.read_text().splitlines() if line.strip() and not line.startswith("#")]
    targets = list(args.targets or TARGETS)
    code = code_digest()
    cache = args.work / "cells"
    if args.report_only:
        write_results([json.loads(path.read_text()) for path in sorted(cache.glob("*.json"))], targets,
                      args.audit, args.name)
        return
    cache.mkdir(parents=True, exist_ok=True)
    todo, cells = [], []
    for model in models:
        digest = hashlib.sha256(model.read_bytes()).hexdigest()[:16]
        for target in targets:
            key = cache / f"{model.stem}.{target}.json"
            if key.exists() and not args.fresh:
                kept = json.loads(key.read_text())
                if kept.get("key") == f"{digest}:{code}":
                    cells.append(kept)
                    continue
            todo.append((model, target, key, f"{digest}:{code}"))
    from deploycc.report.progress import progress_bar

    with progress_bar("headline command", quiet=False) as update, \
            ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_cell, model, target, args.work / "runs", args.timeout): (key, tag)
                   for model, target, key, tag in todo}
        for done, future in enumerate(as_completed(futures), start=1):
            key, tag = futures[future]
            cell = future.result()
            cell["key"] = tag
            key.write_text(json.dumps(cell, indent=1) + "\n")
            cells.append(cell)
            update(f"{cell['model']} @ {cell['target']}: exit {cell['exit']}", done, len(todo))
            update.line(f"[{done}/{len(todo)}] {cell['model']} @ {cell['target']}: exit {cell['exit']} "
                        f"({cell.get('status', '-')}), {cell['seconds']} s")
    write_results(cells, targets, args.audit, args.name)


def write_results(cells: list[dict], targets: list[str], audit_path: Path, name: str) -> None:
    audit = json.loads(audit_path.read_text())
    audited = {(Path(c["model"]).stem, c["target"]): c for c in audit["cells"]}
    accepted = set(FLAGS.findall(subprocess.run([sys.executable, "-m", "deploycc.cli", "build", "--help"],
                                                capture_output=True, text=True, cwd=REPO).stdout))
    rows = ["| target | cells | same outcome as the audit with hints | exit 0 | exit 1 | exit 2 | "
            "other exits | needs inputs |", "|---|---|---|---|---|---|---|---|"]
    summary: dict[str, dict] = {}
    differing = []
    for target in targets:
        mine = [c for c in cells if c["target"] == target]
        same = 0
        exits: Counter = Counter()
        for cell in mine:
            exits[str(cell["exit"])] += 1
            reference = audited.get((cell["model"], target))
            ours, theirs = outcome_of_build(cell), outcome_of_audit(reference) if reference else "not audited"
            cell["outcome"], cell["audit_outcome"] = ours, theirs
            if ours == theirs:
                same += 1
            else:
                text = f"{cell.get('summary', '')} {cell.get('next_step', '')} {cell.get('stderr', '')}"
                cell["flags_named"] = sorted(set(FLAGS.findall(text)) & accepted)
                differing.append(cell)
        total = len(mine) or 1
        needs = sum(c.get("status") == "needs-inputs" for c in mine)
        summary[target] = {"cells": len(mine), "same": same, "rate": round(same / total, 4),
                           "exits": dict(exits), "needs_inputs": needs}
        other = sum(v for k, v in exits.items() if k not in ("0", "1", "2"))
        rows.append(f"| {target} | {len(mine)} | **{same} ({same / total:.1%})** | {exits['0']} | "
                    f"{exits['1']} | {exits['2']} | {other} | {needs} |")
    everything = sum(s["cells"] for s in summary.values()) or 1
    agreeing = sum(s["same"] for s in summary.values())
    flat = sum(c.get("degenerate_ok", 0) for c in cells)
    not_strict = sum(1 for c in cells if c.get("strict_json") is False)
    said = sum(1 for c in cells if c.get("said_default_dir"))
    lines = [*rows, "",
             f"All cells: **{agreeing}/{everything} ({agreeing / everything:.1%})** reach the audit's "
             f"outcome (goal {GOAL:.0%}). Verifications passed on outputs that all carry no signal: "
             f"**{flat}**. report.json that is not strict JSON: {not_strict}. Builds that said where they "
             f"wrote (no -o given): {said} of {len(cells)}.", ""]
    if differing:
        lines += ["Every cell whose outcome differs from the audit's, with the flags its message names:", "",
                  "| model | target | audit (hints) | `build` as typed | exit | flags named | message |",
                  "|---|---|---|---|---|---|---|"]
        for cell in sorted(differing, key=lambda c: (c["target"], c["model"])):
            message = (cell.get("summary") or cell.get("stderr") or "").replace("|", "/")
            message = message.replace("\n", " ")[:200]
            lines.append(f"| {cell['model']} | {cell['target']} | {cell['audit_outcome']} | "
                         f"{cell['outcome']} | {cell['exit']} | {', '.join(cell['flags_named']) or '-'} | "
                         f"{message} |")
    not_judged = [c for c in cells if c.get("not_judged")]
    if not_judged:
        lines += ["", "Outputs reported as not judged (their reference carries no signal on the drawn "
                  "inputs): " + "; ".join(f"{c['model']} @ {c['target']}: {', '.join(c['not_judged'])}"
                              for c in sorted(not_judged, key=lambda c: (c["model"], c["target"]))), ""]
    text = "\n".join(lines)
    results = HERE / "results"
    (results / f"{name}.json").write_text(json.dumps({"summary": summary, "cells": cells}, indent=1) + "\n")
    zoo = name != "headline"
    resolved = audit_path.resolve()
    shown = resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else audit_path
    heading = (f"## The headline command as typed{' on the zoo' if zoo else ''}\n\nMade by "
               f"`python benchmarks/headline_suite.py{' --name ' + name if zoo else ''}`: "
               "`deploycc build MODEL --target T` with no other flag (default output folder, the target's "
               "shape policy, typical sizes for verification and bench) on every model of "
               f"{'the list given' if zoo else '`benchmarks/corpus.py`'}, each cell against the audit with "
               f"hints (`{shown}`). "
               "An outcome is ok (exit 0: verified, or legalized and bundled "
               "for TensorRT), needs-inputs, refused (exit 1: not legal, built or verified; host segments "
               "count as refused, since the command has no --partition), or another exit code. Raw data: "
               f"`results/{name}.json`.\n\n")
    (results / f"{name}.md").write_text(heading + text + "\n")
    from results_page import put_block

    begin, end = (MARK_BEGIN, MARK_END) if not zoo else (f"<!-- {name}:begin -->", f"<!-- {name}:end -->")
    put_block(f"{begin}\n{heading}{text}\n{end}", begin, end)
    print(f"same outcome as the audit: {agreeing}/{everything} ({agreeing / everything:.1%}); "
          f"degenerate ok: {flat}; not strict JSON: {not_strict}")
    for target, row in summary.items():
        print(f"  {target}: {row['same']}/{row['cells']} exits {row['exits']}")


if __name__ == "__main__":
    main()
