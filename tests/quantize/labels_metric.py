"""A user's metric for `--metric tests.quantize.labels_metric:accuracy`: top-1 accuracy against
the labels stored beside each sample's inputs (keys the model does not take travel with it)."""

from __future__ import annotations

import numpy as np


def accuracy(outputs: list[dict[str, np.ndarray]], samples: list[dict[str, np.ndarray]]) -> float:
    hits = [int(np.argmax(out["logits"]) == int(sample["label"])) for out, sample in zip(outputs, samples,
                                                                                      strict=True)]
    return float(np.mean(hits))


def close_to_fp32(outputs: list[dict[str, np.ndarray]], samples: list[dict[str, np.ndarray]]) -> float:
    """The share of samples whose logits are the fp32 model's (stored beside each sample as
    `expected`) to 1e-5: the fp32 model scores 1.0, and an int8 model with any layer left in
    int8 scores 0.0, so no guard step is within a budget below 1."""
    hits = [np.allclose(out["logits"], sample["expected"], rtol=1e-5, atol=1e-5)
            for out, sample in zip(outputs, samples, strict=True)]
    return float(np.mean(hits))
