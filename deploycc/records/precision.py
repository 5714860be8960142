"""What `--precision auto` tried and chose: plain data, read back from report.json."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.taxonomy import CandidateOutcome, Precision


@dataclass
class PrecisionCandidate:
    """One precision: how its engine did against the fp32 one on the same inputs."""

    precision: Precision
    outcome: CandidateOutcome
    why: str
    ratio: float | None = None  # median latency / fp32's (interleaved), below 1: faster
    ci95: tuple[float, float] | None = None  # the ratio's 95% bootstrap interval
    min_cosine: float | None = None  # the lowest cosine of an output against the original
    max_abs_error: float | None = None  # the largest of any output against the original
    # how it was made where the precision has several here: int8 given calibration data is built
    # calibrated on it and dynamic (precision_search.CALIBRATED, DYNAMIC); "" otherwise
    recipe: str = ""


@dataclass
class PrecisionChoice:
    """The precision a build chose, the budget it chose within, and every candidate."""

    chosen: Precision
    budget: str
    candidates: list[PrecisionCandidate] = field(default_factory=list)
    timed_at: dict[str, list[int]] = field(default_factory=dict)  # the input shapes the engines ran
    seconds: float = 0.0  # what the search took (its candidates' builds, verifications and timing)
    cached: bool = False  # the choice of an earlier build of the same model, options and machine
    # what those shapes are, where not the inputs verification drew ("one decode step ...": a decoder's)
    timed_on: str = ""
