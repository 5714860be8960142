"""The benchmark suite, in one command (`make benchmarks`, or this script in .venv-bench):

1. Latency against the peers, per model (benchmarks/models.py), in one process and interleaved
   in rounds so drift hits every variant alike; ratios of medians to the raw model on ORT:
     raw ORT (defaults) | onnxsim -> ORT | onnxslim -> ORT | deploycc ort-cpu artifact |
     OpenVINO convert_model defaults | deploycc openvino-cpu artifact
   Every variant's output is also compared with the raw model's (max abs error).
2. bench overhead: `deploycc bench`'s timed loop vs a bare `session.run` loop on one session.
3. The pipeline's own cost (legalize_vs_peers.py) on these models and the stress graphs.

Writes benchmarks/results/<date>-<host>.json and benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("raw ORT", "onnxsim ORT", "onnxslim ORT", "deploycc ort-cpu", "OpenVINO defaults",
            "deploycc openvino-cpu", "deploycc openvino-cpu bf16")
SIMPLIFY = r"""
import sys, onnx
tool, source, output = sys.argv[1:4]
if tool == "onnxsim":
    import onnxsim
    model, ok = onnxsim.simplify(onnx.load(source))
    onnx.save(model, output)
else:
    import onnxslim
    onnxslim.slim(source, output)
