"""`deploycc bench`: statistics that hold together, options honoured, memory and FLOPs measured
(or "n/a" with a reason), comparisons with a confidence interval. No timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from deploycc import api
from deploycc.bench import flops
from deploycc.bench.memory import parse_tegrastats
from deploycc.bench.run import BenchOptions, Comparison, bootstrap_ratio
from deploycc.bench.shared_inputs import shared_dims
from deploycc.errors import OptionError
from deploycc.options import BuildOptions, LegalizeOptions
from examples.make_models import small_cnn
from tests.cli.test_cli import GOOD, run


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("bench")
    model = folder / "cnn.onnx"
    onnx.save(small_cnn(), model)
    api.build(model, "ort-cpu", folder / "ort", BuildOptions(bench=False))
    return model, folder / "ort"


def test_bench_a_build_directory(built: tuple[Path, Path]) -> None:
    _, out = built
    report = api.bench(out, options=BenchOptions(iterations=40, warmup=3))
    lat = report.latency
    assert report.kind == "build" and report.artifact == "ort-optimized-onnx" and report.target == "ort-cpu"
    assert lat.iterations == 40 and report.warmup.iterations == 3
    assert lat.min_ms <= lat.p50_ms <= lat.p90_ms <= lat.p95_ms <= lat.p99_ms <= lat.max_ms
    assert lat.throughput_per_s > 0 and report.load_ms > 0 and report.first_inference_ms > 0
    memory = report.memory
    assert memory.peak_rss_bytes is not None and memory.baseline_rss_bytes is not None
    assert memory.peak_rss_bytes >= memory.baseline_rss_bytes
    assert memory.device_memory_bytes is None and memory.device_memory_unavailable  # a reason, not a zero
    assert report.roofline.flops > 0 and report.roofline.gflops_per_s_at_p50 > 0
    assert report.conditions["cpu"] and "onnxruntime" in report.conditions


def test_bench_a_model_until_stable_and_for_a_duration(built: tuple[Path, Path]) -> None:
    model, _ = built
    report = api.bench(model, "openvino-cpu", BenchOptions(duration=0.5))
    assert report.kind == "model" and report.backend == "openvino"
    assert report.warmup.iterations >= 10 and report.latency.iterations >= 1
    assert report.warmup.stable or any("did not settle" in w for w in report.warnings)


def test_batch_sweep_and_streams(built: tuple[Path, Path]) -> None:
    model, _ = built
    report = api.bench(model, "ort-cpu", BenchOptions(iterations=10, warmup=2, batches=[1, 4], streams=2,
                                                      duration=None))
    assert [b.batch for b in report.batches] == [1, 4]
    assert [b.input_shapes["image"][0] for b in report.batches] == [1, 4]  # each sweep step says its shape
    assert all(b.items_per_s > 0 for b in report.batches)
    assert report.throughput is not None and report.throughput.streams == 2
    assert report.throughput.inferences > 0


def test_batch_sweep_needs_a_dynamic_batch(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,8] y) { y = Relu(x) }
    """)
    with pytest.raises(OptionError, match="needs a dynamic batch"):
        api.bench(model, "ort-cpu", BenchOptions(iterations=5, warmup=1, batches=[2]))


def test_compare_to_reports_a_ratio_with_its_interval(built: tuple[Path, Path]) -> None:
    model, out = built
    report = api.bench(out, options=BenchOptions(iterations=30, warmup=3, compare_to=model))
    comparison = report.comparison
    assert comparison is not None and comparison.pairs == 30 and comparison.order == "ABBA interleaved"
    low, high = comparison.ci95
    assert low <= comparison.ratio_of_medians <= high


def test_a_comparison_says_which_side_is_faster() -> None:
    def said(ratio: float, low: float, high: float) -> str:
        return Comparison(other="B", order="ABBA interleaved", pairs=30, median_ms=1.0, other_median_ms=1.0,
                          ratio_of_medians=ratio, ci95=(low, high), bootstrap_samples=2000).verdict("A")

    assert said(0.8, 0.75, 0.85).startswith("A is 1.25x faster than B (95% CI 1.18x..1.33x)")
    assert said(1.25, 1.2, 1.3).startswith("B is 1.25x faster than A (95% CI 1.20x..1.30x)")
    assert said(0.99, 0.95, 1.04).startswith("neither is faster at 95% confidence")


def test_bootstrap_interval_brackets_a_known_ratio() -> None:
    rng = np.random.default_rng(0)
    fast = rng.normal(1.0, 0.02, 200)
    low, high = bootstrap_ratio(2 * fast, fast)
    assert low < 2.0 < high and high - low < 0.1


