"""Blame: when the rewritten model fails verification, the pass whose output first differs from
the original's, then the rule inside that pass; legalize runs again without it and keeps every
other pass's work.

Both searches bisect on reruns of the pipeline, each verified like the whole: the shortest prefix
of the passes that ran whose result fails, then, in that pass, the fewest of its rules (in its
own order) that make it fail. A rule cannot be found when the pass fails with all of its rules
set aside (or names none): then the pass is blamed whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from deploycc.records.legalize import Blame

if TYPE_CHECKING:
    from deploycc.options import LegalizeOptions
    from deploycc.records.legalize import PassRecord
    from deploycc.verify.verification import Verification


def _fails(result: Verification | None) -> bool:
    return result is None or (not result.passed and not result.needs_inputs)


def _first_failing(count: int, fails: Callable[[int], bool]) -> int:
    """The smallest k in 1..count with fails(k), given fails(count) and not fails(0)."""
    low, high = 0, count
    while high - low > 1:
        middle = (low + high) // 2
        if fails(middle):
            high = middle
        else:
            low = middle
    return high


def find_blame(verify_run: Callable[[LegalizeOptions], Verification | None], options: LegalizeOptions,
               records: list[PassRecord], failed: Verification) -> Blame | None:
    """Bisect to the first pass, then the first rule in it, whose result fails verification.
    `verify_run(options)` runs the pipeline with those options and verifies the result (None when
    it broke); `failed` is the whole pipeline's verification, with `options`."""
    ran = [r for r in records if r.ran]
    if not ran:
        return None
    seen: dict[tuple[int, tuple[str, ...]], Verification | None] = {(len(ran), ()): failed}

    def run(prefix: int, disabled: tuple[str, ...] = ()) -> Verification | None:
        key = (prefix, disabled)
        if key not in seen:
            names = tuple(r.name for r in ran[:prefix])
            seen[key] = verify_run(replace(options, only_passes=names, disable_passes=(),
                                           disable_rules=(*options.disable_rules, *disabled)))
        return seen[key]

    culprit = _first_failing(len(ran), lambda k: _fails(run(k)))
    record = ran[culprit - 1]
    rules = [r for r in record.rules if r not in options.disable_rules]
    rule = None
    if rules and not _fails(run(culprit, tuple(rules))):
        # the fewest of its rules, in order, that make it fail: the last of them is to blame
        enabled = _first_failing(len(rules), lambda k: _fails(run(culprit, tuple(rules[k:]))))
        rule = rules[enabled - 1]
        failing = run(culprit, tuple(rules[enabled:]))
    else:
        failing = run(culprit)
    output, problem = _first_difference(failing)
    return Blame(record.name, rule, output, problem)


def _first_difference(result: Verification | None) -> tuple[str, str]:
    if result is None:
        return "", "the pipeline broke when rerun up to this pass"
    for output in result.outputs:
        if not output.passed:
            return output.name, output.problem or (
                f"max abs error {output.max_abs_error:.3g} (atol {output.atol:g}, rtol {output.rtol:g}), "
                f"{output.mismatched} element(s) beyond tolerance")
    return "", result.problem
