"""Half-precision analyses already run: an analysis is decided by the model file it ran on, the
inputs, the precision and the tolerances that judged it, and the runtimes, so the same analysis is
not run twice. The cells of an audit legalize one export for several TensorRT targets, often to
the same bytes (the Xavier's and the Orin's), and each analyzed it again: 10-30 s on a detector.
Kept in memory, and where an audit names its shared folder (rules.proven.CACHE_ENV, under fp16/),
in files written atomically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.fp16.record import HalfPrecisionReport
from deploycc.results import KeptRecords, from_dict, strict

if TYPE_CHECKING:
    import numpy as np

    from deploycc.taxonomy import Precision

KEPT_IN_MEMORY = 64
_kept = KeptRecords(KEPT_IN_MEMORY, lambda: _folder())  # _folder is defined below


def key(model_path: Path, feeds: dict[str, np.ndarray], precision: Precision,
        tolerance: Precision | None) -> str:
    import onnx
    import onnxruntime

    from deploycc.io import sha256_file
    from deploycc.verify.reference import feeds_digest

    text = (f"{sha256_file(model_path)}|{feeds_digest(feeds)}|{precision}|{tolerance}|"
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}")
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def recall(found_key: str, inputs: str) -> HalfPrecisionReport | None:
    """The report of the same analysis run before, described with this run's `inputs`, or None."""
    record = _kept.get(found_key)
    if record is None:
        return None
    report = from_dict(HalfPrecisionReport, record)
    report.inputs, report.seconds = inputs, 0.0
    return report


def keep(found_key: str, report: HalfPrecisionReport) -> None:
    _kept.put(found_key, strict(dataclasses.asdict(report)))


def _folder() -> Path | None:
    from deploycc.rules.proven import CACHE_ENV

    shared = os.environ.get(CACHE_ENV)
    return Path(shared) / "fp16" if shared else None
