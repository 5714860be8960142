"""The fp16 analysis on the zoo's dynamo exports as users get them with external data (issue 48,
item 3): torch's dynamo exporter writes `model.onnx` + `model.onnx.data` (`ONNXProgram.save(path,
external_data=True)`, and on its own past 2 GB); `make.py` saves them with the weights inside.

    .venv/bin/python benchmarks/zoo/fp16_external_data.py --zoo /tmp/zoo [--commands check,build]
        [--target jetson-xavier] [--limit N] [--names a,b] [--timeout 600]
        [--code DIR --label before]  # DIR: a git worktree of another commit, first on PYTHONPATH

For each `*_dynamo*.onnx` of the zoo folder (any folder `make.py --out` wrote): a copy with every
initializer in one external file (`--layout torch`, the default: the call `ONNXProgram.save(path,
external_data=True)` makes, `onnx_ir.save(model, path, external_data="model.onnx.data")`, every
initializer over 256 bytes external; `--layout all`: `onnx.save(..., save_as_external_data=True,
all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)`), then, each in its own
process with a timeout, `deploycc check COPY -t T --json` and `deploycc build COPY -t T -o OUT
--no-bench` (as typed, no shape flags), run by the main venv's Python (`-m deploycc.cli`) with the
code at --code first on PYTHONPATH (default: this checkout). The analysis ran where the report has
a `half` section; it was skipped where a `skipped_steps` entry (a note "no fp16 analysis: ..." on
code before the SkippedStep records) says why; a command that ended before it (a failed build, a
timeout, no report) is another failure. Writes the run under --label into
benchmarks/zoo/results/NAME.json (other labels in the file are kept) and prints the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MAIN_PYTHON = REPO / ".venv" / "bin" / "python"


def exports(zoo: Path, names: list[str], limit: int) -> list[Path]:
    """The zoo's dynamo exports, in zoo.txt's order (the families in turn) where it is there."""
    listing = zoo / "zoo.txt"
    files = [zoo / line.strip() for line in listing.read_text().splitlines() if line.strip()] \
        if listing.exists() else sorted(zoo.glob("*.onnx"))
    files = [f for f in files if "_dynamo" in f.name and f.suffix == ".onnx" and f.exists()]
    if names:
        files = [f for f in files if f.name in names or f.stem in names
                 or f.stem.rpartition("_dynamo")[0] in names]
    return files[:limit] if limit else files


def external_copy(model: Path, folder: Path, layout: str) -> dict[str, Any]:
    """model.onnx + model.onnx.data in `folder`, as the exporter writes them.

    layout "torch": `ONNXProgram.save(path, external_data=True)`'s own call (onnxscript's
    save_model_with_external_data: `ir.save(model, path, external_data="model.onnx.data")`, every
    initializer over 256 bytes external, shape constants kept inline); "all": every initializer
    external (`onnx.save(..., size_threshold=0)`), shape constants included, which ONNX Runtime's own
    shape inference cannot read ("Cannot parse data from external tensors")."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model.onnx*"):
        old.unlink()
    if layout == "torch":
        import onnx_ir as ir

        ir.save(ir.load(str(model)), str(folder / "model.onnx"), external_data="model.onnx.data")
    else:
        import onnx

        onnx.save(onnx.load(str(model)), str(folder / "model.onnx"), save_as_external_data=True,
                  all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
    data = folder / "model.onnx.data"
    return {"onnx_bytes": (folder / "model.onnx").stat().st_size,
            "data_bytes": data.stat().st_size if data.exists() else 0}


def deploycc(python: Path, code: Path, args: list[str], timeout: float) -> dict[str, Any]:
    """One deploycc command in its own process group (killed whole at the timeout)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    begun = time.perf_counter()
    child = subprocess.Popen([str(python), "-m", "deploycc.cli", *args], env=env, cwd=code,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"exit": None, "seconds": round(time.perf_counter() - begun, 1),
                "failure": f"timeout: no result within {timeout:.0f} s"}
    return {"exit": child.returncode, "seconds": round(time.perf_counter() - begun, 1),
            "stdout": stdout, "stderr": stderr}


def half_verdict(report: dict[str, Any]) -> dict[str, Any]:
    """Whether the fp16 analysis ran, from a check or build report, and why not where it did not."""
    half = report.get("half")
    skipped = [s for s in report.get("skipped_steps") or []
               if s.get("step") in ("fp16-analysis", "bf16-analysis")]
    notes = [n for n in report.get("notes") or [] if "fp16 analysis" in n or "no fp16" in n]
    if half:
        return {"fp16": "ran", "layers": half.get("layers"), "kept": len(half.get("kept") or []),
                "error_all_half": half.get("error_all_half"), "runs": half.get("runs"),
                "analysis_seconds": half.get("seconds"), "reason": half.get("reason") or ""}
    if skipped or notes:
        why = "; ".join([s.get("reason", "") for s in skipped] + notes)
        return {"fp16": "skipped", "reason": why[:400], "recorded_as": "skipped_steps" if skipped else "note"}
    # neither ran nor said skipped: the command stopped before the analysis (a build that failed)
    return {"fp16": "failed", "failure": f"not reached: {report.get('summary') or 'no half section'}"[:400]}


def run_check(python: Path, code: Path, copy: Path, target: str, timeout: float) -> dict[str, Any]:
    result = deploycc(python, code, ["check", str(copy), "-t", target, "--json"], timeout)
    if result.get("failure"):
        return {"fp16": "failed", **result}
    out = {"exit": result["exit"], "seconds": result["seconds"]}
    try:
        report = json.loads(result["stdout"])
    except json.JSONDecodeError:
        tail = (result["stderr"] or result["stdout"]).strip().splitlines()[-1:] or [""]
        return {**out, "fp16": "failed", "failure": f"no JSON report: {tail[0][:300]}"}
    return {**out, **half_verdict(report)}


def run_build(python: Path, code: Path, copy: Path, target: str, timeout: float) -> dict[str, Any]:
    folder = copy.parent / f"build.{target}"
    result = deploycc(python, code, ["build", str(copy), "-t", target, "-o", str(folder), "--no-bench",
                                     "--force"], timeout)
    if result.get("failure"):
        return {"fp16": "failed", **result}
    out = {"exit": result["exit"], "seconds": result["seconds"]}
    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        tail = result["stderr"].strip().splitlines()[-1:] or [str(error)]
        return {**out, "fp16": "failed", "failure": f"no report.json: {tail[0][:300]}"}
    return {**out, "status": report.get("status"), "stage": report.get("stage"), **half_verdict(report)}


def overall(row: dict[str, Any], commands: list[str]) -> str:
    """ran where every command's analysis ran; skipped where any was skipped; else failed."""
    states = [row[c]["fp16"] for c in commands if c in row]
    if states and all(s == "ran" for s in states):
        return "ran"
    return "skipped" if "skipped" in states else "failed"


def revision(code: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=code, capture_output=True, text=True).stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "deploycc_dirty": bool(git("status", "--porcelain", "--", "deploycc"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", type=Path, default=HERE / "models")
    parser.add_argument("--work", type=Path, default=None,
                        help="copies and builds (default: ZOO/external-data)")
    parser.add_argument("--commands", default="check,build")
    parser.add_argument("--target", default="jetson-xavier")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--names", default="")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per command")
    parser.add_argument("--code", type=Path, default=REPO, help="the deploycc to run (first on PYTHONPATH)")
    parser.add_argument("--python", type=Path,
                        default=MAIN_PYTHON if MAIN_PYTHON.exists() else Path(sys.executable))
    parser.add_argument("--layout", choices=("torch", "all"), default="torch",
                        help="which initializers go external: torch's save (over 256 bytes) or all")
    parser.add_argument("--label", default="after")
    parser.add_argument("--name", default="fp16-external-data")
    parser.add_argument("--counts-only", action="store_true",
                        help="print the counts of the stored run --label, running nothing")
    args = parser.parse_args()
    from rich.progress import Progress

    commands = [c for c in args.commands.split(",") if c]
    results_path = HERE / "results" / f"{args.name}.json"
    if args.counts_only:
        run = json.loads(results_path.read_text())["runs"][args.label]
        report(args.label, summarize(run["models"], run["commands"]), run["commands"], run["target"])
        return 0
    work = args.work or args.zoo / "external-data"
    files = exports(args.zoo, [n for n in args.names.split(",") if n], args.limit)
    if not files:
        print(f"no dynamo export in {args.zoo}")
        return 2
    hints = {}
    with_manifest = args.zoo / "manifest.json"
    if with_manifest.exists():
        for name, entry in json.loads(with_manifest.read_text())["models"].items():
            for row in entry["exports"]:
                if row.get("file"):
                    hints[row["file"]] = {"model": name, "family": entry["family"]}
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task("fp16 / external data", total=len(files))
        for model in files:
            progress.update(task, description=model.stem)
            row: dict[str, Any] = {"file": model.name, **hints.get(model.name, {})}
            folder = work / args.label / model.stem
            try:
                row.update(external_copy(model, folder, args.layout))
            except Exception as error:
                row.update(fp16="failed", failure=f"copy: {type(error).__name__}: {str(error)[:300]}")
                rows.append(row)
                progress.advance(task)
                continue
            for command in commands:
                run = run_check if command == "check" else run_build
                row[command] = run(args.python, args.code, folder / "model.onnx", args.target, args.timeout)
            row["fp16"] = overall(row, commands)
            rows.append(row)
            progress.console.print(f"{model.stem}: {row['fp16']} "
                                   + " ".join(f"{c}={row[c]['fp16']}({row[c].get('seconds')} s)"
                                              for c in commands))
            progress.advance(task)

    counts = summarize(rows, commands)
    stored = json.loads(results_path.read_text()) if results_path.exists() else {"runs": {}}
    stored["runs"][args.label] = {
        "date": time.strftime("%Y-%m-%d"), "zoo": str(args.zoo), "target": args.target, "layout": args.layout,
        "commands": commands, "code": str(args.code), **revision(args.code),
        "command_line": " ".join(["python", "benchmarks/zoo/fp16_external_data.py", *sys.argv[1:]]),
        "seconds": round(time.perf_counter() - started, 1), "counts": counts, "models": rows}
    results_path.parent.mkdir(exist_ok=True)
    results_path.write_text(json.dumps(stored, indent=1) + "\n")
    report(args.label, counts, commands, args.target)
    print(f"wrote {results_path.relative_to(REPO)}")
    return 0


def report(label: str, counts: dict[str, Any], commands: list[str], target: str) -> None:
    print(f"{label}: {counts['exports']} dynamo exports with external data, {target}; "
          f"fp16 analysis ran in {counts['ran']} (every command), skipped in {counts['skipped']}, "
          f"other failures {counts['failed']}")
    for command in commands:
        c = counts["per_command"][command]
        print(f"  {command}: ran {c['ran']}, skipped {c['skipped']}, failed {c['failed']}")
    for reason, n in counts["skip_reasons"].items():
        print(f"  skipped x{n}: {reason}")
    for failure in counts["failures"]:
        print(f"  failed: {failure}")


def summarize(rows: list[dict[str, Any]], commands: list[str]) -> dict[str, Any]:
    import re

    per_command = {c: {s: sum(1 for r in rows if r.get(c, {}).get("fp16") == s)
                       for s in ("ran", "skipped", "failed")} for c in commands}
    reasons: dict[str, int] = {}
    failures = []
    for row in rows:
        for command in commands:
            cell = row.get(command, {})
            if cell.get("fp16") == "skipped":
                # paths and initializer names differ per model: the reason without them
                reason = re.sub(r"/\S+/", ".../", cell["reason"])
                reason = re.sub(r"(initializer|tensor):? \S+?([.:]?\s)", r"\1 X\2", reason)[:160]
                reasons[f"{command}: {reason}"] = reasons.get(f"{command}: {reason}", 0) + 1
            elif cell.get("fp16") == "failed":
                failures.append(f"{row['file']} {command}: {cell.get('failure', '')[:200]}")
        if row.get("failure"):
            failures.append(f"{row['file']}: {row['failure']}")
    states = {s: sum(1 for r in rows if r["fp16"] == s) for s in ("ran", "skipped", "failed")}
    return {"exports": len(rows), **states,
            "per_command": per_command, "skip_reasons": reasons, "failures": failures}


if __name__ == "__main__":
    sys.exit(main())
