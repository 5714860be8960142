"""The stages of `deploycc build`, in order: legalize, quantize (int8 or weight-only, in
quantize_stages.py), the half-precision analysis (fp16/bf16), the engine build, then either the
device's reference data (an engine built on the board) or verification and the benchmark here.
Each reads and writes the build context (pipeline/context.py); the runner (pipeline/stages.py)
times them and stops at the first that ends the build."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from deploycc.backends.base import BackendError, BackendUnavailable, BuildRequest
from deploycc.errors import OptionError
from deploycc.pipeline.context import BuildContext, DrawnInputs
from deploycc.pipeline.generation import (
    candidate_run,
    engine_runs_here,
    reference_generation,
    release_large_engine,
)
from deploycc.pipeline.outcome import RUN_REFUSED
from deploycc.pipeline.quantize_stages import dynamic_int8_stage, quantize_stage, weight_only_stage
from deploycc.pipeline.stages import BuildStage
from deploycc.results import SkippedStep
from deploycc.taxonomy import (
    QUANTIZED,
    WEIGHT_ONLY_BITS,
    BuildStatus,
    Failed,
    Failure,
    Precision,
    SafetyStep,
    Stage,
)

if TYPE_CHECKING:
    from pathlib import Path

    from deploycc.quantize import QuantizeReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.verification import GenerationCheck, Verification

HALF = (Precision.FP16, Precision.BF16)


def legalize_stage(context: BuildContext) -> None:
    from deploycc.pipeline.legalize import legalize

    legalized = context.legalized = legalize(context.source, context.target, context.options.legalize,
                                             output=context.legalized_path)
    context.stage, context.message = Stage.LEGALIZE, legalized.summary
    if legalized.verification is not None and legalized.verification.needs_inputs:
        context.status, context.stage = BuildStatus.NEEDS_INPUTS, Stage.VERIFY
    context.engine_model = context.legalized_path
    if not legalized.success:
        context.stop()


def precision_search_stage(context: BuildContext) -> None:
    """--precision auto: the precision the later stages build in, chosen by building and timing the
    candidates (pipeline/precision_search.py)."""
    from deploycc.pipeline.precision_search import CANDIDATE_STAGES, choose_precision

    choose_precision(context, [stage for stage in BUILD_STAGES if stage.name in CANDIDATE_STAGES])


def half_analysis_stage(context: BuildContext) -> None:
    """What half precision breaks in the legalized model, on the inputs verification drew, and the
    layers to keep in fp32; a skipped step, said, where ORT cannot run the model on them.
    The engines find a kept layer by its name: legalization named every node it wrote."""
    from deploycc.budget import collect_and_return_memory
    from deploycc.fp16 import analyze_half
    from deploycc.verify.runner import RunError

    assert context.legalized is not None
    precision = context.precision
    try:
        drawn = context.inputs()
        context.half = analyze_half(context.legalized_path, drawn.feeds, precision, inputs=drawn.described,
                                    tolerance=verification_precision(context.legalized, precision))
        return
    except (RunError, OptionError) as error:
        why = str(error)
    except Exception as error:  # the analysis is advice: the build goes on in plain {precision}
        why = f"{type(error).__name__}: {str(error).strip()[:200]}"
    finally:  # its sessions sit in reference cycles, its pages with glibc: gigabytes past its end
        collect_and_return_memory()
    context.skipped.append(SkippedStep(SafetyStep.half_analysis(precision),
                                       f"{why}; every layer builds in {precision}"))


def half_declined_stage(context: BuildContext) -> None:
    context.skipped.append(SkippedStep(SafetyStep.half_analysis(context.precision),
                                       f"--no-fp16-analysis: every layer builds in {context.precision}",
                                       asked=True))


def engine_stage(context: BuildContext) -> None:
    """The backend's engine (or the bundle its device builds one from), from the model the earlier
    stages left, with the placement plan's bound for a fragment's launch and the layers the half
    analysis keeps."""
    from deploycc.pipeline.placement import plan_placement

    context.stage = Stage.BUILD
    options, quantized = context.options, context.quantization
    context.placement = placement = plan_placement(context.legalized_path, context.target, context.notes)
    request = context.request = BuildRequest(
        model=context.engine_model or context.legalized_path, outdir=context.staging, target=context.target,
        precision=context.precision, fail_on_fallback=options.fail_on_fallback,
        calibration_cache=_calibration_cache(context, quantized),
        fp32_model=context.legalized_path if quantized is not None else None,
        backend_options=context.backend.backend_options(options),
        fp32_layers=tuple(context.half.kept) if context.half is not None else (),
        min_segment_nodes=placement.min_segment_nodes)
    prepare = context.backend.stages.prepare  # its own completion (TensorRT: profiles, the DLA's model)
    if prepare is not None:
        prepare(request, options)
    with engine_errors(context):
        context.artifact = context.backend.build(request)


def _calibration_cache(context: BuildContext, quantized: QuantizeReport | None) -> Path | None:
    if quantized is None or not quantized.calibration_cache:
        return None
    return context.staging / quantized.calibration_cache


def device_reference_stage(context: BuildContext) -> None:
    """An engine built on the device: the inputs verification drew and the original's outputs on
    them go into the bundle, for the board to judge its engine by; a model ORT cannot run on them
    leaves the bundle without (a note, and a skipped verification: the board cannot judge it)."""
    from deploycc.device.bundle import DeviceReference
    from deploycc.pipeline.placement import PlacementPlan, write_prediction
    from deploycc.verify.runner import RunError
    from deploycc.verify.verification import reference_outputs

    artifact = context.artifact
    assert artifact is not None
    context.stop(BuildStatus.PENDING_ON_DEVICE, Stage.DONE, artifact.notes[0])
    write_prediction(context.placement or PlacementPlan(), context.staging,
                     artifact.device_folder, context.notes)
    with engine_errors(context):
        drawn = context.inputs()
        context.feeds = drawn.feeds
        try:
            expected, _ = reference_outputs(context.source, drawn.original_feeds)
        except RunError as error:
            artifact.notes.append(f"no reference data for the device: {error}")
            context.skipped.append(SkippedStep(
                SafetyStep.VERIFICATION, f"no reference data for the device ({error}): the board builds and "
                "times the engine but cannot verify it"))
            return
        add_reference = context.backend.stages.add_reference
        if add_reference is not None:  # a decoder's signature too: the board times its generation
            add_reference(artifact, context.staging, DeviceReference(
                drawn.feeds, expected, context.precision, drawn.described, context.decoder))


def stand_in_stage(context: BuildContext) -> None:
    """A weight-only model the device builds from, judged on ONNX Runtime CPU in the engine's place
    (pipeline/stand_in.py): a bundle whose weights no longer compute the model is not sent."""
    from deploycc.pipeline.stand_in import judged_on_host, stand_in_note

    with engine_errors(context):
        verification = judged_on_host(context)
        if verification.needs_inputs:
            context.stop(BuildStatus.NEEDS_INPUTS, message=verification.problem)
        elif not verification.passed:
            context.stop(BuildStatus.FAILED, Stage.VERIFY,
                         f"verification failed on {verification.reference}: {verification.problem}")
        else:
            context.notes.append(stand_in_note(verification))


def verify_stage(context: BuildContext) -> None:
    """The engine against the original on the inputs legalization verified on; when the engine
    refuses them (OpenVINO's pooling refuses a width the original takes), the next sizes both take."""
    from deploycc.verify.verification import compare_all, within_backend_on_original

    assert context.legalized is not None and context.artifact is not None and context.request is not None
    context.stage = Stage.VERIFY
    with engine_errors(context):
        context.engine = context.backend.load(context.artifact, context.staging, context.request)
        drawn, actual, expected, reference = _first_sizes_both_run(context)
        # judging a mismatch may load the original here, and the backend build the export: not both
        # beside the engine
        release_large_engine(context)
        verification = compare_all(expected, actual, reference=reference, inputs=drawn.described,
                                   precision=verification_precision(context.legalized, context.precision),
                                   original=(context.source, drawn.original_feeds))
        if not verification.passed and not verification.needs_inputs:
            on_original = backend_on_original(context, drawn.original_feeds)
            if on_original is not None:
                within_backend_on_original(verification, expected, on_original)
        verification.shapes = {name: list(array.shape) for name, array in drawn.feeds.items()}
        context.verification, context.feeds = verification, drawn.feeds
        if verification.passed:
            context.status, context.stage, context.message = BuildStatus.VERIFIED, Stage.DONE, "verified"
        elif _judged_by_generation(context) and not verification.needs_inputs:
            verification.forward_problem = verification.problem  # the generation stage decides
            context.status, context.stage, context.message = BuildStatus.VERIFIED, Stage.DONE, "verified"
        elif verification.needs_inputs:
            context.stop(BuildStatus.NEEDS_INPUTS, message=verification.problem)
        else:
            context.stop(message=f"verification failed: {verification.problem}")


def _judged_by_generation(context: BuildContext) -> bool:
    """A quantized decoder (int8, int4) is judged by its greedy generation, not by one forward on
    drawn token ids element by element (verify/generation.py, `by_tokens`)."""
    return context.decoder is not None and context.precision in QUANTIZED


def generation_stage(context: BuildContext) -> None:
    """A decoder with a KV cache: a greedy generation, the candidate against the original on ONNX
    Runtime CPU (verify/generation.py). The candidate is the engine where it runs here, else (an
    engine built on the device) the model the device builds it from. A decoder whose original cannot
    generate from an empty cache says so (a skipped step), as does one with no inputs to start from."""
    assert context.legalized is not None
    verification = context.verification or context.legalized.verification
    if context.decoder is None or verification is None or \
            not (verification.passed or verification.forward_problem):
        return
    with engine_errors(context):  # the engine, loaded again, fails: the build's failure, as in bench
        check = _checked_generation(context, verification)
        if check is None:
            return
        verification.generation = check
        if not check.passed:
            verification.passed, verification.problem = False, check.problem
            context.stop(BuildStatus.FAILED, Stage.VERIFY, f"verification failed: {check.problem}")
        elif verification.forward_problem:
            verification.passed, verification.problem = True, ""


def _checked_generation(context: BuildContext, verification: Verification) -> GenerationCheck | None:
    """The generation's check; None where it could not run, said: a skipped step, or (a quantized
    decoder, which nothing else judges) the build's failure. A backend's error goes to the caller."""
    from deploycc.verify.generation import check_generation

    signature, drawn = context.decoder, context.inputs()
    assert signature is not None
    ran_on = "the engine" if engine_runs_here(context) else "the device's model on ONNX Runtime CPU"
    # a quantized model is judged at its precision (the device's int4 model beside the legalized
    # model's fp32 verification)
    precision = context.precision if context.precision in QUANTIZED else verification.precision
    try:
        reference = reference_generation(context, signature, drawn.original_feeds)
        with candidate_run(context) as candidate:
            return check_generation(reference, candidate, signature, original_feeds=drawn.original_feeds,
                                    candidate_feeds=drawn.feeds, precision=precision,
                                    ran_on=ran_on, by_tokens=_judged_by_generation(context))
    except (BackendError, BackendUnavailable):
        raise
    except Exception as error:  # what either run raised on an empty cache, a token, a length
        why = f"greedy generation not checked ({ran_on}): {error}".splitlines()[0]
        if verification.forward_problem:
            context.stop(BuildStatus.FAILED, Stage.VERIFY,
                         f"verification failed: {verification.forward_problem}; {why}")
        else:
            context.skipped.append(SkippedStep(SafetyStep.VERIFICATION, why))
        return None


def _first_sizes_both_run(context: BuildContext) -> tuple[DrawnInputs, Any, Any, str]:
    """The first set of sizes, from the ones legalization verified at, that the engine runs and the
    original runs too: (the inputs, the engine's outputs, the original's, the reference runtime)."""
    from deploycc import io
    from deploycc.verify.runner import RunError
    from deploycc.verify.verification import attempts_for, drawn_shapes, reference_outputs

    assert context.legalized is not None and context.engine is not None
    drawn = context.legalized.verification
    candidates: list[dict[str, list[int]] | None] = [None]  # the sizes legalization verified at
    if context.options.legalize.inputs is None:
        model = io.peek(context.legalized_path).model  # read only
        plain = dataclasses.replace(context.options.legalize, sample_shapes={})
        first = (drawn.attempt if drawn else 0) + 1
        later = range(first, attempts_for(model.graph, plain, model.metadata_props))
        candidates += [drawn_shapes(model.graph, plain, k, model.metadata_props) for k in later]
    refused: BackendError | None = None
    for shapes in candidates:
        inputs = context.inputs(shapes)
        try:
            actual = context.engine.run(inputs.feeds)
        except BackendError as error:
            if error.stage != Failed.RUN:
                raise
            refused = refused or error
            continue
        try:
            expected, reference = reference_outputs(context.source, inputs.original_feeds)
        except RunError as error:
            if error.stage != Failed.RUN or shapes is candidates[0]:
                raise
            continue  # the engine's fallback size is one the original refuses
        return inputs, actual, expected, reference
    assert refused is not None
    raise refused


def bench_stage(context: BuildContext) -> None:
    from deploycc.bench.latency import measure

    assert context.artifact is not None and context.request is not None and context.feeds is not None
    with engine_errors(context):
        if context.engine is None:  # verified elsewhere (the precision search's chosen candidate)
            context.engine = context.backend.load(context.artifact, context.staging, context.request)
        context.benchmark = measure(context.engine, context.feeds,
                                    iterations=context.options.bench_iterations)


def _unbuilt(context: BuildContext) -> bool:
    """No engine yet: the stages up to the engine's verification have not run (the precision
    search hands over its chosen candidate's engine, verified, and they do not run again)."""
    return context.artifact is None


def _host_decoder(context: BuildContext) -> bool:
    """A decoder whose engine verified here and whose generation is not checked yet (a precision
    candidate adopted as the build's was checked as a candidate)."""
    verification = context.verification
    return context.decoder is not None and context.status == BuildStatus.VERIFIED and \
        verification is not None and verification.generation is None


def _device_built(context: BuildContext) -> bool:
    return context.artifact is not None and context.artifact.pending_on_device


def _device_decoder(context: BuildContext) -> bool:
    """A decoder whose engine is built on the device: its generation is checked here on its model."""
    return _device_built(context) and context.decoder is not None


BUILD_STAGES: tuple[BuildStage[BuildContext], ...] = (
    BuildStage("legalize", legalize_stage),
    BuildStage("precision", precision_search_stage, wanted=lambda c: c.options.searches_precision),
    BuildStage("quantize", quantize_stage,
               wanted=lambda c: _unbuilt(c) and c.samples is not None and c.precision == Precision.INT8),
    BuildStage("int8-dynamic", dynamic_int8_stage,
               wanted=lambda c: _unbuilt(c) and c.samples is None and c.precision == Precision.INT8),
    BuildStage("weight-only", weight_only_stage, label=lambda c: c.precision.value,
               wanted=lambda c: _unbuilt(c) and c.precision in WEIGHT_ONLY_BITS),
    BuildStage("half", half_analysis_stage, label=lambda c: c.precision.value,
               wanted=lambda c: _unbuilt(c) and c.precision in HALF and c.options.half_analysis),
    BuildStage("half-declined", half_declined_stage, label=lambda c: None,
               wanted=lambda c: _unbuilt(c) and c.precision in HALF and not c.options.half_analysis),
    BuildStage("build", engine_stage, wanted=_unbuilt),
    BuildStage("generate-on-host", generation_stage, label=lambda c: "generate", wanted=_device_decoder),
    BuildStage("stand-in", stand_in_stage, label=lambda c: "verify",
               wanted=lambda c: _device_built(c) and c.decoder is None and c.precision in WEIGHT_ONLY_BITS),
    BuildStage("device-reference", device_reference_stage, label=lambda c: None,
               wanted=_device_built),
    BuildStage("verify", verify_stage, wanted=lambda c: c.verification is None),
    BuildStage("generate", generation_stage, wanted=_host_decoder),
    BuildStage("bench", bench_stage, wanted=lambda c: c.options.bench and c.status == BuildStatus.VERIFIED),
)


@contextlib.contextmanager
def engine_errors(context: BuildContext) -> Iterator[None]:
    """A backend's refusal or failure (building, loading or running the engine) ends the build as
    a failure at its stage, with whether the backend runs the model as exported (True is worse than
    doing nothing: the runner's policy builds that one instead); a reference run the original
    fails ends it as needing inputs (it refused them) or failed."""
    from deploycc.verify.runner import RunError

    try:
        yield
    except (BackendError, BackendUnavailable) as error:
        if context.status == BuildStatus.VERIFIED:  # the bench's run failed: the build did not end well
            context.status, context.stage = BuildStatus.FAILED, Stage.VERIFY
        context.message = str(error)
        context.failure_category = getattr(error, "category", None)
        if getattr(error, "stage", None) == Failed.LOAD:  # the engine built but does not load
            context.stage = Stage.BUILD
        elif getattr(error, "stage", None) == Failed.RUN:  # it loaded and refused the inputs: no mismatch
            context.failure_category = context.failure_category or Failure.BACKEND_ERROR
            context.message = f"{RUN_REFUSED}: {error}"
        context.close()
        context.original_on_backend = original_runs_on_backend(context)
        context.stop()
    except RunError as error:  # the reference run, when legalize did not verify
        context.stop(BuildStatus.NEEDS_INPUTS if error.stage == Failed.RUN else BuildStatus.FAILED,
                     message=str(error))


def _asks_backend_on_original(context: BuildContext) -> bool:
    """Whether the backend's result on the model as exported says anything here: not for a
    bundle-only build (nothing runs here), nor for int8 builds, whose float original says nothing
    of the quantized engine's rounding."""
    request = context.request
    return request is not None and not (request.precision in QUANTIZED or request.fp32_model is not None
                                        or context.options.bundle_only)


def backend_on_original(context: BuildContext, feeds: dict[str, Any]) -> dict[str, Any] | None:
    """The backend's own outputs for the model as exported, where it builds and runs it here (what
    a user gets without deploycc); None where it does not (an op it lacks, a bundle-only target), and
    for int8 builds."""
    request = context.request
    if request is None or not _asks_backend_on_original(context):
        return None
    folder = context.staging / ".as-exported-engine"
    try:
        original = dataclasses.replace(request, model=context.source, outdir=folder)
        folder.mkdir(exist_ok=True)
        runner = context.backend.load(context.backend.build(original), folder, original)
        try:
            return runner.run(feeds)
        finally:
            runner.close()
    except Exception:  # whatever the backend raises of the original: no comparison, as before
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def original_runs_on_backend(context: BuildContext) -> bool | None:
    """Whether the backend builds and runs the model as exported, on the inputs verification drew,
    asked where it failed on deploycc's model: True is worse than doing nothing. None where it cannot
    be asked here (_asks_backend_on_original) or the inputs cannot be drawn."""
    if not _asks_backend_on_original(context):
        return None
    try:
        original_feeds = context.inputs().original_feeds
    except Exception:  # no inputs to ask with: not asked
        return None
    return backend_on_original(context, original_feeds) is not None


def verification_precision(legalized: LegalizeReport, precision: Precision) -> Precision:
    """The precision whose tolerances judge a model built in `precision` (a model that computes in
    float16 as exported is judged as one)."""
    from pathlib import Path

    from deploycc.pipeline.manager import source_ops
    from deploycc.verify.verification import computes_in_float16, tolerance_precision

    return tolerance_precision(source_ops(legalized.passes), precision,
                               float16=computes_in_float16(Path(legalized.source)))
