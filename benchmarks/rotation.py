"""Several engines timed in one process, the order rotating every round so drift hits all alike."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from deploycc.bench.run import IDLE_PAUSE_S

WARMUP = 3


def rotated_times(runs: dict[str, Callable[[], object]], rounds: int,
                  runs_per_turn: int, min_turn_s: float = 0.0) -> dict[str, list[float]]:
    """Per label, the seconds of its timed runs: after WARMUP runs each, every round gives each
    engine a turn (the order shifted by one each round) of a pause, one untimed run, then
    `runs_per_turn` timed ones, or as many as fill `min_turn_s` by its warm-up's fastest run. The
    pause and the untimed run absorb the previous engine's idle threads (ONNX Runtime's and
    OpenVINO's spin)."""
    order = list(runs)
    times: dict[str, list[float]] = {label: [] for label in order}
    per_turn: dict[str, int] = {}
    for label, run in runs.items():
        fastest = float("inf")
        for _ in range(WARMUP):
            tick = time.perf_counter()
            run()
            fastest = min(fastest, time.perf_counter() - tick)
        per_turn[label] = max(runs_per_turn, math.ceil(min_turn_s / max(fastest, 1e-6)))
    for turn in range(rounds):
        shift = turn % len(order)
        for label in order[shift:] + order[:shift]:
            time.sleep(IDLE_PAUSE_S)  # the previous engine's idle threads park first
            runs[label]()
            for _ in range(per_turn[label]):
                tick = time.perf_counter()
                runs[label]()
                times[label].append(time.perf_counter() - tick)
    return times
