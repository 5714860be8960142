"""Latency of a loaded runner: warm-up, then timed iterations, reported as percentiles.

`build` uses this for its benchmark summary; `deploycc bench` (its own issue) adds stability-
driven warm-up, memory, batch sweeps and comparisons on top.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from deploycc.records.bench import LatencyStats  # re-exported: a record, in records/

if TYPE_CHECKING:
    from deploycc.backends.base import Runner


def summarize(seconds: np.ndarray, warmup: int, load_seconds: float, first_seconds: float) -> LatencyStats:
    """Percentiles and throughput of per-run times (in seconds)."""
    ms = np.asarray(seconds) * 1e3

    def pick(q: float) -> float:
        return round(float(np.percentile(ms, q)), 4)

    return LatencyStats(
        iterations=int(ms.size), warmup=warmup, load_ms=round(load_seconds * 1e3, 3),
        first_inference_ms=round(first_seconds * 1e3, 4), min_ms=round(float(ms.min()), 4),
        mean_ms=round(float(ms.mean()), 4), std_ms=round(float(ms.std()), 4), p50_ms=pick(50),
        p90_ms=pick(90), p95_ms=pick(95), p99_ms=pick(99), max_ms=round(float(ms.max()), 4),
        throughput_per_s=round(float(ms.size * 1e3 / ms.sum()), 2))


BUILD_BENCH_SECONDS = 10.0  # what build spends timing at most, past the first runs (`bench` times in full)
MIN_TIMED_RUNS = 3


def measure(runner: Runner, feeds: dict[str, np.ndarray], *, warmup: int = 5,
            iterations: int = 50, seconds: float = BUILD_BENCH_SECONDS) -> LatencyStats:
    """The summary `build` records: `warmup` runs and `iterations` timed ones, fewer where they
    would take longer than about `seconds` (at least one warm-up and MIN_TIMED_RUNS timed): a
    video model's run takes seconds on a small CPU, and 56 of them made the newcomer's build of an
    MViT last over 17 minutes."""
    started = time.perf_counter()
    runner.run(feeds)
    first = time.perf_counter() - started
    warmed = 0
    began = time.perf_counter()
    while warmed < warmup and (warmed == 0 or time.perf_counter() - began < seconds / 4):
        runner.run(feeds)
        warmed += 1
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < iterations and (len(samples) < MIN_TIMED_RUNS or
                                         time.perf_counter() - began < seconds):
        started = time.perf_counter()
        runner.run(feeds)
        samples.append(time.perf_counter() - started)
    stats = summarize(np.array(samples), warmed, runner.load_seconds, first)
    stats.input_shapes = {name: list(np.shape(array)) for name, array in feeds.items()}
    return stats
