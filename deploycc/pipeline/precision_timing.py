"""How `--precision auto` times its candidates: each engine within budget against fp32, interleaved
(A B B A, as `bench --compare-to`) in blocks until the ratio's 95% interval lies on one side of
FASTER or MAX_TIMING_SECONDS have passed; and, where two are faster than fp32, the less exact of the
two against the other directly (each raced against fp32 alone, a Whisper encoder's bf16 and int8
read 0.51x and 0.70x fp32 in one build, 0.56x and 0.52x side by side in one process)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from deploycc.records.bench import Comparison

if TYPE_CHECKING:
    from deploycc.backends.base import Runner
    from deploycc.pipeline.context import BuildContext

# A fast model is decided in one block, a slow or noisy one gets more pairs (a 38 ms Whisper
# encoder's int8 was left at [0.47, 1.77] after the 13 pairs of one fixed second)
BLOCK_SECONDS, MAX_TIMING_SECONDS = 0.5, 3.0
# A candidate is faster when its interval's upper end lies below this: two identical engines timed
# so on this 2-core machine sometimes differ by a few percent (position, drift)
FASTER = 0.97
MIN_PAIRS, MAX_PAIRS = 5, 200
PAUSE_RUNS = 4  # the pause before the other engine's turn, in runs of the model (at most IDLE_PAUSE_S)


@contextlib.contextmanager
def loaded(candidate: BuildContext) -> Iterator[Runner]:
    assert candidate.artifact is not None and candidate.request is not None
    runner = candidate.backend.load(candidate.artifact, candidate.staging, candidate.request)
    try:
        yield runner
    finally:
        runner.close()


def race(runner: Runner, baseline: Runner, feeds: dict, block: int, pause: float,
         against: str = "fp32") -> Comparison:
    """`runner` against `baseline` (named `against`), interleaved as `bench --compare-to` times them,
    in blocks of `block` pairs until the ratio's 95% interval lies on one side of FASTER (the choice
    is then made: faster if below, not if above) or MAX_TIMING_SECONDS."""
    import numpy as np

    from deploycc.bench.run import bootstrap_ratio, comparison_of, interleaved

    first, second = np.empty(0), np.empty(0)
    started = time.perf_counter()
    while True:
        mine, other = interleaved(runner, baseline, feeds, block, pause)
        first, second = np.concatenate([first, mine]), np.concatenate([second, other])
        low, high = bootstrap_ratio(first, second)
        if high < FASTER or low > FASTER or time.perf_counter() - started > MAX_TIMING_SECONDS:
            break
    return comparison_of(first, second, against, "ABBA interleaved, until decided", feeds, ci95=(low, high))


def duel(less_exact: BuildContext, more_exact: BuildContext, feeds: dict, against: str) -> Comparison:
    """`less_exact`'s engine against `more_exact`'s, raced as each was against fp32: it displaces
    the other only where faster beyond the noise (its interval's upper end below FASTER)."""
    with loaded(more_exact) as other, loaded(less_exact) as runner:
        block, pause = pairs(other, feeds)
        return race(runner, other, feeds, block, pause, against)


def pairs(runner: Runner, feeds: dict) -> tuple[int, float]:
    """Interleaved pairs for about BLOCK_SECONDS of both engines and their pauses, and the pause,
    from a few warm runs."""
    for _ in range(2):
        runner.run(feeds)
    started = time.perf_counter()
    runner.run(feeds)
    once = max(time.perf_counter() - started, 1e-5)
    pause = _pause(once)
    turn = 2 * once + pause / 2  # an untimed run, a timed one, a pause every other turn
    return max(MIN_PAIRS, min(MAX_PAIRS, int(BLOCK_SECONDS / (2 * turn)))), pause


def _pause(once: float) -> float:
    """The pause before the other engine's turn: PAUSE_RUNS runs of the model, at most IDLE_PAUSE_S
    (reached at 5 ms a run). A faster model's ratio on this 2-core machine strays both ways whatever
    the pause (two identical sessions of a 0.07 ms CNN: 0.6-1.4 with 0, 2 or 20 ms), and the full
    pause would only stretch the search."""
    from deploycc.bench.run import IDLE_PAUSE_S

    return min(IDLE_PAUSE_S, PAUSE_RUNS * once)
