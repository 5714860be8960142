"""What `--precision int8` did for one target: how it quantized, what the guard measured, whether
int8 paid off against fp32, and what was kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.records.bench import Comparison
from deploycc.results import Result
from deploycc.taxonomy import Precision


@dataclass
class QuantizeReport(Result):
    target: str
    method: str
    # int8, or the target's default precision where int8 did not pay off (slower, or not within
    # the budget)
    decision: Precision
    reason: str
    metric: str
    fp32_metric: float
    int8_metric: float
    drop: float
    max_drop: float
    within_budget: bool
    calibration_samples: int
    validation_samples: int
    kept_float: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    # the medians of the interleaved race below (None where nothing was timed here: TensorRT, or
    # no int8 model within the budget)
    fp32_latency_ms: float | None = None
    int8_latency_ms: float | None = None
    # int8 (this) against fp32 (other), timed in interleaved rounds: the latency ratio of medians
    # with its 95% bootstrap interval; the speed verdict comes from the interval, not the point
    speed: Comparison | None = None
    # OpenVINO: the same two models compiled without INFERENCE_PRECISION_HINT (the CPU's default,
    # bf16 where it has bf16 units), beside the f32-pinned figures above: medians of a second race
    default_precision_latency_ms: dict[str, float] = field(default_factory=dict)
    model: str = ""  # the int8 model in the output directory ("" when fp32 is kept)
    calibration_cache: str | None = None
    required: bool = False  # --require-int8: anything but int8 fails the build
    # Why the guard judged nothing ("" when it judged): a built-in metric on a model without a
    # float output scores no drop whatever int8 did (the build says so: a skipped safety step)
    unjudged: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """fp32's median latency over int8's in the interleaved race (a point: `faster` decides)."""
        if self.fp32_latency_ms and self.int8_latency_ms:
            return round(self.fp32_latency_ms / self.int8_latency_ms, 3)
        return None

    @property
    def faster(self) -> bool | None:
        """int8 faster than fp32 beyond noise: the whole interval of the latency ratio below 1
        (None where it was not timed)."""
        return None if self.speed is None else self.speed.ci95[1] < 1.0

    @property
    def speed_text(self) -> str:
        """The race's verdict in words, with the interval; no point ratio where it straddles 1."""
        if self.speed is None:
            return ""
        low, high = self.speed.ci95
        interval = f"95% CI {low:.2f}-{high:.2f}, {self.speed.pairs} interleaved pairs"
        if high < 1.0:
            return f"int8 at {self.speed.ratio_of_medians:.2f}x fp32's latency ({interval})"
        if low > 1.0:
            return f"int8 slower: {self.speed.ratio_of_medians:.2f}x fp32's latency ({interval})"
        return f"not faster beyond noise (int8/fp32 latency {interval})"
