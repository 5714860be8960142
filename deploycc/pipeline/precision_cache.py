"""Where `--precision auto` keeps the choices it measured: by the legalized model's sha256, the
target, the options that change the candidates, the libraries and the CPU (CACHE_ENV names another
folder), so the same model built again takes the same precision without building its candidates
again. A choice calibrated on the user's samples is not kept: their data is not in the key."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.records.precision import PrecisionChoice

if TYPE_CHECKING:
    from deploycc.pipeline.context import BuildContext

CACHE_ENV = "DEPLOYCC_PRECISION_CACHE"
# 2: half candidates are built in every layer's half first; 3: a decoder is timed on a decode step;
# 4: a decoder's candidates include int8 weight-only
CACHE_SCHEMA = 4


def cache_file(context: BuildContext, candidates: list[str], budget: str) -> Path | None:
    """Where the choice for this model, target, options and machine is kept; None where it is not
    (int8 calibrated on the user's samples: their data is not in the key)."""
    import hashlib
    import json
    from importlib import metadata

    from deploycc import io
    from deploycc.bench.conditions import cpu_model

    if context.samples is not None:
        return None
    key = json.dumps({"schema": CACHE_SCHEMA, "deploycc": metadata.version("deploycc"),
                      "model": io.sha256_file(context.legalized_path), "target": context.target.spec_hash,
                      "half_analysis": context.options.half_analysis,
                      "candidates": candidates, "budget": budget,
                      "libraries": context.backend.environment(), "cpu": cpu_model(),
                      "inputs": {name: list(array.shape) for name, array in context.inputs().feeds.items()}},
                     sort_keys=True)
    folder = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "deploycc" / "precision")
    return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def remembered_choice(cache: Path | None) -> PrecisionChoice | None:
    import json

    from deploycc.results import from_dict

    if cache is None:
        return None
    try:
        return from_dict(PrecisionChoice, json.loads(cache.read_text()))
    except (OSError, ValueError, KeyError, TypeError):  # absent, or written by another version
        return None


def remember(cache: Path, choice: PrecisionChoice) -> None:
    import json

    from deploycc.io import write_text_atomic
    from deploycc.results import strict

    with contextlib.suppress(OSError):  # a cache that cannot be written is only not kept
        write_text_atomic(cache, json.dumps(strict(dataclasses.asdict(choice)), indent=1))
