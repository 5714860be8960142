"""`deploycc bench`: latency, throughput and memory of a build directory's engine, or of a model
as-is on a target's backend, with the conditions that make the numbers meaningful.

The timed loop is the runner's `run` between two perf_counter calls and nothing else, so bench
adds no measurable overhead to the backend's own call (benchmarks/bench_overhead.py checks it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.bench.latency import LatencyStats, summarize
from deploycc.bench.memory import MemoryReport, RssPeak, Tegrastats, nvml_process_memory
from deploycc.bench.shared_inputs import shared_dims, signature
from deploycc.errors import OptionError
from deploycc.records.bench import Comparison, GenerationBench  # re-exported: bench --compare-to's record
from deploycc.results import Result
from deploycc.taxonomy import BuildStatus, Precision

if TYPE_CHECKING:
    from deploycc.backends.base import Runner
    from deploycc.targets.schema import Target

WINDOW = 10


@dataclass
class BenchOptions:
    warmup: int | None = None  # None: until the latency is stable (CV of a window under cv_bound)
    warmup_cap: int = 300
    warmup_seconds_cap: float = 30.0
    cv_bound: float = 0.05
    iterations: int | None = None  # default 100 unless duration is given
    duration: float | None = None
    batches: list[int] = field(default_factory=list)
    threads: int | None = None
    streams: int = 1
    compare_to: Path | None = None
    seed: int = 0


@dataclass
class Warmup:
    iterations: int
    final_cv: float
    stable: bool
    seconds: float


@dataclass
class BatchResult:
    batch: int
    latency: LatencyStats
    items_per_s: float
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # the shapes timed at this batch


@dataclass
class Throughput:
    streams: int
    seconds: float
    inferences: int
    inferences_per_s: float
    method: str


@dataclass
class Roofline:
    flops: int
    gflops_per_s_at_p50: float | None
    uncounted_ops: dict[str, int]


@dataclass
class Subject:
    """A loaded thing to time: a runner factory, its ONNX signature, and what it is."""

    label: str
    kind: str  # "build" or "model"
    target: Target
    artifact: str
    onnx: Path  # the model whose signature the inputs follow (and whose FLOPs are counted)
    make_runner: Callable[[int | None], Runner]
    versions: dict[str, str]


@dataclass
class BenchReport(Result):
    subject: str
    kind: str
    target: str
    backend: str
    artifact: str
    input_shapes: dict[str, list[int]]
    load_ms: float
    first_inference_ms: float
    warmup: Warmup
    latency: LatencyStats
    batches: list[BatchResult]
    throughput: Throughput | None
    memory: MemoryReport
    roofline: Roofline
    conditions: dict[str, str]
    warnings: list[str]
    comparison: Comparison | None = None
    segments_ms: dict[str, float] = field(default_factory=dict)  # a partitioned build: mean per segment
    generation: GenerationBench | None = None  # a decoder with a KV cache: TTFT and tokens/s


def open_subject(path: Path, target: Target | None) -> Subject:
    """A build directory (its engine) or a model file (as-is on the target's backend)."""
    from deploycc.targets import registry

    if path.is_dir():
        report_file = path / "report.json"
        if not report_file.is_file():
            raise OptionError(f"{path}: not a build directory (no report.json)",
                              hint="bench a model file, or a directory written by `deploycc build`")
        report = json.loads(report_file.read_text())
        if "segments" in report:  # `build --partition`: the chain of segments
            return _chain_subject(path, report, target)
        artifact = report.get("artifact")
        if report.get("status") != BuildStatus.VERIFIED or not artifact:
            raise OptionError(f"{path}: the build is {report.get('status')}; nothing to bench here",
                              hint="a pending TensorRT engine is built and benched on the device")
        built_target = registry.resolve(report["target"])
        if target is not None and target.name != built_target.name:
            raise OptionError(f"{path} was built for {built_target.name}, not {target.name}")
        return _build_subject(path, built_target, artifact, Precision(report["precision"]))
    if target is None:
        target = registry.resolve("ort-cpu")
    return _model_subject(path, target)


def _build_subject(path: Path, target: Target, artifact: dict[str, Any], precision: Precision) -> Subject:
    from deploycc.backends.base import Artifact, BuildRequest
    from deploycc.backends.registry import get_backend

    backend = get_backend(target.backend.kind)
    built = Artifact(kind=artifact["kind"], files=artifact["files"], settings=artifact.get("settings", {}))

    def make(threads: int | None) -> Runner:
        from deploycc.options import BuildOptions

        # loaded with the backend's own options as a build with default flags has them (OpenVINO's
        # model cache)
        request = BuildRequest(model=path / "model.legalized.onnx", outdir=path, target=target,
                               precision=precision, threads=threads,
                               backend_options=backend.backend_options(BuildOptions()))
        return backend.load(built, path, request)

    return Subject(str(path), "build", target, built.kind, path / "model.legalized.onnx", make,
                   backend.environment())


def _chain_subject(path: Path, report: dict[str, Any], target: Target | None) -> Subject:
    from deploycc.backends.registry import get_backend
    from deploycc.runtime import load_built_chain
    from deploycc.targets import registry

    if report.get("status") != BuildStatus.VERIFIED:
        raise OptionError(f"{path}: the partitioned build is {report.get('status')}; nothing to bench here",
                          hint="a pending TensorRT segment is built and benched on the device")
    built_target = registry.resolve(report["target"])
    if target is not None and target.name != built_target.name:
        raise OptionError(f"{path} was built for {built_target.name}, not {target.name}")

    def make(threads: int | None) -> Runner:
        return load_built_chain(path, built_target, Precision(report["precision"]),  # type: ignore[return-value]
                                threads)

    devices = sum(1 for s in report["segments"] if s["placement"] == "device")
    return Subject(str(path), "build", built_target,
                   f"chain of {len(report['segments'])} segments ({devices} on {built_target.name})",
                   path / "model.legalized.onnx", make, get_backend(built_target.backend.kind).environment())


def _model_subject(path: Path, target: Target) -> Subject:
    from deploycc import io
    from deploycc.backends.registry import get_backend

    io.load(path)  # the same checks as every command: a bad file is a one-line error
    backend = get_backend(target.backend.kind)
    reason = backend.unavailable_reason()
    if reason is not None:
        raise OptionError(f"cannot bench on {target.name} here: {reason}")
    kind = target.backend.kind

    def make(threads: int | None) -> Runner:
        if backend.runners.raw is None:
            raise OptionError(f"benching a raw model on {kind} is not supported; build it first")
        return backend.runners.raw(path, target, threads)

    return Subject(str(path), "model", target, f"{kind} (model as-is)", path, make, backend.environment())


def bench_feeds(onnx: Path, batch: int | None, seed: int,
                fixed: dict[str, list[int | None]] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs following the model's signature; `batch` sets a dynamic dim 0, and `fixed`
    the sizes another subject needs (None where it leaves the dim free)."""
    from deploycc.verify.inputs import generate

    values = signature(onnx)
    feeds = generate(values, seed=seed, batch=batch)
    summed = _summed(onnx, feeds)
    if summed is not None:  # a decoder's mask spans its cache and its new tokens: drawn apart, they disagree
        feeds = generate(values, seed=seed, batch=batch, shapes=summed)
    if not fixed:
        return feeds
    # Free dims keep the size drawn for them; generate() then redraws at the merged shapes.
    shapes = {name: [int(got) if want is None else want
                     for want, got in zip(fixed[name], array.shape, strict=True)]
              for name, array in feeds.items() if name in fixed}
    if all(list(feeds[name].shape) == dims for name, dims in shapes.items()):
        return feeds
    return generate(values, seed=seed, batch=batch, shapes=shapes)


def _summed(onnx: Path, feeds: dict[str, np.ndarray]) -> dict[str, list[int]] | None:
    """The feeds' shapes with each dim that is the sum of others set to that sum (graph/dim_roles.py);
    None where the model has no such dim."""
    from deploycc import io
    from deploycc.graph.dim_roles import summed_dims, with_sums

    sums = summed_dims(io.peek(onnx).model.graph)
    return with_sums(shapes_of(feeds), sums) if sums else None


def shapes_of(feeds: dict[str, np.ndarray]) -> dict[str, list[int]]:
    return {name: list(array.shape) for name, array in feeds.items()}


def warm_up(runner: Runner, feeds: dict[str, np.ndarray], options: BenchOptions) -> Warmup:
    """A fixed count, or windows of runs until the window's coefficient of variation is small."""
    started = time.perf_counter()
    if options.warmup is not None:
        for _ in range(options.warmup):
            runner.run(feeds)
        return Warmup(options.warmup, float("nan"), True, round(time.perf_counter() - started, 3))
    done, cv = 0, float("inf")
    while done < options.warmup_cap and time.perf_counter() - started < options.warmup_seconds_cap:
        window = np.empty(WINDOW)
        for i in range(WINDOW):
            tick = time.perf_counter()
            runner.run(feeds)
            window[i] = time.perf_counter() - tick
        done += WINDOW
        cv = float(window.std() / window.mean()) if window.mean() > 0 else 0.0
        if cv < options.cv_bound:
            break
    return Warmup(done, round(cv, 4), cv < options.cv_bound, round(time.perf_counter() - started, 3))


def timed(runner: Runner, feeds: dict[str, np.ndarray], options: BenchOptions,
          progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Seconds per run: `iterations` runs, or as many as fit in `duration`."""
    samples: list[float] = []
    total = options.iterations or (100 if options.duration is None else 0)
    deadline = None if options.duration is None else time.perf_counter() + options.duration
    clock = time.perf_counter
    while (deadline is None and len(samples) < total) or (deadline is not None and clock() < deadline):
        tick = clock()
        runner.run(feeds)
        samples.append(clock() - tick)
        if progress is not None and len(samples) % 10 == 0:
            progress(len(samples), total)
    return np.asarray(samples)


def throughput(subject: Subject, feeds: dict[str, np.ndarray], streams: int, seconds: float,
               threads: int | None) -> Throughput:
    """`streams` runners, each in its own thread (the backends release the GIL while computing)."""
    runners = [subject.make_runner(threads) for _ in range(streams)]
    counts = [0] * streams
    stop = threading.Event()

    def work(index: int) -> None:
        while not stop.is_set():
            runners[index].run(feeds)
            counts[index] += 1

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(streams)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    for runner in runners:
        runner.close()
    return Throughput(streams, round(elapsed, 3), sum(counts), round(sum(counts) / elapsed, 2),
                      f"{streams} runner(s) in parallel threads")


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, samples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of median(a) / median(b)."""
    rng = np.random.default_rng(seed)
    ratios = np.empty(samples)
    for i in range(samples):
        ratios[i] = np.median(rng.choice(a, a.size)) / np.median(rng.choice(b, b.size))
    low, high = np.percentile(ratios, [2.5, 97.5])
    return round(float(low), 4), round(float(high), 4)


# Before an engine's turn after the other's in an interleaved timing, the other engine's idle
# threads are given this long to park: ONNX Runtime's and OpenVINO's workers spin after a run, and
# the next engine's runs paid for it. A RoBERTa export's ORT artifact, 12 ms alone, timed 16.6-20.9
# ms after OpenVINO's turns with no pause or 2-5 ms, 13.1 ms with 20 ms (OpenVINO itself 19-22 ms,
# then 13.3 ms); two identical ORT sessions' ratio came out 0.74 once without it.
IDLE_PAUSE_S = 0.02


def interleaved(a: Runner, b: Runner, feeds: dict[str, np.ndarray], pairs: int,
                pause: float = IDLE_PAUSE_S) -> tuple[np.ndarray, np.ndarray]:
    """A B B A ... so drift (thermal, frequency, noise) hits both alike; each turn starts with an
    untimed run, and a turn after the other engine's with a pause of `pause` seconds. ONNX Runtime's
    idle threads spin for a while after a run, and the other engine's first run after it paid for
    that: two identical sessions of a Whisper encoder timed 54 and 48 ms (95% CI of the ratio
    0.63-1.73) one run a turn, 25 and 25 ms (0.97-1.07) with the untimed run, as one session alone
    does."""
    first, second = np.empty(pairs), np.empty(pairs)
    clock = time.perf_counter
    previous: Runner | None = None
    for i in range(pairs):
        order = ((a, first), (b, second)) if i % 2 == 0 else ((b, second), (a, first))
        for runner, sink in order:
            if runner is not previous:
                time.sleep(pause)
            previous = runner
            runner.run(feeds)
            tick = clock()
            runner.run(feeds)
            sink[i] = clock() - tick
    return first, second


def compare(a: Runner, b: Runner, feeds: dict[str, np.ndarray], pairs: int, other: str) -> Comparison:
    """`a` against `b`, interleaved (`interleaved`), as the ratio of medians with its 95% interval."""
    first, second = interleaved(a, b, feeds, pairs)
    return comparison_of(first, second, other, "ABBA interleaved", feeds)


def comparison_of(first: np.ndarray, second: np.ndarray, other: str, order: str, feeds: dict[str, np.ndarray],
                  ci95: tuple[float, float] | None = None) -> Comparison:
    """The record of two engines' interleaved times (`ci95`: the interval already taken of them)."""
    return Comparison(other=other, order=order, pairs=len(first),
                      median_ms=round(float(np.median(first)) * 1e3, 4),
                      other_median_ms=round(float(np.median(second)) * 1e3, 4),
                      ratio_of_medians=round(float(np.median(first) / np.median(second)), 4),
                      ci95=ci95 or bootstrap_ratio(first, second), bootstrap_samples=2000,
                      input_shapes=shapes_of(feeds))


def bench(path: str | Path, target: Target | None = None, options: BenchOptions | None = None, *,
          progress: Callable[[str, int, int], None] | None = None) -> BenchReport:
    from deploycc.bench.conditions import conditions

    options = options or BenchOptions()
    if options.streams < 1 or (options.iterations is not None and options.iterations < 1):
        raise OptionError("--streams and --iterations must be at least 1")
    subject, other, feeds = _open_subjects(Path(path), target, options)
    with RssPeak() as rss, Tegrastats() as tegra:
        runner = subject.make_runner(options.threads)
        try:
            tick = time.perf_counter()
            runner.run(feeds)
            first_ms = (time.perf_counter() - tick) * 1e3
            if progress:
                progress("warm-up", 0, 0)
            warm = warm_up(runner, feeds, options)
            samples = timed(runner, feeds, options, _stage_progress(progress, "timing"))
            latency = summarize(samples, warm.iterations, runner.load_seconds, first_ms / 1e3)
            segments_ms = runner.breakdown_ms(last=samples.size)
            device_memory, device_note = nvml_process_memory()
            batches = _batch_sweep(runner, subject.onnx, options, progress)
            generation = _generation(runner, subject.onnx, feeds, progress)
            comparison = None
            if other is not None:
                comparison = _compare_with(runner, other, feeds, options,
                                           warmup=max(5, warm.iterations // 2), pairs=max(samples.size, 20))
        finally:
            runner.close()
    memory = _memory(rss.report, tegra, device_memory, device_note)
    stream_result = None
    if options.streams > 1:
        if progress:
            progress(f"{options.streams} streams", 0, 0)
        stream_result = throughput(subject, feeds, options.streams, options.duration or 5.0, options.threads)
    roofline = _roofline(subject.onnx, feeds, latency)
    facts, warnings = conditions(options.threads, subject.versions)
    if not warm.stable:
        warnings.append(f"latency did not settle during warm-up (last CV {warm.final_cv:.1%} after "
                        f"{warm.iterations} runs)")
    return BenchReport(
        subject=subject.label, kind=subject.kind, target=subject.target.name,
        backend=subject.target.backend.kind, artifact=subject.artifact,
        input_shapes=shapes_of(feeds), load_ms=latency.load_ms,
        first_inference_ms=latency.first_inference_ms, warmup=warm, latency=latency, batches=batches,
        throughput=stream_result, memory=memory, roofline=roofline, conditions=facts, warnings=warnings,
        comparison=comparison, segments_ms=segments_ms, generation=generation)


def _generation(runner: Runner, onnx: Path, feeds: dict[str, np.ndarray],
                progress: Callable[[str, int, int], None] | None) -> GenerationBench | None:
    """A decoder with a KV cache: time to first token and decode tokens/s (bench/generative.py)."""
    from deploycc import io
    from deploycc.bench.generative import time_generation
    from deploycc.graph.decoder import decoder_signature

    decoder = decoder_signature(io.peek(onnx).model.graph)
    if decoder is None:
        return None
    if progress:
        progress("generation", 0, 0)
    return time_generation(runner.run, decoder, feeds)


def _open_subjects(path: Path, target: Target | None, options: BenchOptions,
                   ) -> tuple[Subject, Subject | None, dict[str, np.ndarray]]:
    """The subject, the one `--compare-to` names (if any), and the inputs every timing runs on."""
    subject = open_subject(path, target)
    other: Subject | None = None
    fixed: dict[str, list[int | None]] | None = None
    if options.compare_to is not None:  # opened first: every timing runs on inputs both accept
        other = open_subject(options.compare_to, subject.target if options.compare_to.is_file() else None)
        fixed = shared_dims(signature(subject.onnx), signature(other.onnx), subject.label, other.label)
    return subject, other, bench_feeds(subject.onnx, None, options.seed, fixed)


def _stage_progress(progress: Callable[[str, int, int], None] | None,
                    stage: str) -> Callable[[int, int], None]:
    """A timing loop's progress, reported as `stage` of the bench's."""
    return lambda done, total: progress(stage, done, total) if progress else None


def _batch_sweep(runner: Runner, onnx: Path, options: BenchOptions,
                 progress: Callable[[str, int, int], None] | None) -> list[BatchResult]:
    """`--batch`: the runner timed again at each batch size."""
    batches = []
    for batch in options.batches:
        batch_feeds = bench_feeds(onnx, batch, options.seed)
        warm_up(runner, batch_feeds, BenchOptions(warmup=3))
        stats = summarize(timed(runner, batch_feeds, options, _stage_progress(progress, f"batch {batch}")),
                          3, 0.0, 0.0)
        batches.append(BatchResult(batch, stats, round(batch * 1e3 / stats.mean_ms, 2),
                                   shapes_of(batch_feeds)))
    return batches


def _compare_with(runner: Runner, other: Subject, feeds: dict[str, np.ndarray], options: BenchOptions,
                  warmup: int, pairs: int) -> Comparison:
    """`--compare-to`: the other subject warmed up, then both timed interleaved."""
    other_runner = other.make_runner(options.threads)
    try:
        warm_up(other_runner, feeds, BenchOptions(warmup=warmup))
        return compare(runner, other_runner, feeds, pairs, other.label)
    finally:
        other_runner.close()


def _memory(memory: MemoryReport, tegra: Tegrastats, device_memory: int | None,
            device_note: str) -> MemoryReport:
    """The peak RSS with the device's memory: tegrastats' on a Jetson (its RAM is the GPU's), else
    NVML's for this process, else why neither could be read."""
    memory.device_memory_bytes, memory.device_memory_method = device_memory, device_note
    if device_memory is None:
        memory.device_memory_unavailable, memory.device_memory_method = device_note, ""
    if tegra.available:
        memory.device_memory_bytes = tegra.peak_memory
        memory.device_memory_method, memory.device_memory_unavailable = "tegrastats RAM (unified)", None
        memory.power_mw = tegra.peak_power
    return memory


def _roofline(onnx: Path, feeds: dict[str, np.ndarray], latency: LatencyStats) -> Roofline:
    """The FLOPs of one inference on `feeds`, and the rate the median latency achieves."""
    from deploycc.bench import flops

    counted = flops.count_for_inputs(onnx, feeds)
    achieved = round(counted.total / (latency.p50_ms * 1e6), 3) if latency.p50_ms else None
    return Roofline(counted.total, achieved, counted.uncounted)
