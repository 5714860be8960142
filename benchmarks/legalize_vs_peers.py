"""The pipeline's own cost: `deploycc legalize` against onnxsim and onnxslim, side by side.

Not run by CI. Run by hand from the repository root (needs `pip install -e '.[bench]'`):

    .venv/bin/python benchmarks/legalize_vs_peers.py [--out benchmarks/results] [--skip-huge]

Models are generated here (no downloads):
  mlp-1500     1,500 nodes, ~490 MB of float32 weights in external data, 300 redundant Identity
  chain-15000  15,000 nodes with tiny weights (the graph-size stress case)
  huge-2300mb  5 weights of 460 MB in a sparse external file (> 2 GB; protobuf cannot hold it)

Every tool runs in its own child process; wall time and that child's peak RSS (VmHWM) are
recorded, and ratios are deploycc / peer (lower is better for deploycc). Results go to
<out>/legalize_vs_peers.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHILD = r"""
import json, sys, time
tool, source, output = sys.argv[1:4]
started = time.perf_counter()
error = None
try:
    if tool.startswith("deploycc"):
        from deploycc import api
        from deploycc.options import LegalizeOptions
        report = api.legalize(source, "ort-cpu", output, LegalizeOptions(verify=tool == "deploycc"))
        if not report.success:
            error = report.summary
    elif tool == "onnxsim":
        import onnx, onnxsim
        model, ok = onnxsim.simplify(onnx.load(source))
        onnx.save(model, output, save_as_external_data=True, location="out.data")
    elif tool == "onnxslim":
        import onnxslim
        onnxslim.slim(source, output)
