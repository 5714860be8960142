"""What a decoder's greedy generation check needs from a build (pipeline/build_stages.py's generate
stage): the original's generation, computed once per build and shared with its precision candidates,
and the candidate's run, with a large model's weights held once at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from deploycc.pipeline.context import BuildContext

# Past this many bytes of weights the engine is let go while the original generates, and loaded
# again after: two copies of a 2.4 GB decoder's weights were the build's peak.
RELEASE_ENGINE_BYTES = 1 << 28
GENERATION = "generation"  # the original's greedy generation, in BuildContext.shared


def release_large_engine(context: BuildContext) -> None:
    """Let the loaded engine go where the model's weights pass RELEASE_ENGINE_BYTES, before a stage
    loads another copy of them (the original on ORT, the backend's build of the export); the later
    stages load it again (`candidate_run`, the bench). OpenVINO's verify of Qwen2.5-0.5B in bf16
    held both engines: 11.7 GB."""
    from deploycc.io import model_files

    if context.engine is None:
        return
    weights = sum(file.stat().st_size for file in model_files(context.source) if file.is_file())
    if weights > RELEASE_ENGINE_BYTES:
        context.close()


def reference_generation(context: BuildContext, signature: Any, original_feeds: dict[str, Any]) -> Any:
    """The original's greedy generation on ONNX Runtime CPU, its session let go after; a large
    model's engine is let go for it too (reloaded by `candidate_run`)."""
    from deploycc.verify.generation import reference_generation as generate_reference
    from deploycc.verify.runner import run_session, session

    if GENERATION in context.shared:  # the precision search's candidates share the original's
        return context.shared[GENERATION]
    release_large_engine(context)
    original = session(context.source, optimize=True, threads=0)
    reference = generate_reference(lambda feeds: run_session(original, feeds), signature, original_feeds)
    context.shared[GENERATION] = reference
    return reference


def engine_runs_here(context: BuildContext) -> bool:
    """Whether the generation's candidate is the engine (built here), not the model the device builds
    it from (`candidate_run`'s choice, and what the check says it ran on)."""
    return context.artifact is not None and not context.artifact.pending_on_device


@contextlib.contextmanager
def candidate_run(context: BuildContext) -> Iterator[Any]:
    """The candidate's run: the engine (loaded again where `reference_generation` let it go), else
    the model the device builds from, on ONNX Runtime CPU."""
    from deploycc.verify.runner import run_session, session

    if engine_runs_here(context):
        if context.engine is None:
            assert context.artifact is not None and context.request is not None
            context.engine = context.backend.load(context.artifact, context.staging, context.request)
        yield context.engine.run
        return
    candidate = session(context.engine_model or context.legalized_path, optimize=True, threads=0)
    yield lambda feeds: run_session(candidate, feeds)
