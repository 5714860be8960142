"""The zoo's torch models as factories for deploycc's PyTorch front end, from the module rather than
from a pre-exported file: `deploycc build benchmarks/zoo/factories.py:timm_resnet18 -t jetson-xavier`,
or a list file of such lines for `deploycc audit`. Each returns (module, example inputs at batch 1),
the same weights on every call."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from catalog import lookup


def __getattr__(name: str) -> Any:
    model = lookup(name)
    if model is None:
        raise AttributeError(name)

    def factory() -> tuple[Any, tuple[Any, ...]]:
        import torch

        torch.manual_seed(0)  # the same weights in every cell: an audit's cells share its exports
        return model.make(), model.inputs(1)

    return factory
