"""TensorRT's own build options (`--dla-core`, `--gpu-fallback`, `--workspace-mb`, the
optimization profiles, a timing cache), as the build request carries them, and what follows
from them: the workspace the engine gets, and whether its INT8 is the DLA's implicit form."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from deploycc.backends.base import BackendOptions, BuildRequest
from deploycc.records.shapes import ShapeProfile
from deploycc.taxonomy import Precision


@dataclass
class TensorRTOptions(BackendOptions):
    dla_core: int | None = None
    gpu_fallback: bool = True
    workspace_mb: int | None = None  # None: the target's
    profiles: list[ShapeProfile] = field(default_factory=list)  # one per dynamic input (prepare)
    timing_cache: Path | None = None  # read and written back by a build here (the bundle's, on the board)
    bundle_only: bool = False  # the bundle, never the engine here, even where TensorRT is installed


def own(request: BuildRequest) -> TensorRTOptions:
    """The request's TensorRT options (the defaults where it carries none)."""
    options = request.backend_options
    return options if isinstance(options, TensorRTOptions) else TensorRTOptions()


def workspace_mb(request: BuildRequest) -> int | None:
    return own(request).workspace_mb or request.target.memory.workspace_mb


def implicit_int8(request: BuildRequest) -> bool:
    """INT8 on a DLA core, which takes the implicit form only: the fp32 model with the scales of
    the calibration cache. The GPU builds the Q/DQ model (explicit quantization)."""
    return request.precision == Precision.INT8 and own(request).dla_core is not None and \
        request.calibration_cache is not None