def test_flops_are_counted_from_shapes() -> None:
    model = ir.from_onnx_text("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[1,3,8,8] x, float[4,3,3,3] w, float[2,5] a, float[5,7] b)
          => (float[1,4,6,6] y, float[2,7] m) {
            y = Conv(x, w)
            m = MatMul(a, b)
        }
    """)
    from deploycc.graph.shapes import infer_shapes

    infer_shapes(model)
    counted = flops.count(model)
    assert counted.by_op == {"Conv": 2 * (4 * 6 * 6) * (3 * 3 * 3), "MatMul": 2 * (2 * 7) * 5}
    assert counted.total == sum(counted.by_op.values()) and counted.uncounted == {}


def test_tegrastats_line_is_parsed() -> None:
    line = ("RAM 2345/7764MB (lfb 4x4MB) SWAP 0/3882MB CPU [12%@1190,5%@1190] GR3D_FREQ 0% "
            "VDD_IN 4321mW/4300mW VDD_CPU_GPU_CV 1234mW/1200mW VDD_SOC 999mW/990mW")
    used, rails = parse_tegrastats(line)
    assert used == 2345 << 20
    assert rails == {"VDD_IN": 4321, "VDD_CPU_GPU_CV": 1234, "VDD_SOC": 999}
    # a Nano's JetPack 4 line, whose rails carry no unit: bench read none of them before
    from tests.backends.test_device_logs import NANO_JP4

    used, rails = parse_tegrastats(NANO_JP4)
    assert used == 1923 << 20 and rails == {"POM_5V_IN": 1750, "POM_5V_GPU": 0, "POM_5V_CPU": 366}


def test_a_pending_bundle_is_not_benched(tmp_path: Path, write_model) -> None:
    model = write_model(GOOD)
    api.build(model, "jetson-orin", tmp_path / "b", BuildOptions(legalize=LegalizeOptions(batch=1)))
    with pytest.raises(OptionError, match="pending-on-device"):
        api.bench(tmp_path / "b")


def test_bench_cli_json_and_errors(built: tuple[Path, Path]) -> None:
    _, out = built
    result = run("bench", str(out), "--iterations", "10", "--warmup", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["latency"]["iterations"] == 10 and data["kind"] == "build"
    cases = ((["--batch", "0"], "at least 1"), (["--iterations", "5", "--duration", "1"], "not both"))
    for flags, message in cases:
        bad = run("bench", str(out), *flags)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr


DYNAMIC_BATCH = """
<ir_version: 10, opset_import: ["" : 17]>
g (float[N,8] x) => (float[N,8] y) { y = Relu(x) }
"""


def test_compare_a_dynamic_model_to_its_batch_1_build(tmp_path: Path, write_model) -> None:
    model = write_model(DYNAMIC_BATCH)
    out = tmp_path / "out"
    built = run("build", str(model), "--batch", "1", "-t", "ort-cpu", "-o", str(out))
    assert built.returncode == 0, built.stderr
    # Alone the model is timed at batch 2; against the batch-1 build both run [1, 8], and say so.
    result = run("bench", str(model), "-t", "ort-cpu", "--compare-to", str(out), "--iterations", "5",
                 "--warmup", "1")
    assert result.returncode == 0, result.stderr
    assert "inputs x [1, 8]" in result.stdout and "both on inputs x [1, 8]" in result.stdout
    assert "faster than" in result.stdout or "neither is faster" in result.stdout
    report = api.bench(model, "ort-cpu", BenchOptions(iterations=5, warmup=1, compare_to=out))
    assert report.input_shapes == {"x": [1, 8]} and report.comparison is not None
    assert report.comparison.input_shapes == {"x": [1, 8]}


def test_compare_refuses_two_fixed_sizes_in_one_line(tmp_path: Path, write_model) -> None:
    out = tmp_path / "out"
    api.build(write_model(DYNAMIC_BATCH), "ort-cpu", out,
              BuildOptions(bench=False, legalize=LegalizeOptions(batch=1)))
    fixed_4 = write_model(DYNAMIC_BATCH.replace("N", "4"), name="four.onnx")
    result = run("bench", str(fixed_4), "-t", "ort-cpu", "--compare-to", str(out), "--iterations", "5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "input 'x' has dims [4, 8]" in result.stderr and "and [1, 8] in" in result.stderr


def _inputs(signature: str) -> list[ir.Value]:
    graph = ir.from_onnx_text(f"""
        <ir_version: 10, opset_import: ["" : 17]>
        g ({signature}) => (float total) {{ total = ReduceSum(x) }}
    """).graph
    return list(graph.inputs)


def test_shared_dims_take_the_fixed_size_and_spread_it_by_name() -> None:
    # y's batch is symbolic in both, but 'N' is fixed to 1 through x: it takes 1 too.
    mine = _inputs("float[N,H,8] x, float[N,3] y")
    theirs = _inputs("float[1,B,8] x, float[M,3] y")
    assert shared_dims(mine, theirs, "a", "b") == {"x": [1, None, 8], "y": [1, 3]}
    cases = (("float[N,8] x", "float[N,8] x, float[N,8] z", "takes inputs"),
             ("float[N,8] x", "double[N,8] x", "is FLOAT in a and DOUBLE in b"),
             ("float[N,8] x", "float[N,8,1] x", "has dims ['N', 8] in a and ['N', 8, 1] in b"),
             ("float[N,8] x, float[N,3] y", "float[1,8] x, float[2,3] y",
              "input 'y' has dims ['N', 3] in a and [2, 3] in b (dim 0 would have to be 1 and 2)"))
    for a, b, message in cases:
        with pytest.raises(OptionError, match=re.escape(message)):
            shared_dims(_inputs(a), _inputs(b), "a", "b")


def test_builds_timing_stops_at_its_budget_with_a_floor(built: tuple[Path, Path]) -> None:
    """build's summary times `iterations` runs unless they take longer than its budget: a budget
    of 0 s leaves one warm-up and MIN_TIMED_RUNS timed runs, a long one every run asked for. The
    counts are asserted, never a time."""
    from deploycc.backends.onnxruntime import OrtRunner
    from deploycc.bench.latency import MIN_TIMED_RUNS, measure

    model, _ = built
    runner = OrtRunner(model, ["CPUExecutionProvider"], threads=1)
    graph_input = onnx.load(model).graph.input[0]
    dims = [d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim]
    feeds = {graph_input.name: np.zeros(dims, np.float32)}
    short = measure(runner, feeds, warmup=5, iterations=50, seconds=0.0)
    assert (short.warmup, short.iterations) == (1, MIN_TIMED_RUNS)
    full = measure(runner, feeds, warmup=5, iterations=20, seconds=3600.0)
    assert (full.warmup, full.iterations) == (5, 20)
