"""The audit's records: what it is asked (AuditOptions), one cell (a (model, target) pair run
through the requested stages, and how it ended), a summary per target and the whole report.

The status taxonomy is fixed so audits can be compared across runs and corpora:
  statuses   legal-as-exported, legalized, built, verified, benchmarked, failed, host-segments
             (not legal as a whole, but deployable with host segments: `--partition`; counted apart)
  categories (why a cell failed) export (a PyTorch model torch could not export), unsupported-op,
             opset, dtype, dynamic-shape, numeric-mismatch,
             needs-inputs (the original fails on drawn inputs: give --inputs; or no int8 samples),
             precision (the target has no such precision), backend-error,
             backend-crash, timeout, out-of-memory, invalid-model, unschedulable, regressed (legal
             as exported yet refused after deploycc, or run by the backend as exported and not
             after: always a deploycc bug)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deploycc.results import Result
from deploycc.taxonomy import BOARD_ENGINE, FAILURE_OF_REFUSAL, CellStatus, Failure, Precision, Stage

STAGES = (Stage.CHECK, Stage.LEGALIZE, Stage.BUILD, Stage.VERIFY, Stage.BENCH)
DEFAULT_STAGES = (Stage.CHECK, Stage.LEGALIZE, Stage.BUILD, Stage.VERIFY)
HOST_SEGMENTS = CellStatus.HOST_SEGMENTS
STATUSES = tuple(CellStatus)
CATEGORIES = tuple(Failure)
FROM_LEGALITY = FAILURE_OF_REFUSAL  # a node's refusal as the failure of its cell


@dataclass
class AuditOptions:
    stages: tuple[str, ...] = DEFAULT_STAGES
    jobs: int = 1
    timeout: float = 600.0
    memory_limit_mb: int | None = None
    fresh: bool = False
    batch: int | None = None
    # The axes flags `build` takes, for every model (a model's hints may say otherwise): --shape
    # (inputs a model lacks are skipped), --dynamic-batch MIN:OPT:MAX, --shape-range.
    shapes: dict[str, list[int | str]] = field(default_factory=dict)
    batch_range: tuple[int, int, int] | None = None
    shape_ranges: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)
    executor: str = "local"
    ray_address: str | None = None
    partition: bool = False  # refused models tried again with host segments (build stage)
    # Each cell's build folder keeps only its reports (report.md, report.json) once the cell ends:
    # a corpus of hundreds of models would otherwise keep every target's engine of each, and the
    # disk (a 300-model zoo on six targets left 45 GB of builds).
    reports_only: bool = False
    # Run nothing: the report covers the models whose every target's cell an earlier (maybe
    # interrupted) run stored, and only those: what a long audit has so far.
    stored_only: bool = False
    precision: Precision | None = None  # None: each target's default; int8 calibrates on the hints' samples
    max_drop: float = 0.01
    metric: str = "auto"
    # A torch model's exporters in this order on every target (empty: each target's own order):
    # how the order a target keeps is measured against the other
    exporters: tuple[str, ...] = ()
    # fp16/bf16 builds find what half breaks (build's --no-fp16-analysis turns it off): an audit of
    # conversion success alone may skip it, as `build` may
    half_analysis: bool = True
    # Ray executor, TensorRT cells: the runner on the board (one of device.RUNNER_ENGINES:
    # "onnxruntime" stands ONNX Runtime in for TensorRT, so a node without TensorRT checks the
    # loop); python: the board's interpreter for the runner when not the Ray worker's own (the
    # system Python that has JetPack's bindings).
    device_engine: str = BOARD_ENGINE
    device_python: str | None = None
    device_iterations: int = 200
    # The cell process; empty: deploycc's own (audit/isolate.py's WORKER). Tests substitute one
    # that really crashes.
    worker: Sequence[str] = ()


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
    precision: Precision | None = None  # None: the target's default
    calibration: str | None = None  # int8: the hints' folder of samples
    max_drop: float = 0.01
    metric: str = "auto"
    exporters: tuple[str, ...] = ()  # a torch model's exporters in this order (empty: the target's)
    half_analysis: bool = True  # fp16/bf16: find what half breaks (build's --no-fp16-analysis)
    # The hardware stages run on a board (Ray executor) with this engine ("tensorrt", or
    # "onnxruntime" standing in): this cell writes the device bundle even where TensorRT is
    # importable, and the board's runner builds, verifies and times it.
    device_engine: str | None = None
    # Where the cells of one audit share the original's outputs on the same inputs
    # (verify/reference.py): run once per model, not once per target. Not part of the key.
    references: str = ""
    # Where the cells of one audit share a torch model's proven exports (frontend/shared_exports.py):
    # one per export policy, not one per target. Not part of the key.
    exports: str = ""
    # Where they share the verdicts of rewrite proofs (rules/proven.py): a rewrite proven for one
    # target is not proven again for the next. Not part of the key.
    proofs: str = ""

    def key(self, version: str) -> str:
        axes = f"{sorted(self.fixed.items())}|{self.batch_range}|{sorted(self.shape_ranges.items())}"
        text = "|".join([self.model_sha256, self.target_hash, version, ",".join(self.stages),
                         str(self.batch), self.hints_sha256, axes] + (["partition"] if self.partition else [])
                         + ([f"on-device:{self.device_engine}"] if self.device_engine else [])
                         + ([f"precision:{self.precision}:{self.max_drop}:{self.metric}"]
                            if self.precision else [])
                         + ([f"exporters:{','.join(self.exporters)}"] if self.exporters else [])
                         + ([] if self.half_analysis else ["no-fp16-analysis"]))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def needs_hardware(self, engine: str | None) -> str | None:
        """The runner engine of stages that must run on the target itself (a TensorRT engine, an
        onnxruntime-gpu session, and their benchmarks): the target's `engine` (its
        `backend.engine_on_device`) where the cell builds or benches, else None."""
        return engine if any(s in self.stages for s in (Stage.BUILD, Stage.BENCH)) else None


@dataclass
class CellResult:
    model: str
    target: str
    status: CellStatus
    stage: Stage  # the last stage reached (or the one that failed)
    category: Failure | None = None
    message: str = ""
    legal_as_exported: bool | None = None
    blocking_ops: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    # Legal as exported and refused after deploycc, or run by the backend as exported and not after:
    # worse than doing nothing, always a deploycc bug.
    regressed: bool = False

    @property
    def succeeded(self) -> bool:
        """Deployed whole on the target (host segments are counted apart)."""
        return self.status not in (CellStatus.FAILED, HOST_SEGMENTS)


@dataclass
class TargetTally:
    target: str
    cells: int
    legal_as_exported: int
    succeeded: int
    rate_as_exported: float
    rate_after_deploycc: float
    regressed: int = 0  # legal as exported, refused after deploycc: each one a deploycc bug
    with_host_segments: int = 0  # refused as a whole, deployable with host segments (--partition)


@dataclass
class AuditReport(Result):
    outdir: str
    models: list[str]
    targets: list[str]
    stages: list[str]
    cells: list[CellResult]
    summary: list[TargetTally]
    top_failures: list[dict[str, object]]
    counts: dict[str, int]
    seconds: float = 0.0
    reused: int = 0
    notes: list[str] = field(default_factory=list)
    # model -> its family, where its hints name one ("family": "timm"): the page groups by it
    families: dict[str, str] = field(default_factory=dict)
