"""torch against what a torch model's build made: the front end's last build stage. The engine
(or, where it is built on the device or refuses the example's sizes, the legalized model on ONNX
Runtime) on the example inputs, or for a causal language model its greedy generation (decoders.py),
kept in the build context; a mismatch fails the build, so the other exporter is tried (a causal
language model has one: the user is told what is theirs to change)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.frontend import decoders
from deploycc.frontend.causal_lm import is_causal_lm
from deploycc.frontend.proof import final_proof
from deploycc.records.build import SUCCEEDED
from deploycc.results import SkippedStep
from deploycc.taxonomy import BuildStatus, Precision, SafetyStep, Stage

if TYPE_CHECKING:
    from deploycc.frontend.sources import TorchSource
    from deploycc.pipeline.context import BuildContext
    from deploycc.verify.verification import Verification


def prove_build(context: BuildContext, source: TorchSource, expected: list[Any]) -> None:
    """The build's last stage: torch against the engine it built (or, where that is built on the
    device or refuses the example's sizes, the legalized model on ONNX Runtime) on the example
    inputs, kept in `context.source_proof`. A mismatch fails the build, so the other exporter is tried."""
    from deploycc import io

    legalized = context.legalized_path
    if context.status not in SUCCEEDED or not legalized.is_file():
        return
    graph = io.load(legalized, check=False).model.graph
    final: Verification | None = None
    if context.status == BuildStatus.VERIFIED and context.engine is not None:
        try:
            final = _final_proof(context, legalized, graph, source, expected)
            against = "the engine"
        except Exception as error:  # the engine refuses the example's sizes: judge its ONNX instead
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
            context.skipped.append(SkippedStep(
                SafetyStep.VERIFICATION, f"torch against the engine did not run ({why}); torch was compared "
                "with the legalized model on ONNX Runtime CPU instead"))
    if final is None:
        final = decoders.prove_on_ort(legalized, expected[0], decoders.GENERATED, graph) \
            if is_causal_lm(source.module) else _prove_on_ort(legalized, graph, source, expected)
        against = "the legalized model on ONNX Runtime CPU" + (
            " (the engine is built on the device)" if context.status == BuildStatus.PENDING_ON_DEVICE else "")
    context.source_proof = (final, against)
    if not _proven_final(final):
        context.status, context.stage = BuildStatus.FAILED, Stage.VERIFY
        context.message = f"torch against {against}: {final.problem}"
        context.next_step = _next_step(source, context.precision)


def _next_step(source: TorchSource, precision: Precision) -> str:
    """What a user can do once torch and the build disagree: a causal language model has one
    exporter (Optimum's, already proven against torch before the build), so only the precision is
    theirs to change."""
    if not is_causal_lm(source.module):
        return "try the other exporter (--exporter), or report the model"
    if precision != Precision.FP32:
        return "pin --precision fp32, or report the model"
    return "report the model (Optimum's export, proven against torch, changed in the build)"


def _final_proof(context: BuildContext, legalized: Path, graph: Any, source: TorchSource,
                 expected: list[Any]) -> Verification:
    """torch against the engine: on the example inputs, or a causal language model's greedy
    generation (at the build's precision's bar)."""
    assert context.engine is not None
    if is_causal_lm(source.module):
        return decoders.prove_generation(context.engine.run, graph, expected[0], decoders.GENERATED,
                                         context.precision, "the engine")
    return final_proof(context.engine.run, legalized, graph, source, context.precision, expected)


def _prove_on_ort(legalized: Path, graph: Any, source: TorchSource, expected: list[Any]) -> Verification:
    from deploycc.verify.runner import run_session, session

    loaded = session(legalized, threads=0)
    return final_proof(lambda feeds: run_session(loaded, feeds), legalized, graph, source, Precision.FP32,
                       expected)


def _proven_final(verification: Any) -> bool:
    return bool(verification.passed or verification.needs_inputs)
