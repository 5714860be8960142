"""The small interface every backend implements (Polygraphy keeps a loader and a runner per
backend; so do we): is it available here (`unavailable_reason`), describe the environment, its own
options (`backend_options`), build an artifact from a legalized ONNX model (saying where each node
runs, and which folder of it travels to the device) and load a runner for the artifact.

What only some backends do is what they contribute, as data the others leave empty:
`stages` (BackendStages: how `--precision int8` quantizes for it, the completion of a build
request before the engine build, the dims a build must fix, the board's reference data, a device
bundle's build request) and `runners` (BackendRunners: on an unbuilt model for `bench`, on its own
int8 model for NNCF, on a conformance case for `probe`). What the engine is (built on the device,
for fixed shapes, ...) is the target's data (`targets.schema.BackendSpec`), which the passes read
without asking a backend. Nothing outside backends/ tests a backend's kind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import DeployccError
from deploycc.records.artifact import Artifact
from deploycc.records.artifact import Placement as Placement  # re-exported: a record, in records/
from deploycc.taxonomy import Failed, Failure, Name, Precision

if TYPE_CHECKING:
    import numpy as np

    from deploycc.device.bundle import DeviceReference
    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target


class BackendError(DeployccError):
    """The backend refused or failed to build or run: exit 1, the stage is named. `stage` (taxonomy.Failed)
    is RUN when a built engine failed on the inputs it was given; `category` is an audit failure
    category when the backend knows better than "backend-error" (e.g. dynamic-shape)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, stage: Failed = Failed.BUILD,
                 category: Failure | None = None) -> None:
        super().__init__(message, hint)
        self.stage = stage
        self.category = category


class BackendUnavailable(DeployccError):
    """The backend's library is not installed on this machine."""

    exit_code = 1


@dataclass
class BackendOptions:
    """A backend's own options: the flags only it reads, from `Backend.backend_options`. Each
    backend that has any subclasses this beside its code (OrtOptions, OpenVinoOptions,
    TensorRTOptions); the build request carries one, and the backend reads its own back."""


@dataclass
class BuildRequest:
    model: Path  # the legalized ONNX model (int8: the quantized one)
    outdir: Path  # where the artifact goes (the staging directory)
    target: Target
    precision: Precision
    fail_on_fallback: bool = False
    threads: int | None = None  # runners: CPU threads (None: the backend's default)
    # INT8: the float model the quantized one was made from, and the scales file the backend's
    # int8 recipe had quantize/ write beside it (`Int8Recipe.calibration_cache`)
    fp32_model: Path | None = None
    calibration_cache: Path | None = None
    backend_options: BackendOptions | None = None  # None: the backend's defaults
    # fp16/bf16: the ONNX nodes the half-precision analysis keeps in fp32 (deploycc.fp16); each
    # backend writes them in its own form, or says it cannot
    fp32_layers: tuple[str, ...] = ()
    # A runtime that builds an engine per supported fragment (ORT's TensorRT provider): the fewest
    # nodes a fragment needs to be worth its launch, from the partition cost model; None: its default
    min_segment_nodes: int | None = None


class Quantizer(Name):
    """The tools quantize/ runs for `--precision int8`."""

    ORT_QDQ = "ort-qdq"  # ONNX Runtime's quantize_static, a Q/DQ ONNX model, judged on ONNX Runtime
    NNCF = "nncf"  # NNCF on the backend's own model, judged and timed by the backend's int8 runner


class WeightQuantizer(Name):
    """The tools quantize/weights.py runs for weight-only quantization (`--precision int4`,
    `int8-weights`)."""

    ORT_MATMUL_NBITS = "ort-matmul-nbits"  # ONNX Runtime's matmul_nbits_quantizer: MatMulNBits
    NNCF_COMPRESS = "nncf-compress-weights"  # NNCF's compress_weights on the OpenVINO model
    # ONNX Runtime's matmul_nbits_quantizer in its Q/DQ form: DequantizeLinear (opset 21, int4,
    # block_size) into MatMul, which TensorRT 10's parser reads as INT4 weight-only
    ORT_BLOCKWISE_QDQ = "ort-blockwise-qdq"


