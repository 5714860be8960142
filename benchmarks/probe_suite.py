"""The full `deploycc probe` run for ort-cpu and openvino-cpu, written to results/.

    python benchmarks/probe_suite.py                 # both probes, about 5 + 9 minutes on 2 cores
    python benchmarks/probe_suite.py --from-reports  # the summary again, from results/probe-*.json

Writes, per target, the full per-case report (`results/probe-<target>.json`), the probed
capability table (`results/probe-<target>.capabilities.json`, for `check --capabilities`), and
`results/probe-summary.json` + `results/probe.md`: pass counts as exported vs after deploycc,
what legalization gained and lost, and every case still failing with the reason, grouped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGETS = ("ort-cpu", "openvino-cpu")

# Why a case cannot pass on a backend, by what the failure says. First match wins.
CANNOT_PASS = [
    ("random output (Bernoulli, RandomUniformLike, training Dropout)",
     r"bernoulli|training_dropout|randomuniform", "case"),
    ("training-only op (ai.onnx.preview.training)", r"^(Adagrad|Adam|Momentum)$", "op"),
    ("element type the backend lacks (float8 fnuz, int2/uint2, float4, string)",
     r"FNUZ|fnuz|UINT2|INT2|FLOAT4|float4|e8m0|E8M0|string|String|src_prc", "detail_or_case"),
    ("sequence or optional values (no sequence/optional type in the backend)",
     r"[Ss]equence|[Oo]ptional|_seq|_opt|SequenceMark", "detail_or_case"),
    ("string or text op with no kernel", r"^(StringSplit|StringConcat|StringNormalizer|RegexFullMatch|"
     r"TfIdfVectorizer|LabelEncoder|ImageDecoder)$", "op"),
]


def _why(row: dict[str, Any]) -> str:
    for label, pattern, field in CANNOT_PASS:
        detail = row.get("legalized_detail") or row["detail"]
        text = {"case": row["case"], "op": row["op"], "detail_or_case": f"{detail} {row['case']}"}[field]
        if re.search(pattern, text):
            return label
    return f"{row['legalized']}: {row['op']}"


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    rows = report["results"]
    gained = [r["case"] for r in rows if r["raw"] != "pass" and r["legalized"] == "pass"]
    lost = [{"case": r["case"], "why": r.get("legalized_detail") or r["detail"]} for r in rows
            if r["raw"] == "pass" and r["legalized"] != "pass"]
    failing: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["legalized"] != "pass":
            failing[_why(r)].append(r["case"])
    return {
        "cases": report["cases"],
        "pass_as_exported": report["passed_raw"],
        "pass_after_deploycc": report["passed_legalized"],
        "outcomes_as_exported": dict(Counter(r["raw"] for r in rows)),
        "outcomes_after_deploycc": dict(Counter(r["legalized"] for r in rows)),
        "gained_by_legalization": len(gained),
        "gained_ops": dict(Counter(r["op"] for r in rows if r["case"] in set(gained)).most_common()),
        "lost_by_legalization": lost,
        "still_failing_by_reason": {reason: sorted(cases) for reason, cases
                                    in sorted(failing.items(), key=lambda item: -len(item[1]))},
        "disagreements_with_declared_table": report["disagreements"],
        "seconds": report["seconds"],
    }


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# `deploycc probe`: ONNX conformance cases on the real backends", "",
             summary["note"], "",
             "| target | cases | pass as exported | pass after deploycc | gained | lost | disagreements "
             "with the declared table | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for target in TARGETS:
        s = summary[target]
        cells = [target, s["cases"], s["pass_as_exported"], s["pass_after_deploycc"],
                 s["gained_by_legalization"], len(s["lost_by_legalization"]),
                 len(s["disagreements_with_declared_table"]), f"{s['seconds']:.0f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    for target in TARGETS:
        s = summary[target]
        lines += ["", f"## {target}: still failing after deploycc, by reason", "",
                  "| reason | cases |", "|---|---|"]
        for reason, cases in s["still_failing_by_reason"].items():
            lines.append(f"| {reason} | {len(cases)} |")
        gained = ", ".join(f"{op} {count}" for op, count in s["gained_ops"].items())
        lines += ["", f"Gained by legalization, by op: {gained}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-reports", action="store_true", help="summarise results/probe-*.json again")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    import onnx

    from deploycc import api
    from deploycc.audit.probe import capability_table
    from deploycc.report.progress import progress_bar

    summary: dict[str, Any] = {"note": (
        f"onnx {onnx.__version__} conformance cases, each run in isolation, outputs compared with rtol "
        "1e-3 / atol 1e-4; inputs of every element type fed as the backend stores them (bfloat16, "
        "float8 and sub-byte types as raw bits). Made by `python benchmarks/probe_suite.py`.")}
    for target in TARGETS:
        path = RESULTS / f"probe-{target}.json"
        if args.from_reports:
            report = json.loads(path.read_text())
        else:
            with progress_bar(f"probing {target}") as update:
                result = api.probe(target, jobs=args.jobs,
                                   progress=lambda done, total: update("cases", done, total))
            (RESULTS / f"probe-{target}.capabilities.json").write_text(
                json.dumps(capability_table(result), indent=1, sort_keys=True) + "\n")
            report = json.loads(result.to_json())
            path.write_text(json.dumps(report, separators=(",", ":")) + "\n")
        summary[target] = summarise(report)
        print(f"{target}: {summary[target]['pass_as_exported']} -> {summary[target]['pass_after_deploycc']}")
    (RESULTS / "probe-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (RESULTS / "probe.md").write_text(markdown(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
