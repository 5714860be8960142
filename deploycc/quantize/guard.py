"""The accuracy guard: quantize, judge on the validation samples, and while the metric drops more
than the budget keep the most damaging layers in float, a growing number at a time (1, 2, 4 ...),
until the budget holds or so many layers are float that quantization no longer pays off."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from deploycc.quantize.metrics import Score


@dataclass
class GuardStep:
    kept_float: list[str]
    score: Score
    within_budget: bool
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kept_float": self.kept_float, "metric": self.score.metric,
                "fp32": round(self.score.fp32, 6), "int8": round(self.score.value, 6),
                "drop": round(self.score.drop, 6), "detail": self.score.detail,
                "within_budget": self.within_budget, **({"beyond": self.notes[0]} if self.notes else {})}


def greedy(ranking: Sequence[str], attempt: Callable[[list[str]], GuardStep], *,
           first: GuardStep | None = None, max_float_share: float = 0.5) -> list[GuardStep]:
    """Every attempt made, the first with nothing kept in float (`first`, when it was made
    already); the last is the one to keep when it is within budget."""
    steps = [first if first is not None else attempt([])]
    limit = min(len(ranking), max(2, int(len(ranking) * max_float_share)))
    count = 1
    while not steps[-1].within_budget and ranking and count <= limit:
        steps.append(attempt(list(ranking[:count])))
        if count == limit:
            break
        count = min(count * 2, limit)
    return steps
