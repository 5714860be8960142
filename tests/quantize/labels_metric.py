"""A user's metric for `--metric tests.quantize.labels_metric:accuracy`: top-1 accuracy against
the labels stored beside each sample's inputs (keys the model does not take travel with it)."""

from __future__ import annotations

import numpy as np


def accuracy(outputs: list[dict[str, np.ndarray]], samples: list[dict[str, np.ndarray]]) -> float:
    hits = [int(np.argmax(out["logits"]) == int(sample["label"])) for out, sample in zip(outputs, samples,
                                                                                      strict=True)]
    return float(np.mean(hits))
