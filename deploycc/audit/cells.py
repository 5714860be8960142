"""An audit cell: one (model, target) pair run through the requested stages, and how it ended.

The status taxonomy is fixed so audits can be compared across runs and corpora:
  statuses   legal-as-exported, legalized, built, verified, benchmarked, failed, host-segments
             (not legal as a whole, but deployable with host segments: `--partition`; counted apart)
  categories (why a cell failed) unsupported-op, opset, dtype, dynamic-shape, numeric-mismatch,
             needs-inputs (the original fails on drawn inputs: give --inputs; or no int8 samples),
             precision (the target has no such precision), backend-error,
             backend-crash, timeout, out-of-memory, invalid-model, unschedulable, regressed (legal
             as exported yet refused after deploycc: always a deploycc bug)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from deploycc.taxonomy import FAILURE_OF_REFUSAL, CellStatus, Failure

STAGES = ("check", "legalize", "build", "verify", "bench")
DEFAULT_STAGES = ("check", "legalize", "build", "verify")
HOST_SEGMENTS = CellStatus.HOST_SEGMENTS
STATUSES = tuple(CellStatus)
CATEGORIES = tuple(Failure)
FROM_LEGALITY = FAILURE_OF_REFUSAL  # a node's refusal as the failure of its cell


@dataclass
class CellSpec:
    model: str
    model_sha256: str
    target: str
    target_hash: str
    stages: tuple[str, ...]
    jetpack: str | None = None
    batch: int | None = None
    workdir: str = ""  # where build outputs of this cell go
    # From the model's hints file (MODEL.hints.json beside it): the static shape of every input,
    # applied where the target needs one or the audit fixes the batch, and inputs to verify on.
    shapes: dict[str, list[int | str]] = field(default_factory=dict)
    # What the user said of the axes, as `build` takes it (the audit's flags, or the hints'
    # "batch", "dynamic_batch" and "shape_ranges"): applied everywhere, before the hint shapes.
    fixed: dict[str, list[int | str]] = field(default_factory=dict)  # --shape NAME:DIMS
    batch_range: tuple[int, int, int] | None = None  # --dynamic-batch MIN:OPT:MAX
    shape_ranges: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)
    inputs: str | None = None
    hints_sha256: str = ""
    partition: bool = False  # a model refused as a whole is tried with host segments
    precision: str | None = None  # None: the target's default
    calibration: str | None = None  # int8: the hints' folder of samples
    max_drop: float = 0.01
    metric: str = "auto"
    # The hardware stages run on a board (Ray executor) with this engine ("tensorrt", or
    # "onnxruntime" standing in): this cell writes the device bundle even where TensorRT is
    # importable, and the board's runner builds, verifies and times it.
    device_engine: str | None = None

    def key(self, version: str) -> str:
        axes = f"{sorted(self.fixed.items())}|{self.batch_range}|{sorted(self.shape_ranges.items())}"
        text = "|".join([self.model_sha256, self.target_hash, version, ",".join(self.stages),
                         str(self.batch), self.hints_sha256, axes] + (["partition"] if self.partition else [])
                         + ([f"on-device:{self.device_engine}"] if self.device_engine else [])
                         + ([f"precision:{self.precision}:{self.max_drop}:{self.metric}"]
                            if self.precision else []))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def needs_hardware(self, backend: str) -> bool:
        """Stages that must run on the target itself (TensorRT engines and their benchmarks)."""
        from deploycc.backends.registry import get_backend

        return bool(backend) and get_backend(backend).builds_on_device and \
            any(s in self.stages for s in ("build", "bench"))


@dataclass
class CellResult:
    model: str
    target: str
    status: str
    stage: str  # the last stage reached (or the one that failed)
    category: str | None = None
    message: str = ""
    legal_as_exported: bool | None = None
    blocking_ops: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    # Legal as exported, refused after deploycc: worse than doing nothing, always a deploycc bug.
    regressed: bool = False

    @property
    def succeeded(self) -> bool:
        """Deployed whole on the target (host segments are counted apart)."""
        return self.status not in (CellStatus.FAILED, HOST_SEGMENTS)
