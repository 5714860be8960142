"""The build's quantize stages, one per way a model's numbers are made narrower before the engine
build: int8 as the target's recipe makes it (with calibration data), int8 without it (dynamic), and
weight-only (int4, int8-weights). Each reads the legalized model and sets the model the backend
builds from (BuildContext.engine_model), or ends the build at quantize saying why."""

from __future__ import annotations

import dataclasses

from deploycc.io.files import disk_full
from deploycc.pipeline.context import BuildContext
from deploycc.pipeline.precision_search import MIN_COSINE
from deploycc.results import SkippedStep
from deploycc.taxonomy import WEIGHT_ONLY_BITS, Precision, SafetyStep, Stage


def quantize_stage(context: BuildContext) -> None:
    """INT8 as the target's recipe makes it, kept where the accuracy guard allows; the backend
    builds from the quantized model (or from the float one and the scales, in `prepare`)."""
    from deploycc.quantize import quantize_for_target

    options = context.options.quantize
    if context.options.searches_precision:  # a candidate of the search: judged by the budget it is held to
        options = dataclasses.replace(options, min_cosine=MIN_COSINE)
    quantized = context.quantization = quantize_for_target(context.legalized_path, context.target, options,
                                                           context.samples, context.staging)
    if options.require_int8 and quantized.decision != Precision.INT8:
        context.stop(stage=Stage.QUANTIZE, message=f"--require-int8: the guard kept {quantized.decision}: "
                                                   f"{quantized.reason}")
        return
    if quantized.decision != Precision.INT8:
        context.notes.append(f"built in {quantized.decision}: {quantized.reason}")
        context.precision = quantized.decision
        return
    context.engine_model, context.precision = context.staging / quantized.model, Precision.INT8
    if quantized.unjudged:
        context.skipped.append(SkippedStep(SafetyStep.INT8_GUARD, quantized.unjudged))


def dynamic_int8_stage(context: BuildContext) -> None:
    """INT8 without calibration data (a `--precision auto` candidate where the backend's recipe
    offers it): the constant MatMul weights in int8, the activations quantized by the engine."""
    from deploycc.quantize.dynamic import quantize_dynamically

    context.stage = Stage.QUANTIZE
    try:
        quantized, note = quantize_dynamically(context.legalized_path, context.staging)
    except Exception as error:  # the quantizer's own failure (a crash in its process): the build's, said
        if disk_full(error):  # the machine's: the CLI's one line, exit 2
            raise
        context.stop(stage=Stage.QUANTIZE, message=f"int8 dynamic failed: {type(error).__name__}: "
                                                   f"{str(error).strip()[:200]}")
        return
    context.engine_model = quantized
    context.notes.append(note)


def weight_only_stage(context: BuildContext) -> None:
    """Weight-only quantization (`--precision int4`, `int8-weights`): the constant MatMul weights in
    4 or 8 bits, the activations in float; a model without such a weight is refused (it would
    change nothing)."""
    from deploycc.quantize.weights import NoWeightsToQuantize, quantize_weights

    context.stage = Stage.QUANTIZE
    quantizer, precision = context.backend.stages.weight_only, context.precision
    if quantizer is None:  # the target's data offers it, its backend has no recipe: said, not built as float
        context.stop(stage=Stage.QUANTIZE, message=f"{context.backend.kind} has no weight-only recipe "
                                                   f"for {precision}")
        return
    try:
        context.engine_model, note = quantize_weights(quantizer, context.legalized_path, context.staging,
                                                      WEIGHT_ONLY_BITS[precision])
    except NoWeightsToQuantize as error:
        context.stop(stage=Stage.QUANTIZE, message=str(error))
        return
    except Exception as error:  # the quantizer's own failure on this model: the build's, said
        if disk_full(error):  # the machine's: the CLI's one line, exit 2
            raise
        context.stop(stage=Stage.QUANTIZE, message=f"{precision} weight-only failed ({quantizer}): "
                                                   f"{type(error).__name__}: {str(error).strip()[:200]}")
        return
    context.notes.append(note)
