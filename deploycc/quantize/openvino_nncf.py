"""OpenVINO INT8 with NNCF on the OpenVINO model: `nncf.quantize` (its defaults: the performance
preset, symmetric weights, the CPU's int8 kernels), and when the metric drops past the budget
`nncf.quantize_with_accuracy_control`, NNCF's own guard, which ranks the quantized layers and
returns them to float one group at a time until the budget holds. That guard ranks every group
by reverting it alone and ranks the rest again after each step that does not help (PP-OCRv4's
detector ran more than 25 minutes in it): it is given GUARD_SECONDS, and out of time it gives up,
as a guard that found no int8 model within the budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from deploycc.quantize.data import Sample
from deploycc.quantize.ort_qdq import quiet

Evaluate = Callable[[Any], tuple[float, list[float]]]
# The accuracy control's time, its own quantization's included. A guard that restores the budget by
# returning a few groups to float makes a few evaluations (a compile and the validation samples
# each: seconds on the corpus); ranking every group of a model with about a hundred of them again
# and again is what ran past 25 minutes. Out of time, int8 is judged over budget.
GUARD_SECONDS = 150.0


class GuardOutOfTime(Exception):
    """NNCF's accuracy control was stopped at its deadline, after `evaluations` of the model."""

    def __init__(self, evaluations: int, seconds: float) -> None:
        super().__init__(f"stopped after {seconds:.0f} s and {evaluations} evaluation(s)")


def _nncf() -> Any:
    import logging

    import nncf

    logging.getLogger("nncf").setLevel(logging.ERROR)  # its progress bars and INFO lines
    return nncf


def read(model: Path) -> Any:
    import openvino as ov

    return ov.Core().read_model(str(model))


AUTO = object()  # the scheme model_type picks


def model_type(model: Any) -> Any:
    """NNCF's transformer scheme (no quantized Softmax inputs, SmoothQuant) where there is attention."""
    nncf = _nncf()
    types = {op.get_type_name() for op in model.get_ops()}
    return nncf.ModelType.TRANSFORMER if "Softmax" in types and "MatMul" in types else None


def quantize(model: Any, samples: Sequence[Sample], inputs: Sequence[str], scheme: Any = AUTO) -> Any:
    """`scheme`: NNCF's model type; AUTO: model_type(model)."""
    nncf = _nncf()
    dataset = nncf.Dataset([{name: sample[name] for name in inputs} for sample in samples])
    with quiet():
        return nncf.quantize(model, dataset, subset_size=len(samples),
                             model_type=model_type(model) if scheme is AUTO else scheme)


def quantize_guarded(model: Any, samples: Sequence[Sample], validation: Sequence[Sample],
                     inputs: Sequence[str], evaluate: Callable[[Any, list[int]], tuple[float, list[float]]],
                     max_drop: float, scheme: Any = AUTO) -> Any:
    """`evaluate(compiled model, sample indices)` -> (metric, per-sample metric). Raises
    GuardOutOfTime when an evaluation would start past GUARD_SECONDS from now."""
    import time

    nncf = _nncf()
    started, evaluations = time.monotonic(), 0

    def evaluate_in_time(compiled: Any, indices: list[int]) -> tuple[float, list[float]]:
        nonlocal evaluations
        spent = time.monotonic() - started
        if spent > GUARD_SECONDS:  # NNCF lets an exception from its validation function through, and stops
            raise GuardOutOfTime(evaluations, spent)
        evaluations += 1
        return evaluate(compiled, indices)

    calibration = nncf.Dataset([{name: sample[name] for name in inputs} for sample in samples])
    validating = nncf.Dataset(list(range(len(validation))),
                              lambda index: {name: validation[index][name] for name in inputs})
    with quiet():
        return nncf.quantize_with_accuracy_control(
            model, calibration, validating,
            lambda compiled, indices: evaluate_in_time(compiled, list(indices)),
            max_drop=max_drop, drop_type=nncf.DropType.ABSOLUTE, subset_size=len(samples),
            model_type=model_type(model) if scheme is AUTO else scheme)


def quantized_ops(model: Any) -> set[str]:
    """The ops that take a FakeQuantize'd input: where the int8 kernels run."""
    names = set()
    for op in model.get_ordered_ops():
        if op.get_type_name() == "FakeQuantize":
            continue
        for port in op.inputs():
            if port.get_source_output().get_node().get_type_name() == "FakeQuantize":
                names.add(op.get_friendly_name())
                break
    return names
