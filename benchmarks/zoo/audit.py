"""The zoo's audit: `deploycc audit` over what make.py exported, on every target, and the front end
over the same torch models from their modules (`factories.py:NAME`), with tables per target, per
family and per exporter, and every failure with its class and cause.

    .venv-bench/bin/python benchmarks/zoo/make.py            # once: the models
    .venv-bench/bin/python benchmarks/zoo/audit.py [--kind onnx|torch] [--target T ...]
                                                   [--family timm,...] [--limit N] [--jobs 2]

Resumable: cells are stored by model, target and deploycc version in the audit folder
(benchmarks/zoo/audit-onnx/ or audit-torch/, ignored by git), so a rerun redoes only what changed.
Writes benchmarks/zoo/results/KIND.{json,md} and its block of benchmarks/RESULTS.md. Rates are of
the models ONNX Runtime runs as exported (onnx) or of the models torch runs (torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from itertools import zip_longest
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from deploycc import api  # noqa: E402
from deploycc.records.audit import HOST_SEGMENTS, AuditOptions  # noqa: E402

# In this order, two jobs side by side run targets of different export policies (ort-cpu beside
# jetson-xavier, ...), so that a torch model's second cell of a policy finds its export made.
TARGETS = ("ort-cpu", "jetson-xavier", "openvino-cpu", "jetson-nano", "gpu-trt10", "jetson-orin")
# issue 28's goals (onnx) and issue 26's (torch, from the module)
GOALS = {
    "onnx": {
        "ort-cpu": 0.995,
        "openvino-cpu": 0.98,
        "jetson-xavier": 0.97,
        "jetson-orin": 0.97,
        "gpu-trt10": 0.97,
        "jetson-nano": 0.92,
    },
    "torch": {
        "ort-cpu": 0.99,
        "openvino-cpu": 0.99,
        "jetson-xavier": 0.98,
        "jetson-orin": 0.98,
        "gpu-trt10": 0.98,
        "jetson-nano": 0.95,
    },
}
# per cell: two jobs side by side on a 24 GiB machine
MEMORY_LIMIT_MB = 12288
DONE = {"verified", "benchmarked", "legalized", "legal-as-exported"}


def torch_entries(models: Path, families: set[str], limit: int) -> tuple[list[str], dict[str, dict]]:
    """The catalog's torch models as factories (no export made beforehand: the front end exports),
    the first `limit` of each family taken in turn so a partial run spans the families; those whose
    module make.py could not build (its manifest, where there is one) left out."""
    from catalog import catalog

    manifest = models / "manifest.json"
    made = json.loads(manifest.read_text())["models"] if manifest.exists() else {}
    unbuilt = {name for name, entry in made.items()
               if any(row.get("failure", "").startswith(("build", "left out")) for row in entry["exports"])}
    per_family: dict[str, list[Any]] = defaultdict(list)
    for name, model in catalog().items():
        if (not families or model.family in families) and name not in unbuilt:
            per_family[model.family].append(model)
    chosen = [models_[:limit] if limit else models_ for models_ in per_family.values()]
    ordered = [model for rank in zip_longest(*chosen) for model in rank if model is not None]
    entries = [f"{HERE / 'factories.py'}:{model.name}" for model in ordered]
    about = {model.name: {"family": model.family, "group": model.group, "exporter": "front end", "runs": True}
             for model in ordered}
    return entries, about


def zoo_entries(models: Path, kind: str, families: set[str], limit: int) -> tuple[list[str], dict[str, dict]]:
    """The audit's entries and, per entry's stem, what the manifest says of it (family, group,
    exporter, whether ORT runs it)."""
    if kind == "torch":
        return torch_entries(models, families, limit)
    manifest = json.loads((models / "manifest.json").read_text())["models"]
    entries, about = [], {}
    taken: Counter[str] = Counter()
    for entry in manifest.values():
        if families and entry["family"] not in families:
            continue
        if limit and taken[entry["family"]] >= limit:
            continue
        made = [row for row in entry["exports"] if row.get("file") and (models / row["file"]).exists()]
        if made:
            taken[entry["family"]] += 1
        for row in made:
            entries.append(str(models / row["file"]))
            about[row["file"].removesuffix(".onnx")] = {
                "family": entry["family"],
                "group": entry["group"],
                "exporter": row["exporter"],
                "runs": row.get("ort") == "ok",
            }
    return entries, about


# A factory that raises, or a module that fails on its own example inputs: not a model torch runs
NOT_TORCH = ("the factory failed", "the module fails on its example inputs")


def torch_runs(cell: Any) -> bool:
    return not any(text in cell.message for text in NOT_TORCH)


def stem(model: str) -> str:
    return model.rpartition(":")[2] if ".py:" in model else Path(model).name.removesuffix(".onnx")


def export_table(cells: list[Any], targets: list[str], summary: dict[str, Any]) -> list[str]:
    """Per target: the exporter the front end kept, and how often the target's first exporter did
    not do and the second ran (issue 26: "say how often it was needed")."""
    lines = ["The front end's exports (each target's own exporter order), and the time from module to "
             "artifact: a cell's seconds, export, proof, build and verification together (a cell that "
             "found its export made by another target of the same export policy did not export again):",
             "", "| target | models exported | kept dynamo | kept torchscript | second exporter needed | "
             "the first's failures | s per model: median / p90 / max | median s, one exporter / two |",
             "|---|---|---|---|---|---|---|---|"]
    for target in targets:
        exported = [(c, c.details.get("export") or {}) for c in cells if c.target == target]
        exported = [(c, r) for c, r in exported if r.get("attempts")]
        records = [r for _, r in exported]
        kept = Counter(str(r.get("chosen")) for r in records)
        second = [r for r in records if len(r["attempts"]) > 1]
        why = Counter(str(r["attempts"][0].get("failure") or r["attempts"][0].get("outcome")).split(":")[0]
                      for r in second)
        seconds = sorted(float(c.seconds or 0) for c, _ in exported)
        one = [float(c.seconds or 0) for c, r in exported if len(r["attempts"]) == 1]
        two = [float(c.seconds or 0) for c, r in exported if len(r["attempts"]) > 1]
        summary[target]["second_exporter_needed"] = len(second)
        summary[target]["seconds"] = {"median": _quantile(seconds, 0.5), "p90": _quantile(seconds, 0.9),
                                      "max": seconds[-1] if seconds else None}
        lines.append(f"| {target} | {len(records)} | {kept['dynamo']} | {kept['torchscript']} | "
                     f"{len(second)} ({len(second) / (len(records) or 1):.1%}) | "
                     + ", ".join(f"{k} {v}" for k, v in why.most_common()) + " | "
                     f"{_quantile(seconds, 0.5):.0f} / {_quantile(seconds, 0.9):.0f} / "
                     f"{(seconds or [0])[-1]:.0f} | {_quantile(sorted(one), 0.5):.0f} / "
                     f"{_quantile(sorted(two), 0.5):.0f} |")
    return [*lines, ""]


def _quantile(ordered: list[float], q: float) -> float:
    """The value at quantile `q` of an ascending list (nearest rank; 0 for none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def tables(report: Any, about: dict[str, dict], kind: str) -> tuple[str, dict]:
    counted = [c for c in report.cells if about.get(stem(c.model), {}).get("runs", True) and torch_runs(c)]
    unmade = sorted({(stem(c.model), c.message[:160]) for c in report.cells if not torch_runs(c)})
    goals = GOALS[kind]
    rows = [
        "| target | models | legal as exported | after deploycc | goal | after, host segments counted | "
        "regressed | failure classes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, Any] = {}
    for target in report.targets:
        cells = [c for c in counted if c.target == target]
        total = len(cells) or 1
        exported = sum(1 for c in cells if c.legal_as_exported)
        done = sum(1 for c in cells if c.status in DONE)
        hosted = sum(1 for c in cells if c.status == HOST_SEGMENTS)
        regressed = sum(1 for c in cells if c.regressed)
        classes = Counter(str(c.category) for c in cells if c.status == "failed")
        summary[target] = {
            "models": len(cells),
            "legal_as_exported": exported,
            "after_deploycc": done,
            "rate": round(done / total, 4),
            "goal": goals.get(target),
            "regressed": regressed,
            "with_host_segments": hosted,
            "classes": dict(classes),
        }
        rows.append(
            f"| {target} | {len(cells)} | {exported} ({exported / total:.0%}) | **{done} "
            f"({done / total:.1%})** | {goals.get(target, 0):.1%} | {done + hosted} | {regressed} | "
            + ", ".join(f"{k} {v}" for k, v in classes.most_common())
            + " |"
        )
    lines = [*rows, ""]
    refused = sorted({stem(c.model) for c in report.cells
                      if not about.get(stem(c.model), {}).get("runs", True)})
    if refused:
        outcome = {name: Counter(str(c.category if c.status == "failed" else c.status)
                                 for c in report.cells if stem(c.model) == name)
                   for name in refused}
        lines += ["Not counted, ONNX Runtime refuses them as exported (what deploycc made of them, cells "
                  "per outcome): " + "; ".join(
                      f"{name} ({', '.join(f'{k} {v}' for k, v in outcome[name].most_common())})"
                      for name in refused), ""]
    if unmade:
        lines += ["Not counted, torch itself does not build or run them: "
                  + "; ".join(f"{name} ({why.replace('|', '/')})" for name, why in unmade), ""]
    for axis in ("family", "exporter"):
        groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for cell in counted:
            groups[about.get(stem(cell.model), {}).get(axis, "?")][cell.target].append(cell)
        if len(groups) < 2 and axis == "exporter":
            continue
        lines += [
            f"By {axis} (after deploycc / models):",
            "",
            f"| {axis} | " + " | ".join(report.targets) + " |",
            "|---|" + "---|" * len(report.targets),
        ]
        for group, per_target in sorted(groups.items()):
            cells_text = []
            for target in report.targets:
                cells = per_target.get(target, [])
                done = sum(1 for c in cells if c.status in DONE)
                cells_text.append(f"{done}/{len(cells)}" if cells else "")
            lines.append(f"| {group} | " + " | ".join(cells_text) + " |")
        lines.append("")
    if kind == "torch":
        lines += export_table(counted, report.targets, summary)
    failures = [c for c in counted if c.status in ("failed", HOST_SEGMENTS)]
    lines += [
        "Every cell that did not deploy whole, with its class and cause:",
        "",
        "| model | target | class | stage | cause |",
        "|---|---|---|---|---|",
    ]
    for cell in sorted(failures, key=lambda c: (not c.regressed, c.target, stem(c.model))):
        cause = cell.message.replace("|", "/").replace("\n", " ")[:220]
        flag = " **regressed**" if cell.regressed else ""
        lines.append(
            f"| {stem(cell.model)} | {cell.target} | {cell.category}{flag} | {cell.stage} | {cause} |"
        )
    return "\n".join(lines), summary


def kept_from_earlier(path: Path, about: dict[str, dict], cells: list[Any]) -> list[Any]:
    """The cells of an earlier results file for the (entry, target) pairs this run's `cells` have
    not, marked cached: measured then, by the code of then; their entries are added to `about`. A
    results file without its entries (before they were written there) cannot say which models ORT
    runs."""
    from deploycc.records.audit import CellResult

    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    if "entries" not in earlier:
        sys.exit(f"{path} does not list its entries (family, exporter, whether ORT runs each): "
                 "it cannot be kept")
    ran_now = {(stem(cell.model), cell.target) for cell in cells}
    path_now = {stem(cell.model): cell.model for cell in cells}  # one entry per model, not per machine
    kept = []
    for row in earlier["cells"]:
        name = stem(row["model"])
        if (name, row["target"]) not in ran_now:
            about.setdefault(name, earlier["entries"][name])
            kept.append(CellResult(**{**row, "model": path_now.get(name, row["model"]), "cached": True}))
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kind", choices=["onnx", "torch"], default="onnx")
    parser.add_argument("--models", type=Path, default=HERE / "models")
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--family", default="", help="comma-separated: timm, transformers, torchvision")
    parser.add_argument("--limit", type=int, default=0, help="the first N models of each family")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--keep-earlier", action="store_true",
                        help="keep the cells of the results file this run rewrites for the entries it "
                        "does not run (an earlier run's, on a machine whose model files are gone), "
                        "each as measured then; the tables cover both")
    parser.add_argument("--stored-only", action="store_true",
                        help="run nothing: tables of the models whose every target's cell is stored "
                        "(what an audit still running has so far)")
    args = parser.parse_args()
    if args.kind == "onnx" and not (args.models / "manifest.json").exists():
        sys.exit(f"{args.models / 'manifest.json'} not found: make the zoo first (benchmarks/zoo/make.py)")
    families = {f for f in args.family.split(",") if f}
    entries, about = zoo_entries(args.models, args.kind, families, args.limit)
    listing = HERE / f"audit-{args.kind}.txt"
    listing.write_text("".join(f"{entry}\n" for entry in entries))
    from deploycc.report.progress import progress_bar

    options = AuditOptions(
        jobs=args.jobs, timeout=args.timeout, fresh=args.fresh, memory_limit_mb=MEMORY_LIMIT_MB,
        partition=True,
        reports_only=True,  # every target's engine of 300 models fills a disk (45 GB for 72 models)
        stored_only=args.stored_only,
    )
    with progress_bar(f"auditing the zoo ({args.kind})") as update:

        def progress(counts: Counter[str], total: int) -> None:
            update(
                ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "starting",
                sum(counts.values()),
                total,
            )

        def finished(cell: Any, done: int, total: int) -> None:
            update.line(
                f"[{done}/{total}] {stem(cell.model)} @ {cell.target}: {cell.status}"
                f"{f' ({cell.category})' if cell.category else ''}, {cell.seconds:.1f} s"
            )

        report = api.audit(
            [str(listing)],
            list(args.targets or TARGETS),
            HERE / f"audit-{args.kind}",
            options,
            progress=progress,
            finished=finished,
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    earlier = (kept_from_earlier(results / f"{args.kind}.json", about, report.cells)
               if args.keep_earlier else [])
    if earlier:
        report.cells = [*report.cells, *earlier]
        report.models = sorted({cell.model for cell in report.cells})
        present = set(report.targets) | {c.target for c in earlier}
        report.targets = [*[t for t in TARGETS if t in present], *sorted(present - set(TARGETS))]
    text, summary = tables(report, about, args.kind)
    seconds = sum(c.seconds for c in report.cells if not c.cached)
    (results / f"{args.kind}.json").write_text(
        json.dumps(
            {
                "summary": summary,
                "cells": [c.__dict__ for c in report.cells],
                "entries": about,
                "seconds_run": round(seconds, 1),
                "kept_from_earlier": len(earlier),
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    what = (
        "the ONNX files `benchmarks/zoo/make.py` exported"
        if args.kind == "onnx"
        else "the zoo's torch models from the module (`benchmarks/zoo/factories.py:NAME`), by the front end"
    )
    entries_count = len({stem(m) for m in report.models})  # a model kept from another machine counts once
    kept_entries = len({stem(c.model) for c in earlier})
    heading = (
        f"## Zoo audit ({args.kind})\n\nMade by `benchmarks/zoo/audit.py --kind {args.kind}` over "
        f"{entries_count} entries: {what}; raw data in `zoo/results/{args.kind}.json`. Stages "
        "check, legalize, build, verify with the hints' static shapes on TensorRT targets (built on the "
        'device: "after deploycc" there is legal and verified on ORT); a model refused whole is tried '
        f"with host segments, counted apart. Each cell in a process of its own, under a "
        f"{MEMORY_LIMIT_MB // 1024} GiB memory limit (on what it adds to the forked zoo process)."
        + (f" {len(earlier)} cells of {kept_entries} entries are kept from an earlier run, as its code "
           "measured them (`--keep-earlier`: the entries and targets this run did not audit)."
           if earlier else "")
        + "\n\n"
    )
    (results / f"{args.kind}.md").write_text(heading + text + "\n")
    from results_page import put_block

    begin, end = f"<!-- zoo-{args.kind}:begin -->", f"<!-- zoo-{args.kind}:end -->"
    put_block(f"{begin}\n{heading}{text}\n{end}", begin, end)
    for target, row in summary.items():
        print(
            f"{target}: {row['after_deploycc']}/{row['models']} ({row['rate']:.1%}), "
            f"regressed {row['regressed']}"
        )


if __name__ == "__main__":
    main()
