"""How much a quantized model's outputs agree with the fp32 model's on the validation samples.

Every metric is a score where the fp32 model scores 1.0 against itself, so a drop is comparable
with `--max-drop` whatever the metric:
  top1    the share of rows whose argmax over the last axis agrees (classifier-like outputs)
  cosine  the mean cosine similarity per sample and output
  sqnr    1 - noise/signal power, so a drop of 0.01 is an SQNR of 20 dB (reported in dB too)
  module:function  the user's: function(outputs, samples) -> float, higher is better, called on
          the fp32 outputs and on the int8 ones (each a list of {output name: array}, one per
          sample, with the samples, labels included, beside them)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from deploycc.errors import OptionError

Outputs = dict[str, np.ndarray]
BUILT_IN = ("top1", "cosine", "sqnr")


@dataclass
class Score:
    metric: str
    fp32: float
    value: float
    detail: str = ""  # e.g. the SQNR in dB

    @property
    def drop(self) -> float:
        return self.fp32 - self.value


def _float_outputs(outputs: Outputs) -> dict[str, np.ndarray]:
    return {name: np.asarray(array, dtype=np.float64) for name, array in outputs.items()
            if np.asarray(array).dtype.kind == "f"}


# What computes class scores: a linear head (logits) or a softmax over them. An embedding ends in a
# normalization (Div), a pooler in Tanh, a segmentation or detection map in Sigmoid over a map.
SCORE_OPS = ("Gemm", "MatMul", "Add", "Softmax", "LogSoftmax")


def classifier_like(reference: Sequence[Outputs], heads: Mapping[str, str] | None = None) -> bool:
    """Every float output holds 2 to 100,000 scores per row (rank 2, or rank 3 for a sequence of
    rows, as CTC and token classification give) and is made by a linear head or a softmax
    (`heads`: output name -> the op that produces it)."""
    floats = _float_outputs(reference[0]) if reference else {}
    return bool(floats) and all(
        a.ndim in (2, 3) and 2 <= a.shape[-1] <= 100_000 and (heads is None or heads.get(name) in SCORE_OPS)
        for name, a in floats.items())


def top1(reference: Sequence[Outputs], actual: Sequence[Outputs]) -> float:
    agree = total = 0
    for want, got in zip(reference, actual, strict=True):
        for name, array in _float_outputs(want).items():
            same = np.argmax(array, axis=-1) == np.argmax(np.asarray(got[name]), axis=-1)
            agree, total = agree + int(same.sum()), total + same.size
    return agree / total if total else 1.0


def cosine(reference: Sequence[Outputs], actual: Sequence[Outputs]) -> float:
    scores = []
    for want, got in zip(reference, actual, strict=True):
        for name, array in _float_outputs(want).items():
            a, b = array.ravel(), np.asarray(got[name], dtype=np.float64).ravel()
            norms = float(np.linalg.norm(a) * np.linalg.norm(b))
            scores.append(1.0 if norms == 0 and not a.any() and not b.any() else
                          float(a @ b) / norms if norms else 0.0)
    return float(np.mean(scores)) if scores else 1.0


def worst_cosine(reference: Outputs, actual: Outputs) -> float:
    """The lowest cosine of one sample's float outputs (what a budget on every output bounds)."""
    return min((cosine([{name: array}], [actual]) for name, array in _float_outputs(reference).items()),
               default=1.0)


def noise_ratio(reference: Sequence[Outputs], actual: Sequence[Outputs]) -> float:
    signal = noise = 0.0
    for want, got in zip(reference, actual, strict=True):
        for name, array in _float_outputs(want).items():
            signal += float(np.sum(array ** 2))
            noise += float(np.sum((array - np.asarray(got[name], dtype=np.float64)) ** 2))
    return noise / signal if signal else (0.0 if noise == 0 else 1.0)


def sqnr_db(ratio: float) -> float:
    return math.inf if ratio == 0 else -10 * math.log10(ratio)


def resolve(name: str, reference: Sequence[Outputs], heads: Mapping[str, str] | None = None) -> str:
    """The metric `auto` stands for: top-1 agreement for classifier-like outputs, else cosine."""
    if name == "auto":
        return "top1" if classifier_like(reference, heads) else "cosine"
    if name in BUILT_IN or ":" in name:
        return name
    raise OptionError(f"unknown metric {name!r}", hint="top1, cosine, sqnr, or module:function")


def judges_nothing(metric: str, reference: Sequence[Outputs]) -> str:
    """Why a built-in metric has nothing to judge in these outputs, "" when it has: top1, cosine
    and sqnr read float outputs only, and on a model without one (a classifier that returns its
    labels) they score no drop, whatever int8 did."""
    if metric not in BUILT_IN or not reference or any(_float_outputs(outputs) for outputs in reference):
        return ""
    kinds = ", ".join(f"{name} {np.asarray(array).dtype}" for name, array in reference[0].items())
    return (f"the model has no float output for {metric} to judge ({kinds}): the int8 model was not "
            "compared with fp32 (--metric module:function judges its outputs)")


def user_function(spec: str) -> Callable[[list[Outputs], list[dict]], float]:
    module_name, _, function_name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise OptionError(f"cannot load the metric {spec}: {error}",
                          hint="--metric MODULE:FUNCTION, with MODULE importable (on PYTHONPATH)") from None
    if not callable(function):
        raise OptionError(f"the metric {spec} is not a function")
    return function


def score(metric: str, reference: list[Outputs], actual: list[Outputs], samples: list[dict]) -> Score:
    if metric == "top1":
        return Score(metric, 1.0, top1(reference, actual))
    if metric == "cosine":
        return Score(metric, 1.0, cosine(reference, actual))
    if metric == "sqnr":
        ratio = noise_ratio(reference, actual)
        return Score(metric, 1.0, 1.0 - ratio, detail=f"SQNR {sqnr_db(ratio):.1f} dB")
    function = user_function(metric)
    return Score(metric, float(function(reference, samples)), float(function(actual, samples)))
