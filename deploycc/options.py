"""What a user asks of deploycc besides the model and the target: plain records, read by the
passes, the pipeline and the CLI alike (nothing here imports them back). What the user leaves
unsaid is the target's default, so this layer sits just above targets/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError
from deploycc.taxonomy import LegalizeMode, Precision

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from deploycc.targets.schema import Target

MODES = (LegalizeMode.FULL, LegalizeMode.PARTIAL)
DEFAULT_FOLD_LIMIT_BYTES = 16 << 20  # a folded tensor larger than this stays a computation


@dataclass
class LegalizeOptions:
    """Everything `deploycc legalize` takes besides the model and the target."""

    opset: int | None = None
    shapes: dict[str, list[int | str]] = field(default_factory=dict)
    batch: int | None = None
    dynamic_batch: bool = False
    input_layout: dict[str, str] = field(default_factory=dict)  # input name ("*" = all 4-D) -> layout fed
    keep_outputs: list[str] | None = None
    keep_map_outputs: bool = False  # ZipMap stays even where the target has none (map_outputs pass)
    mode: LegalizeMode | None = None  # None: the target's default (partial for ORT, full otherwise)
    disable_passes: tuple[str, ...] = ()
    only_passes: tuple[str, ...] = ()
    # Rules set aside inside the passes that apply named rules (the catalog's, tidy's, fuse's):
    # `--disable-rule`, and what blame sets aside when a rule's result fails verification.
    disable_rules: tuple[str, ...] = ()
    simplifier: str | None = None
    fold_limit_bytes: int = DEFAULT_FOLD_LIMIT_BYTES
    prove: bool = True
    verify: bool = True
    inputs: Path | None = None
    seed: int = 0
    # Sizes to draw verification inputs at, per input, without changing the model's axes (a text
    # recognizer declares its height dynamic and takes only 48): a corpus's hints give them.
    sample_shapes: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode is not None:  # an API caller's "partial"
            self.mode = LegalizeMode(self.mode)

    def effective_mode(self, target: Target) -> LegalizeMode:
        """The asked mode, else the target's; a target that partitions writes one legalized file
        in partial mode (`build` then cuts it into segments)."""
        mode = LegalizeMode(self.mode if self.mode is not None else target.mode)
        return LegalizeMode.PARTIAL if mode == LegalizeMode.PARTITION else mode


@dataclass
class QuantizeOptions:
    """`--precision int8`: the data it is calibrated and judged on, and the accuracy budget."""

    calibration: Path | None = None  # a folder of .npz samples (keys = input names)
    validation: Path | None = None  # None: a fifth of the calibration samples, set apart
    max_drop: float = 0.01  # the metric may fall this much below the fp32 model's
    metric: str = "auto"  # auto | top1 | cosine | sqnr | module:function
    # Also hold every step of the guard to the budget `--precision auto` judges int8 engines by: every
    # float output on every validation sample within int8's verification tolerances and at least this
    # cosine (0: the metric alone, as --precision int8 asks)
    min_cosine: float = 0.0
    allow_fallback: bool = False  # a target without int8 builds its fallback precision instead
    require_int8: bool = False  # fail the build where the guard keeps float (not within budget, not faster)
    # The API's iterables of samples ({input name: array}), in place of the folders
    samples: Iterable[Mapping[str, Any]] | None = None
    validation_samples: Iterable[Mapping[str, Any]] | None = None


@dataclass
class BuildOptions:
    """What `deploycc build` takes on top of the legalization options."""

    legalize: LegalizeOptions = field(default_factory=LegalizeOptions)
    precision: Precision | None = None  # None: chosen (choose_precision), else the target's default
    # With no precision given (`--precision auto`, the default): the fastest of the target's
    # precisions within the accuracy budget, measured where the target runs here, from its data where
    # it runs on its device (pipeline/precision_search.py). False: the target's default precision
    choose_precision: bool = True
    artifact_format: str = "onnx"  # ORT only: "onnx" (optimized ONNX) or "ort" (ORT format)
    fail_on_fallback: bool = False
    batch_range: tuple[int, int, int] | None = None  # --dynamic-batch MIN:OPT:MAX
    shape_ranges: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)
    dla_core: int | None = None
    gpu_fallback: bool = True
    workspace_mb: int | None = None
    bench: bool = True
    bench_iterations: int = 50
    force: bool = False
    engine_only: bool = False
    # TensorRT: write the device bundle even where TensorRT is importable (the audit's Ray
    # executor builds on the board, not on whichever node legalized the model).
    bundle_only: bool = False
    quantize: QuantizeOptions = field(default_factory=QuantizeOptions)
    # fp16/bf16: find on the host what half breaks and keep just those layers in fp32
    half_analysis: bool = True
    # A safety step skipped without being asked (the fp16 analysis, the INT8 guard, verification)
    # fails the build (exit 1) instead of being only a warning and the report's `skipped_steps`
    strict: bool = False

    @property
    def searches_precision(self) -> bool:
        """Whether the build chooses its precision: none given, and choosing not turned off."""
        return self.choose_precision and self.precision is None

    def effective_precision(self, target: Target) -> Precision:
        """The asked precision, else the target's default; a name that is no precision is refused."""
        chosen = self.precision or target.precision.default
        try:
            return Precision(chosen)
        except ValueError:
            raise OptionError(f"{target.name} does not support precision {chosen}",
                              hint=f"supported: {', '.join(target.precision.supported)}") from None
