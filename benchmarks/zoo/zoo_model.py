"""What the zoo knows of one model (ZooModel), how a family's exports are spread over the exporters
and opsets, and random weights with a signal: the pieces catalog.py and more_families.py share. Both
import them from here, and catalog.py imports more_families.py, never the other way round.

Opsets are spread over 11-20: TorchScript exports take 11-17 in turn, dynamo 18-20 (it writes 18 at
least), and the exporter alternates, so that each family meets both where both work.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPORT_BATCH = 2  # torch.export specialises dims of size 0/1: trace with 2, hint batch 1
TS_OPSETS = (11, 12, 13, 14, 15, 16, 17)
DYNAMO_OPSETS = (18, 19, 20)


@dataclass
class ZooModel:
    name: str
    family: str  # timm, transformers, torchvision
    group: str  # the family's own grouping: timm's module, transformers' model type, torchvision's task
    make: Callable[[], Any]  # the module, in eval mode with a signal in its outputs
    inputs: Callable[[int], tuple[Any, ...]]  # example inputs at a batch size
    names: list[str]
    outputs: list[str]
    dynamic: dict[str, dict[int, str]]  # input -> axis -> label, as a user exports it
    exports: list[tuple[str, int]] = field(default_factory=list)  # (exporter, opset)
    about: str = ""
    # A model torch does not export (gradient-boosted trees): its converter, (model, opset, path)
    # -> how the axes came out; what it predicts, (model, inputs) -> outputs; its size
    convert: Callable[[Any, int, Path], str] | None = None
    predict: Callable[[Any, tuple[Any, ...]], list[Any]] | None = None
    count: Callable[[Any], int] | None = None


def spread(index: int) -> list[tuple[str, int]]:
    """The exports of a family's index-th model: one exporter in turn (both for every fifth), the
    opsets taken in turn from each exporter's range."""
    ts, dynamo = ("torchscript", TS_OPSETS[index // 2 % 7]), ("dynamo", DYNAMO_OPSETS[index // 2 % 3])
    if index % 5 == 0:
        return [ts, dynamo]
    return [dynamo] if index % 2 else [ts]


def with_signal(model: Any, shape: list[int]) -> Any:
    """Random weights whose outputs carry a signal, as trained ones do (benchmarks/corpus.py's)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from corpus import with_signal as corpus_signal

    return corpus_signal(model, shape)