except BaseException as exc:  # the point is to record what each tool does, failures included
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a child would report the
# parent's peak (the benchmark's own model generation) instead of its own.
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
peak = int(status["VmHWM"].split()[0]) * 1024
print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak, "error": error}))
"""

TOOLS = ("deploycc", "deploycc --no-verify", "onnxsim", "onnxslim")


def _save(graph: onnx.GraphProto, path: Path, external: bool) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    if external:
        onnx.save(model, path, save_as_external_data=True, location=path.name + ".data",
                  size_threshold=1024)
    else:
        onnx.save(model, path)


def mlp_1500(folder: Path) -> Path:
    """300 blocks of MatMul -> Add -> Relu -> Identity -> Mul: 1,500 nodes, 492 MB of weights."""
    rng = np.random.default_rng(0)
    width, blocks = 640, 300
    nodes, inits, previous = [], [], "x"
    for i in range(blocks):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"w{i}"),
                  numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"),
                  numpy_helper.from_array(np.ones(1, np.float32), f"s{i}")]
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
                  helper.make_node("Identity", [f"r{i}"], [f"i{i}"]),
                  helper.make_node("Mul", [f"i{i}", f"s{i}"], [f"o{i}"])]
        previous = f"o{i}"
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, width])], inits)
    path = folder / "mlp-1500.onnx"
    _save(graph, path, external=True)
    return path


def chain_15000(folder: Path) -> Path:
    """3,000 blocks of five small ops: 15,000 nodes."""
    rng = np.random.default_rng(1)
    nodes, inits, previous = [], [], "x"
    for i in range(3000):
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) / 3, f"w{i}"))
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Identity", [f"m{i}"], [f"i{i}"]),
                  helper.make_node("Tanh", [f"i{i}"], [f"t{i}"]),
                  helper.make_node("Transpose", [f"t{i}"], [f"p{i}"], perm=[0, 1]),
                  helper.make_node("Relu", [f"p{i}"], [f"r{i}"])]
        previous = f"r{i}"
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 8])], inits)
    path = folder / "chain-15000.onnx"
    _save(graph, path, external=False)
    return path


def huge_2300mb(folder: Path) -> Path:
    """Five 460 MB weights in one sparse external file (zeros; no disk spent): > 2 GB of weights."""
    elements, count = 115_000_000, 5
    data = folder / "huge-2300mb.onnx.data"
    with data.open("wb") as handle:
        handle.truncate(elements * 4 * count)
    nodes, inits = [], []
    for i in range(count):
        tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[elements])
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", data.name), ("offset", str(i * elements * 4)),
                           ("length", str(elements * 4))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
        nodes += [helper.make_node("ReduceSum", [f"w{i}"], [f"s{i}"], keepdims=0),
                  helper.make_node("Identity", [f"s{i}"], [f"y{i}"])]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, []) for i in range(count)]
    graph = helper.make_graph(nodes, "huge", [], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = folder / "huge-2300mb.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def run_tool(tool: str, source: Path, folder: Path) -> dict:
    output = folder / f"{tool.replace(' ', '_')}-{source.stem}.onnx"
    name = "deploycc-no-verify" if tool == "deploycc --no-verify" else tool
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, name, str(source), str(output)],
                               capture_output=True, text=True, timeout=1800)
        line = child.stdout.strip().splitlines()[-1] if child.stdout.strip() else ""
        result = json.loads(line) if line.startswith("{") else {
            "seconds": None, "peak_rss_bytes": None,
            "error": f"exit {child.returncode}: {(child.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
    except subprocess.TimeoutExpired:
        result = {"seconds": None, "peak_rss_bytes": None, "error": "timeout after 1800 s"}
    if output.exists():
        result["nodes_after"] = len(onnx.load(output, load_external_data=False).graph.node)
    for leftover in folder.glob(f"{output.name}*"):
        leftover.unlink()
    for leftover in folder.glob("out.data"):
        leftover.unlink()
    return result


def _ratio(ours: dict, theirs: dict, key: str) -> str:
    if not ours.get(key) or not theirs.get(key):
        return "-"
    return f"{ours[key] / theirs[key]:.2f}"


def markdown(results: dict) -> str:
    """One table: every tool's numbers, then deploycc / peer ratios (with and without verify)."""
    lines = [f"# legalize vs peers ({results['machine']}, {results['date']})", "",
             "Ratios are deploycc / peer: below 1.00 deploycc is faster or smaller. `deploycc` "
             "includes whole-model verification on ONNX Runtime (the peers' own checks are "
             "their defaults); `--no-verify` is the rewrite pipeline alone.", "",
             "| model | tool | wall s | peak RSS MB | nodes after | time ratio | time ratio (no-verify) "
             "| RSS ratio | RSS ratio (no-verify) | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model, rows in results["models"].items():
        ours, bare = rows["deploycc"], rows["deploycc --no-verify"]
        for tool, row in rows.items():
            peer = not tool.startswith("deploycc")
            seconds = f"{row['seconds']:.2f}" if row.get("seconds") is not None else "-"
            rss = f"{row['peak_rss_bytes'] / 2**20:.0f}" if row.get("peak_rss_bytes") else "-"
            ratios = [_ratio(ours, row, "seconds"), _ratio(bare, row, "seconds"),
                      _ratio(ours, row, "peak_rss_bytes"), _ratio(bare, row, "peak_rss_bytes")] \
                if peer else [""] * 4
            lines.append(f"| {model} | {tool} | {seconds} | {rss} | {row.get('nodes_after', '-')} | "
                         f"{' | '.join(ratios)} | {row.get('error') or ''} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--skip-huge", action="store_true", help="skip the > 2 GB model")
    args = parser.parse_args()
    makers = [mlp_1500, chain_15000] + ([] if args.skip_huge else [huge_2300mb])
    results: dict = {"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
                     "date": time.strftime("%Y-%m-%d"), "models": {}}
    with tempfile.TemporaryDirectory(prefix="deploycc-bench-") as name:
        folder = Path(name)
        for make in makers:
            source = make(folder)
            rows = {}
            for tool in TOOLS:
                print(f"{source.stem}: {tool} ...", flush=True)
                rows[tool] = run_tool(tool, source, folder)
                print(f"  {rows[tool]}", flush=True)
            results["models"][source.stem] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "legalize_vs_peers.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "legalize_vs_peers.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
