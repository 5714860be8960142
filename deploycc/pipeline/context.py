"""The build context: what every build stage reads and writes, in one object that lives for one
build. The stages (pipeline/stages.py) hand over through it, not through files read back: the
inputs verification draws are drawn here once per set of sizes, with the original's outputs on
them, and every later stage (the half-precision analysis, the engine's verification, the device's
reference data, the inputs kept for a reproduction) takes the same arrays.

The folder it builds into is the staging folder of the output directory; the model files the
backend builds from are written there (the artifact is files), external data beside them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.results import SkippedStep
from deploycc.taxonomy import BuildStatus, Failure, Precision, Stage

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

    from deploycc.backends.base import Artifact, Backend, BuildRequest, Runner
    from deploycc.bench.latency import LatencyStats
    from deploycc.fp16 import HalfPrecisionReport
    from deploycc.graph.decoder import DecoderSignature
    from deploycc.options import BuildOptions
    from deploycc.pipeline.outcome import Clock
    from deploycc.pipeline.placement import PlacementPlan
    from deploycc.quantize import QuantizeReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.precision import PrecisionChoice
    from deploycc.records.shapes import ShapePlan
    from deploycc.targets.schema import Target
    from deploycc.verify.verification import Verification

LEGALIZED = "model.legalized.onnx"
VERIFY_INPUTS = "verify-inputs.npz"
# How a report names the inputs of an int8 build's verification: not the staging path, which
# would change every build's hash
SAMPLE_DESCRIBED = f"{VERIFY_INPUTS} (the first validation sample)"


def verifying_on_sample(options: BuildOptions, sample: dict[str, Any], path: Path) -> BuildOptions:
    """`options` whose verification feeds `sample` (written to `path`): an int8 model is calibrated
    for real data, and random inputs outside its ranges would judge the clipping, not the model."""
    import dataclasses

    import numpy as np

    np.savez(path, **sample)
    return dataclasses.replace(options, legalize=dataclasses.replace(options.legalize, inputs=path))


@dataclass
class DrawnInputs:
    """One set of verification inputs: for the legalized graph, the same laid out as the original
    takes them, and how a report describes them."""

    feeds: dict[str, np.ndarray]
    original_feeds: dict[str, np.ndarray]
    described: str


@dataclass
class BuildContext:
    """One build: what it was asked, and what each stage has made of it so far."""

    source: Path  # the model as the user gave it (never written)
    target: Target
    options: BuildOptions
    staging: Path  # the output directory's staging folder
    backend: Backend
    precision: Precision
    clock: Clock
    notes: list[str]
    samples: Any = None  # int8: the calibration and validation samples (quantize.load_samples)
    shapes: ShapePlan | None = None
    legalized: LegalizeReport | None = None
    engine_model: Path | None = None  # what the backend builds from (int8: the quantized model)
    quantization: QuantizeReport | None = None
    half: HalfPrecisionReport | None = None
    precision_choice: PrecisionChoice | None = None  # --precision auto
    placement: PlacementPlan | None = None
    request: BuildRequest | None = None
    artifact: Artifact | None = None
    engine: Runner | None = None  # the loaded artifact, from verify to bench
    verification: Verification | None = None
    benchmark: LatencyStats | None = None
    feeds: dict[str, np.ndarray] | None = None  # the inputs the engine was verified on
    # how it ended: the stage it reached, and what it came to there
    status: BuildStatus = BuildStatus.FAILED
    stage: Stage = Stage.LEGALIZE
    message: str = ""
    failure_category: Failure | None = None
    original_on_backend: bool | None = None  # BuildReport.original_on_backend
    skipped: list[SkippedStep] = field(default_factory=list)  # BuildReport.skipped_steps
    next_step: str | None = None  # what to do next, where a stage knows better than the outcome's table
    build_hash: str = ""  # the manifest's
    # a front end's proof of the result against the model it came from (torch against the engine):
    # the verification and what it ran
    source_proof: tuple[Verification, str] | None = None
    stopped: bool = False  # a stage ended the build: the later ones do not run
    # Where the legalized model is, when not in this context's own staging folder (a precision
    # candidate reads its build's: onnx refuses external data that is linked, hard or symbolic)
    legalized_file: Path | None = None
    # The legalized model as IR, for every stage that reads its graph (never changes it): read once,
    # after legalization wrote it, as io.peek holds it for every reader of that file (external
    # weights stay in their file until read; a file that holds more weights than peek keeps is read
    # again when asked, not held for the build). The engines and quantizers, which take files, get
    # the file.
    _model: tuple[Path, ir.Model] | None = None
    _drawn: dict[str, DrawnInputs] = field(default_factory=dict)
    # what a build computes once for all its precision candidates (the original's greedy generation)
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def legalized_path(self) -> Path:
        return self.legalized_file or self.staging / LEGALIZED

    @property
    def model(self) -> ir.Model:
        """The legalized model (the model as given, for a build that does not legalize)."""
        from deploycc import io

        legalized = self.legalized is not None and self.legalized_path.exists()
        path = self.legalized_path if legalized else self.source
        if self._model is not None and self._model[0] == path:
            return self._model[1]
        model = io.peek(path).model
        if path.stat().st_size <= io.PEEK_KEPT_BYTES:
            self._model = (path, model)
        return model

    @functools.cached_property
    def decoder(self) -> DecoderSignature | None:
        """The legalized model's KV-cache decoder signature (graph/decoder.py), None where it is none
        (or not legalized yet)."""
        from deploycc.graph.decoder import decoder_signature

        if self.legalized is None or not self.legalized_path.exists():
            return None
        return decoder_signature(self.model.graph)

    def stop(self, status: BuildStatus | None = None, stage: Stage | None = None,
             message: str | None = None) -> None:
        """End the build here, as it stands or with the outcome given."""
        self.status = status if status is not None else self.status
        self.stage = stage if stage is not None else self.stage
        self.message = message if message is not None else self.message
        self.stopped = True

    def inputs(self, shapes: dict[str, list[int]] | None = None) -> DrawnInputs:
        """The verification inputs at `shapes` (None: at the sizes legalization's verification drew,
        else the typical ones), drawn once per set of sizes: the one place a build draws them. Image
        inputs hold what legalization's verification drew them as; integer inputs the values the
        original reads."""
        from deploycc.verify.verification import drawn_content, feeds_for

        if self.legalized is None:
            return self._generated()
        drawn = self.legalized.verification
        shapes = shapes or (drawn.shapes if drawn is not None else None) or None
        key = json.dumps(shapes, sort_keys=True)
        if key not in self._drawn:
            feeds, original_feeds, described = feeds_for(
                self.model.graph, self.options.legalize, self.legalized.fed_layouts, shapes, self.source,
                drawn_content(drawn))
            self._drawn[key] = DrawnInputs(feeds, original_feeds, self.described(described))
        return self._drawn[key]

    def _generated(self) -> DrawnInputs:
        """An engine-only build (no legalization): inputs generated at the model's declared sizes."""
        from deploycc.verify.inputs import generate

        if "generated" not in self._drawn:
            graph = self.model.graph
            feeds = generate([v for v in graph.inputs if v.name not in graph.initializers], seed=0)
            self._drawn["generated"] = DrawnInputs(feeds, feeds, "generated (seed 0)")
        return self._drawn["generated"]

    def described(self, described: str) -> str:
        """A description of inputs without the staging path (an int8 build verifies on a sample
        written there)."""
        return SAMPLE_DESCRIBED if described == str(self.staging / VERIFY_INPUTS) else described

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