"""


def _peer(tool: str, source: Path, output: Path) -> str | None:
    child = subprocess.run([sys.executable, "-c", SIMPLIFY, tool, str(source), str(output)],
                           capture_output=True, text=True, timeout=1800)
    if child.returncode != 0:
        return (child.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return None


def runners_for(name: str, raw: Path, work: Path) -> tuple[dict[str, object], dict[str, str]]:
    from deploycc import api
    from deploycc.backends.onnxruntime import OrtRunner
    from deploycc.backends.openvino import OpenVinoRunner
    from deploycc.options import BuildOptions

    problems: dict[str, str] = {}
    runners: dict[str, object] = {"raw ORT": OrtRunner(raw, ["CPUExecutionProvider"])}
    for tool in ("onnxsim", "onnxslim"):
        output = work / f"{name}.{tool}.onnx"
        problem = _peer(tool, raw, output)
        if problem:
            problems[f"{tool} ORT"] = problem
        else:
            runners[f"{tool} ORT"] = OrtRunner(output, ["CPUExecutionProvider"])
    # the precisions are pinned here (fp32, bf16); benchmarks/precision_auto.py times the default's choice
    ort_build = api.build(raw, "ort-cpu", work / f"{name}.ort-cpu",
                          BuildOptions(bench=False, force=True, choose_precision=False))
    if ort_build.status == "verified":
        runners["deploycc ort-cpu"] = OrtRunner(work / f"{name}.ort-cpu" / "model.ort.onnx",
                                                ["CPUExecutionProvider"])
    else:
        problems["deploycc ort-cpu"] = ort_build.summary
    runners["OpenVINO defaults"] = OpenVinoRunner(raw, "CPU", {})
    for variant, precision in (("deploycc openvino-cpu", "fp32"), ("deploycc openvino-cpu bf16", "bf16")):
        out = work / f"{name}.openvino-cpu.{precision}"
        options = BuildOptions(bench=False, force=True, precision=precision)
        ov_build = api.build(raw, "openvino-cpu", out, options)
        if ov_build.status == "verified" and ov_build.artifact is not None:
            config = dict(ov_build.artifact.settings["compile"])
            runners[variant] = OpenVinoRunner(out / "model.xml", "CPU", config)
        else:
            problems[variant] = ov_build.summary
    return runners, problems


def interleaved(runners: dict[str, object], feeds: dict[str, np.ndarray], rounds: int, per_round: int
                ) -> dict[str, np.ndarray]:
    for runner in runners.values():
        for _ in range(5):
            runner.run(feeds)  # type: ignore[attr-defined]
    samples: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for round_index in range(rounds):
        for name in (order if round_index % 2 == 0 else order[::-1]):
            runner = runners[name]
            for _ in range(per_round):
                tick = time.perf_counter()
                runner.run(feeds)  # type: ignore[attr-defined]
                samples[name].append(time.perf_counter() - tick)
    return {name: np.asarray(values) for name, values in samples.items()}


def latency_table(models: dict[str, Path], work: Path, budget_s: float) -> dict:
    from deploycc.bench.run import bench_feeds, bootstrap_ratio

    results = {}
    for name, raw in models.items():
        print(f"[latency] {name}", flush=True)
        runners, problems = runners_for(name, raw, work)
        batch = 32 if name == "mlp" else 1
        feeds = bench_feeds(raw, batch, seed=0)
        reference = runners["raw ORT"].run(feeds)  # type: ignore[attr-defined]
        errors = {}
        for variant, runner in runners.items():
            outputs = runner.run(feeds)  # type: ignore[attr-defined]
            expected, actual = next(iter(reference.values())), next(iter(outputs.values()))
            errors[variant] = float(np.max(np.abs(actual.astype(np.float64) - expected)))
        tick = time.perf_counter()
        runners["raw ORT"].run(feeds)  # type: ignore[attr-defined]
        one = max(time.perf_counter() - tick, 1e-4)
        per_round = max(1, min(20, int(budget_s / (len(runners) * one * 10))))
        samples = interleaved(runners, feeds, rounds=10, per_round=per_round)
        raw_samples = samples["raw ORT"]
        rows = {}
        for variant in VARIANTS:
            if variant not in samples:
                rows[variant] = {"error": problems.get(variant, "not run")}
                continue
            values = samples[variant]
            low, high = bootstrap_ratio(values, raw_samples, samples=1000)
            rows[variant] = {"median_ms": round(float(np.median(values)) * 1e3, 4),
                             "p90_ms": round(float(np.percentile(values, 90)) * 1e3, 4),
                             "ratio_to_raw": round(float(np.median(values) / np.median(raw_samples)), 4),
                             "ci95": [low, high], "runs": int(values.size),
                             "max_abs_error_vs_raw": errors[variant]}
        results[name] = {"batch": batch, "variants": rows}
        for runner in runners.values():
            runner.close()  # type: ignore[attr-defined]
    return results


def bench_overhead(model: Path, runs: int = 400) -> dict:
    """deploycc bench's timed loop vs a bare session.run loop on the same session, interleaved."""
    from deploycc.backends.onnxruntime import OrtRunner
    from deploycc.bench.run import BenchOptions, bench_feeds, timed

    runner = OrtRunner(model, ["CPUExecutionProvider"])
    feeds = bench_feeds(model, 32, seed=0)
    names = [o.name for o in runner.session.get_outputs()]
    bare, ours = [], []
    for _ in range(20):
        runner.session.run(names, feeds)
    for block in range(runs // 20):
        for kind in (("bare", "ours") if block % 2 == 0 else ("ours", "bare")):
            if kind == "bare":
                for _ in range(20):
                    tick = time.perf_counter()
                    runner.session.run(names, feeds)
                    bare.append(time.perf_counter() - tick)
            else:
                ours.extend(timed(runner, feeds, BenchOptions(iterations=20)).tolist())
    ratio = float(np.median(ours) / np.median(bare))
    return {"model": model.name, "runs_each": len(bare),
            "bare_median_ms": round(float(np.median(bare)) * 1e3, 4),
            "bench_median_ms": round(float(np.median(ours)) * 1e3, 4), "ratio": round(ratio, 4),
            "within_3_percent": abs(ratio - 1) <= 0.03}


def pipeline_cost(models: dict[str, Path], work: Path, skip_huge: bool) -> dict:
    import legalize_vs_peers as peers

    sources = dict(models)
    sources["chain-15000"] = peers.chain_15000(work)
    sources["mlp-1500-external"] = peers.mlp_1500(work)
    if not skip_huge:
        sources["huge-2300mb"] = peers.huge_2300mb(work)
    results = {}
    for name, source in sources.items():
        print(f"[pipeline] {name}", flush=True)
        results[name] = {tool: peers.run_tool(tool, source, work) for tool in peers.TOOLS}
    return results


WHY = """Reading the table. On this CPU (AMX and AVX512-BF16), OpenVINO's defaults compute in bfloat16
(`INFERENCE_PRECISION_HINT` defaults to bf16 there): that is why "OpenVINO defaults" is fastest, and
why its errors against the raw model are the largest (see below). deploycc's `openvino-cpu` target
keeps fp32 unless asked, and verifies against fp32 tolerances; with `--precision bf16` it compiles
as the defaults do and is verified with bf16 tolerances (`deploycc openvino-cpu bf16`). On ONNX
Runtime, deploycc's artifact is ORT's own optimized model (level `extended`, portable), loaded
with ORT's default session options like the raw model; differences of a few percent either way
are within the run-to-run noise of this 2-core VM (the brackets)."""


def markdown(results: dict) -> str:
    lines = [f"# Benchmark results ({results['date']}, {results['host']['cpu']}, "
             f"{results['host']['cpu_count']} cores)", "",
             "Made by `make benchmarks` (benchmarks/run_suite.py); raw data in "
             f"`benchmarks/results/{results['file']}`.", "",
             "## Latency against the peers", "",
             "Median latency in ms and ratio to the raw model on ONNX Runtime (below 1.00 is faster), "
             "interleaved in rounds in one process; 95% bootstrap interval of the ratio in brackets.", ""]
    header = "| model | " + " | ".join(VARIANTS) + " |"
    lines += [header, "|---" * (len(VARIANTS) + 1) + "|"]
    for name, data in results["latency"].items():
        cells: list[str] = []
        for variant in VARIANTS:
            row = data["variants"][variant]
            if "error" in row:
                cells.append(f"failed: {row['error'][:60]}")
            else:
                low, high = row["ci95"]
                cells.append(f"{row['median_ms']:.2f} ms, {row['ratio_to_raw']:.2f} [{low:.2f}, {high:.2f}]")
        lines.append(f"| {name} (batch {data['batch']}) | " + " | ".join(cells) + " |")
    lines += ["", "Max abs error of each variant against the raw model on the same inputs:", ""]
    lines += [header, "|---" * (len(VARIANTS) + 1) + "|"]
    for name, data in results["latency"].items():
        cells = [f"{data['variants'][v].get('max_abs_error_vs_raw', float('nan')):.1e}" for v in VARIANTS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", WHY, ""]
    overhead = results["bench_overhead"]
    lines += ["", "## bench overhead", "",
              "`deploycc bench`'s timed loop vs a bare `session.run` loop on one ORT session "
              f"({overhead['model']}, "
              f"{overhead['runs_each']} runs each, interleaved): {overhead['bench_median_ms']} ms vs "
              f"{overhead['bare_median_ms']} ms, ratio {overhead['ratio']} "
              f"({'within' if overhead['within_3_percent'] else 'OUTSIDE'} 3%).", "",
              "## The pipeline's own cost (legalize, ort-cpu) against onnxsim and onnxslim", ""]
    import legalize_vs_peers as peers

    lines += peers.markdown({"machine": results["host"]["cpu"], "date": results["date"],
                             "models": results["pipeline"]}).splitlines()[2:]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="subset of resnet mobilenet bert mlp")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timing per model")
    parser.add_argument("--skip-huge", action="store_true")
    args = parser.parse_args()
    from models import export_all

    from deploycc.bench.conditions import conditions

    date = time.strftime("%Y-%m-%d")
    host = socket.gethostname().split(".")[0]
    facts, _ = conditions(None, {})
    results: dict = {"date": date, "host": {"name": host, "platform": platform.platform(), **facts},
                     "file": f"{date}-{host}.json"}
    with tempfile.TemporaryDirectory(prefix="deploycc-suite-") as name:
        work = Path(name)
        models = export_all(work / "models", args.models)
        results["latency"] = latency_table(models, work, args.budget)
        results["bench_overhead"] = bench_overhead(models.get("mlp") or next(iter(models.values())))
        results["pipeline"] = pipeline_cost(models, work, args.skip_huge)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / results["file"]).write_text(json.dumps(results, indent=2) + "\n")
    (HERE / "RESULTS.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
