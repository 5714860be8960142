"""The exporter order of a target, measured on the zoo's torch models: each target audited from the
module with its own order (target data: TorchScript first on TensorRT 8.x, dynamo first elsewhere)
and with the other order first (`audit --exporters`), side by side on the same models.

    .venv-bench/bin/python benchmarks/zoo/exporter_order.py [--limit 10] [--target T ...] [--jobs 2]

The own order's cells are those of `audit.py --kind torch` (audit-torch/, reused where they are
there: the same keys); the other order's go to audit-torch-order/. Per target: models deployed
(legal and verified, or legalized for the device), how often the first exporter failed and the
second was needed, and cell seconds; every model where the two orders end differently. Writes
results/exporter-order.json and the block of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from audit import DONE, stem, torch_entries  # noqa: E402

from deploycc import api  # noqa: E402
from deploycc.records.audit import AuditOptions  # noqa: E402
from deploycc.targets.registry import resolve  # noqa: E402

TARGETS = ("jetson-xavier", "jetson-nano", "jetson-orin")
BEGIN, END = "<!-- exporter-order:begin -->", "<!-- exporter-order:end -->"


def options(jobs: int, timeout: float, exporters: tuple[str, ...] = ()) -> AuditOptions:
    # as audit.py audits the zoo, so that the own order's cells are audit-torch's
    return AuditOptions(
        jobs=jobs,
        timeout=timeout,
        memory_limit_mb=12288,
        partition=True,
        reports_only=True,
        exporters=exporters,
    )


def outcome(cell: Any) -> dict[str, Any]:
    export = cell.details.get("export") or {}
    attempts = export.get("attempts") or []
    return {
        "status": cell.status,
        "category": cell.category,
        "chosen": export.get("chosen"),
        "attempts": len(attempts),
        "seconds": cell.seconds,
        "first_failure": (attempts[0].get("failure") if attempts else None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=10, help="the first N torch models of each family")
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--tables-only", action="store_true", help="from results/exporter-order.json")
    args = parser.parse_args()
    if args.tables_only:
        saved = json.loads((HERE / "results" / "exporter-order.json").read_text())
        render(saved["cells"], saved.get("limit", args.limit))
        return
    entries, _ = torch_entries(HERE / "models", set(), args.limit)
    listing = HERE / "audit-torch-order.txt"
    listing.write_text("".join(f"{entry}\n" for entry in entries))
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for target in args.targets or TARGETS:
        own = tuple(resolve(target).export.exporters)
        other = tuple(reversed(own))
        print(f"{target}: own order {', '.join(own)}; the other {', '.join(other)}", flush=True)
        mine = api.audit([str(listing)], [target], HERE / "audit-torch", options(args.jobs, args.timeout))
        theirs = api.audit(
            [str(listing)], [target], HERE / "audit-torch-order", options(args.jobs, args.timeout, other)
        )
        for cell in mine.cells:
            rows.setdefault(target, {}).setdefault(stem(cell.model), {})["own"] = outcome(cell)
        for cell in theirs.cells:
            rows[target][stem(cell.model)]["other"] = outcome(cell)
    render(rows, args.limit)


def render(rows: dict[str, dict[str, dict[str, Any]]], limit: int) -> None:
    """results/exporter-order.json and the RESULTS.md block, from the cells of both orders."""
    summary, lines = (
        {},
        [
            BEGIN,
            "## Exporter order measured on the zoo (`benchmarks/zoo/exporter_order.py`)",
            "",
            f"The zoo's first {limit} torch models of each family, from the module, audited "
            "on each target with its own exporter order (target data) and with the other order "
            "first (`deploycc audit --exporters`), as `zoo/audit.py` audits them; raw data in "
            "`zoo/results/exporter-order.json`.",
            "",
            "| target | models | own order | deployed | second exporter needed | cell s "
            "| other order | deployed | second exporter needed | cell s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ],
    )
    differ = []
    for target, models in rows.items():
        own = tuple(resolve(target).export.exporters)
        count: Counter[str] = Counter()
        for name, pair in models.items():
            for side in ("own", "other"):
                cell = pair[side]
                count[f"{side} deployed"] += cell["status"] in DONE
                count[f"{side} second"] += cell["attempts"] > 1
                count[f"{side} seconds"] += cell["seconds"]
            # a model whose outcome differs, or where either order's first exporter did not do
            if (pair["own"]["status"] in DONE) != (pair["other"]["status"] in DONE) or max(
                pair["own"]["attempts"], pair["other"]["attempts"]
            ) > 1:
                differ.append((target, name, pair))
        summary[target] = {"models": len(models), **count}
        lines.append(
            f"| {target} | {len(models)} | {', '.join(own)} | **{count['own deployed']}** | "
            f"{count['own second']} | {count['own seconds']:.0f} | {', '.join(reversed(own))} | "
            f"**{count['other deployed']}** | {count['other second']} | {count['other seconds']:.0f} |"
        )
    lines += [
        "",
        "Models whose outcome differs between the orders, or where either order needed its second "
        "exporter:",
        "",
        "| target | model | own order: kept, outcome | other order: kept, outcome "
        "| own order's first failure | other order's first failure |",
        "|---|---|---|---|---|---|",
    ]
    for target, name, pair in differ:
        own, other = pair["own"], pair["other"]
        lines.append(
            f"| {target} | {name} | {own['chosen']}, {own['status']} | {other['chosen']}, "
            f"{other['status']} | {(own['first_failure'] or '-')[:120]} | "
            f"{(other['first_failure'] or '-')[:120]} |"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "exporter-order.json").write_text(
        json.dumps({"summary": summary, "limit": limit, "cells": rows}, indent=1) + "\n"
    )
    from results_page import put_block

    put_block("\n".join([*lines, END]), BEGIN, END)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
