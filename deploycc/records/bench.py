"""What timing found: a runner's latency percentiles, and two runners timed against each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LatencyStats:
    iterations: int
    warmup: int
    load_ms: float
    first_inference_ms: float
    min_ms: float
    mean_ms: float
    std_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    throughput_per_s: float
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # what was timed, every time


@dataclass
class Comparison:
    other: str
    order: str
    pairs: int
    median_ms: float
    other_median_ms: float
    ratio_of_medians: float  # this / other: below 1.0 this one is faster
    ci95: tuple[float, float]
    bootstrap_samples: int
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # both timed on these arrays

    def verdict(self, this: str) -> str:
        """Which side is faster and by how much, in words: "A is 1.23x faster than B (95% CI
        1.10x..1.35x)", or that neither is where the interval holds 1 (a ratio alone left the
        reader to work out which way it points)."""
        low, high = self.ci95
        if low <= 1.0 <= high or low <= 0:
            return (f"neither is faster at 95% confidence ({this}'s median time is "
                    f"{self.ratio_of_medians:.3f}x {self.other}'s, CI {low:.3f}..{high:.3f})")
        if high < 1.0:  # this one takes less time
            return (f"{this} is {1 / self.ratio_of_medians:.2f}x faster than {self.other} "
                    f"(95% CI {1 / high:.2f}x..{1 / low:.2f}x)")
        return (f"{self.other} is {self.ratio_of_medians:.2f}x faster than {this} "
                f"(95% CI {low:.2f}x..{high:.2f}x)")


@dataclass
class GenerationTiming:
    """A decoder's generation at one prompt length: the prefill from an empty cache (time to first
    token), then `decode_tokens` single-token steps on the growing cache."""

    prompt_tokens: int
    ttft_ms: float  # median over the repeats
    decode_tokens: int
    decode_tokens_per_s: float  # decode_tokens over the median repeat's decode time
    decode_ms_per_token: float
    cache_bytes: int  # the KV cache at prompt_tokens + decode_tokens


@dataclass
class GenerationBench:
    """What a user of a generative model reads, at each prompt length the model takes."""

    timings: list[GenerationTiming] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # prompt length -> why the model did not run it
    batch: int = 1
    repeats: int = 0

    def lines(self) -> list[str]:
        rows = [f"prompt {t.prompt_tokens}: time to first token {t.ttft_ms:.2f} ms, decode "
                f"{t.decode_tokens_per_s:.1f} tokens/s ({t.decode_ms_per_token:.2f} ms/token over "
                f"{t.decode_tokens}), KV cache {t.cache_bytes / 2**20:.1f} MiB" for t in self.timings]
        return rows + [f"prompt {length}: not run ({why})" for length, why in self.refused.items()]
