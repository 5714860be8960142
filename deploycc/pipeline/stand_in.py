"""A model quantized here for an engine the board builds (int4 weight-only's Q/DQ model for TensorRT
10): ONNX Runtime CPU runs it in the engine's place against the original, on the inputs the build
drew, so that no bundle leaves with weights that no longer compute the model. The board judges its
engine; this judges what the engine is built from (int8 is judged so inside its quantize stage,
a decoder by its greedy generation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.pipeline.context import BuildContext

if TYPE_CHECKING:
    from deploycc.records.verification import Verification


def judged_on_host(context: BuildContext) -> Verification:
    """The quantized model on ONNX Runtime CPU against the original, at the build's precision's
    tolerances; raises RunError where either refuses the drawn inputs."""
    from deploycc.verify.verification import compare_all, reference_outputs

    assert context.engine_model is not None
    drawn = context.inputs()
    expected, _ = reference_outputs(context.source, drawn.original_feeds)
    actual, _ = reference_outputs(context.engine_model, drawn.feeds)
    stand_in = f"onnxruntime-cpu standing in for {context.backend.kind}"
    return compare_all(expected, actual, reference=stand_in, inputs=drawn.described,
                       precision=context.precision, original=(context.source, drawn.original_feeds))


def stand_in_note(verification: Verification) -> str:
    """What the note says of a stand-in's judgement that passed."""
    from deploycc.verify.compare import judged_as

    worst = min(verification.outputs, key=lambda output: output.cosine_similarity, default=None)
    closest = f" (lowest cosine {worst.cosine_similarity:.4f}, output '{worst.name}')" if worst else ""
    judged = judged_as(verification.precision)
    as_of = f" ({judged}'s, which judge {verification.precision})" if judged != verification.precision else ""
    return (f"the {verification.precision} model the device builds from ran on {verification.reference} "
            f"within its tolerances{as_of}{closest}")