class QdqLayout(Name):
    """The Q/DQ layouts quantize/ort_qdq.py writes (its x86_form and tensorrt_form)."""

    X86 = "x86"  # u8 activations, s8 weights: ONNX Runtime's fast kernels on x86
    TENSORRT = "tensorrt"  # symmetric s8, Q/DQ only where TensorRT runs INT8, checked for its parser


@dataclass(frozen=True)
class Int8Recipe:
    """How `--precision int8` makes this backend's model: the backend chooses, quantize/ does it.
    `stand_in_for`: the engine is built elsewhere (on the board), so ONNX Runtime stands in for it
    to judge the int8 model and nothing is timed here; `calibration_cache`: also write the
    engine's implicit-quantization scales (TensorRT's cache, which its DLA builds from)."""

    quantizer: Quantizer
    qdq_layout: QdqLayout = QdqLayout.X86
    stand_in_for: str | None = None
    calibration_cache: bool = False
    # int8 without calibration data: constant MatMul weights quantized ahead, activations by the
    # engine at run time (quantize/dynamic.py), a `--precision auto` candidate
    dynamic: bool = False


# A conformance case run on a backend: the model's bytes and its feeds (exotic element types as
# ml_dtypes arrays) -> its outputs in order (backends/raw_values.py reads and writes the raw bits)
ConformanceRunner = Callable[[bytes, dict[str, Any]], list[Any]]


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


@dataclass(frozen=True)
class BackendStages:
    """What a backend adds to the pipeline's stages beyond its build; None where it adds nothing."""

    # How `--precision int8` quantizes for it (None: no int8 path)
    int8: Int8Recipe | None = None
    # Complete a build request from the model and the user's options before the engine build
    # (TensorRT's profiles and the fp32 model a DLA builds its INT8 from; the TensorRT provider's
    # profiles; OpenVINO's model cache for a request made without the user's options)
    prepare: Callable[[BuildRequest, BuildOptions], None] | None = None
    # Why this build takes every dim the target's shape policy would give a profile at one size
    # instead, in the shape plan's words (TensorRT on a DLA core); None from it: profiles stand
    static_dims: Callable[[BuildOptions], str | None] | None = None
    # Give an artifact built on the device what the board needs to judge it: the inputs and the
    # original model's outputs (a bundle's reference data): (artifact, outdir, reference)
    add_reference: Callable[[Artifact, Path, DeviceReference], None] | None = None
    # The build request a device bundle describes (`build --engine-only` on the board):
    # (bundle folder, outdir, target)
    bundle_request: Callable[[Path, Path, Target], BuildRequest] | None = None
    # The precision the device here computes a precision asked of it in, where the runtime decides
    # that by the device (OpenVINO's CPU plugin computes f16 in bf16 without FP16 units): (target,
    # precision). A search does not build what it would compute as another candidate
    computes_as: Callable[[Target, Precision], Precision] | None = None
    # How weight-only quantization (`--precision int4`, `int8-weights`, as the target's data offers
    # them) compresses the weights (None: no weight-only path)
    weight_only: WeightQuantizer | None = None


@dataclass(frozen=True)
class BackendRunners:
    """The runners a backend offers besides loading its own artifact; None where it has none."""

    # On the model file as it is, for `bench` on an unbuilt model: (model, target, threads)
    raw: Callable[[Path, Target, int | None], Runner] | None = None
    # Judges and times an int8 candidate here, for a quantizer that works on the backend's own
    # model (NNCF): (model, pinned), pinned compiling it in the precision an int8 build pins its
    # float parts to, else in the device's default
    int8: Callable[[Path, bool], Runner] | None = None
    # How `deploycc probe` runs one conformance case on this backend
    conformance: ConformanceRunner | None = None


class Backend(ABC):
    kind: str
    stages: BackendStages = BackendStages()
    runners: BackendRunners = BackendRunners()

    def backend_options(self, options: BuildOptions) -> BackendOptions:
        """Its own options from what the user asked (`--format`, `--dla-core`, a model cache)."""
        return BackendOptions()

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
