"""The small interface every backend implements (Polygraphy keeps a loader and a runner per
backend; so do we): is it available here, describe the environment, build an artifact from a
legalized ONNX model, say where each node runs, and load a runner for the artifact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import DeployccError
from deploycc.taxonomy import Failure, Precision

if TYPE_CHECKING:
    import numpy as np

    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target


class BackendError(DeployccError):
    """The backend refused or failed to build or run: exit 1, the stage is named. `stage` is
    "run" when a built engine failed on the inputs it was given; `category` is an audit failure
    category when the backend knows better than "backend-error" (e.g. dynamic-shape)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, stage: str = "build",
                 category: Failure | None = None) -> None:
        super().__init__(message, hint)
        self.stage = stage
        self.category = category


class BackendUnavailable(DeployccError):
    """The backend's library is not installed on this machine."""

    exit_code = 1


@dataclass
class Profile:
    """min/opt/max dims of one dynamic input (a TensorRT optimization profile)."""

    input: str
    min: list[int]
    opt: list[int]
    max: list[int]


@dataclass
class BuildRequest:
    model: Path  # the legalized ONNX model
    outdir: Path  # where the artifact goes (the staging directory)
    target: Target
    precision: Precision
    artifact_format: str = "onnx"  # ORT: "onnx" (optimized ONNX) or "ort" (ORT format)
    profiles: list[Profile] = field(default_factory=list)
    dla_core: int | None = None
    gpu_fallback: bool = True
    fail_on_fallback: bool = False
    workspace_mb: int | None = None
    timing_cache: Path | None = None
    cache_dir: Path | None = None
    threads: int | None = None  # runners: CPU threads (None: the backend's default)
    bundle_only: bool = False  # backends that build on the device: the bundle, never the engine here
    # TensorRT INT8: the scales for implicit quantization (the DLA's); the GPU builds the Q/DQ model
    calibration_cache: Path | None = None
    fp32_model: Path | None = None  # INT8: the float model the Q/DQ one was made from

    @property
    def implicit_int8(self) -> bool:
        return self.precision == Precision.INT8 and self.dla_core is not None and \
            self.calibration_cache is not None


@dataclass
class Placement:
    """Where each node runs: the device/provider per node, and the nodes that left the target's."""

    primary: str
    counts: dict[str, int] = field(default_factory=dict)
    fallback: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    method: str = ""


@dataclass
class Artifact:
    kind: str  # ort-optimized-onnx | ort-format | openvino-ir | tensorrt-plan | device-bundle
    files: list[str]  # relative to the output directory; the first is what a runner loads
    pending_on_device: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what a reproduction needs
    placement: Placement | None = None
    notes: list[str] = field(default_factory=list)


class Runner(ABC):
    """A loaded artifact that maps input arrays by name to output arrays by name."""

    load_seconds: float = 0.0

    @property
    @abstractmethod
    def input_names(self) -> list[str]: ...

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def close(self) -> None:  # noqa: B027 - most runners need nothing
        """Release what the runner holds (device memory, sessions)."""

    def breakdown_ms(self, last: int | None = None) -> dict[str, float]:
        """Mean milliseconds per part over the `last` runs (all when None), for runners made of
        parts (a chain of segments); none for one engine."""
        return {}


class Backend(ABC):
    kind: str
    # Whether the engine's importer takes initializers declared inside an If/Loop body (tidy
    # lifts a branch's Constant nodes into them only then).
    subgraph_initializers: bool = True
    # Whether the engine is built on the device itself (TensorRT: a bundle here), so its build
    # and bench stages need that hardware (the audit routes them to it) and probing runs there.
    builds_on_device: bool = False
    # Whether an engine is built for shapes known at build time: fixed ones, or a min/opt/max
    # profile per dynamic input. A tensor sized by the data cannot then cross a segment cut, and
    # the audit fixes the axes before it builds.
    fixed_shape_engines: bool = False

    def prepare(self, request: BuildRequest, options: BuildOptions) -> None:  # noqa: B027
        """Complete a build request from the user's options (profiles, caches); most need nothing."""

    def add_reference(self, artifact: Artifact, outdir: Path, inputs: dict[str, np.ndarray],  # noqa: B027
                      outputs: dict[str, np.ndarray], precision: Precision, described: str) -> None:
        """Give an artifact built on the device what the board needs to judge it: the inputs and
        the original model's outputs (a bundle's reference data); most artifacts need nothing."""

    def raw_runner(self, path: Path, target: Target, threads: int | None) -> Runner:
        """A runner on the model file as it is, for `bench` on an unbuilt model."""
        from deploycc.errors import OptionError

        raise OptionError(f"benching a raw model on {self.kind} is not supported; build it first")

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can build and run here, else why not (one line)."""

    @abstractmethod
    def environment(self) -> dict[str, str]:
        """Library versions and device facts that a build depends on (for the manifest)."""

    @abstractmethod
    def build(self, request: BuildRequest) -> Artifact: ...

    @abstractmethod
    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner: ...
