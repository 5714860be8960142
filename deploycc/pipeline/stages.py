"""The stage runner: a build is a list of stages run in order over one build context
(pipeline/context.py), each timed under its name and shown in the progress display, and the list
ends where a stage stops the build. `build`, `build --partition` and `build --engine-only` are
stage lists over the same context (pipeline/build_stages.py, partition.py, engine_only.py); the
retries of a build (its dims fixed, the model as exported) are the runner's policy, written once
(`run_with_retries`)."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from deploycc.pipeline.context import VERIFY_INPUTS, BuildContext
from deploycc.taxonomy import Failure

if TYPE_CHECKING:
    from deploycc.options import BuildOptions
    from deploycc.records.shapes import ShapePlan


Context = TypeVar("Context", bound=BuildContext)


@dataclass(frozen=True)
class BuildStage(Generic[Context]):
    """One stage of a build: `run` does its work on the context; `wanted` says whether it runs in
    this build (not run, not timed); `label` names it in the timings and the progress display
    (None: not timed: a stage that only records what it did not do); `always`: it runs however the
    stages before it ended the build (what a failed build keeps too: its inputs, its manifest)."""

    name: str
    run: Callable[[Context], None]
    wanted: Callable[[Context], bool] = lambda context: True
    label: Callable[[Context], str | None] | None = None
    always: bool = False

    def label_for(self, context: Context) -> str | None:
        return self.label(context) if self.label is not None else self.name


def run_stages(context: Context, stages: Sequence[BuildStage[Context]]) -> Context:
    """Run `stages` in order over `context` until one stops the build (then only the stages that
    always run); what a stage holds open (a loaded engine) is released at the end, however it ends."""
    try:
        for stage in stages:
            if context.stopped and not stage.always:
                continue
            if not stage.wanted(context):
                continue
            label = stage.label_for(context)
            if label is not None:
                context.clock(label)
            stage.run(context)
    finally:
        context.close()
    return context


@dataclass(frozen=True)
class Again:
    """A retry's verdict: build again with these options, for the reason the note gives."""

    options: BuildOptions
    note: str
    replan_shapes: bool = False  # the shape plan changes with the options (dims fixed)
    original_on_backend: bool | None = None  # what the rebuilt report says of the model as exported


# The retries of a build, in order: each reads how a build ended and says whether to build again
Retry = Callable[[BuildContext], "Again | None"]


def run_with_retries(start: Callable[[BuildOptions, ShapePlan | None], BuildContext], options: BuildOptions,
                     shapes: ShapePlan | None,
                     stages: Callable[[BuildContext], Sequence[BuildStage[BuildContext]]],
                     retries: Sequence[Retry]) -> BuildContext:
    """Build with `options`; where a retry applies to how it ended, empty the staging folder and
    build again with the retry's options (each retry at most once, in order). `start` makes a fresh
    context for a set of options and a shape plan, in the same staging folder and with the same notes."""
    from deploycc.pipeline.shape_policy import plan_shapes

    context = start(options, shapes)
    run_stages(context, stages(context))
    for retry in retries:
        again = retry(context)
        if again is None:
            continue
        empty_keeping_inputs(context.staging, again.options)
        context.notes.append(again.note)
        if again.replan_shapes:
            shapes, _ = plan_shapes(context.source, context.target, again.options)
        context = start(again.options, shapes)
        run_stages(context, stages(context))
        if again.original_on_backend is not None:
            context.original_on_backend = again.original_on_backend
    return context


def empty_keeping_inputs(folder: Path, options: BuildOptions) -> None:
    """Everything a build wrote in the staging folder, but the verification inputs the options
    read from there (an int8 build's sample)."""
    kept = folder / VERIFY_INPUTS if options.legalize.inputs == folder / VERIFY_INPUTS else None
    for path in folder.iterdir():
        if path == kept:
            continue
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def fixed_at_drawn_sizes(context: BuildContext) -> Again | None:
    """A retry: every dynamic dim fixed at the size verification drew, where the backend could not
    build the graph with them dynamic (OpenVINO, a rank that follows the batch: what its hint says)."""
    options = context.options
    drawn = context.legalized.verification if context.legalized is not None else None
    if context.failure_category != Failure.DYNAMIC_SHAPE or drawn is None or not drawn.shapes:
        return None
    fixed: dict[str, list[int | str]] = {name: list(dims) for name, dims in drawn.shapes.items()}
    if all(options.legalize.shapes.get(name) == dims for name, dims in fixed.items()):
        return None
    legalize = dataclasses.replace(options.legalize, shapes={**options.legalize.shapes, **fixed}, batch=None)
    note = (f"{context.target.backend.kind} could not build with dynamic dims ({context.message}); "
            "built with them fixed at the verified sizes")
    return Again(dataclasses.replace(options, legalize=legalize, shape_ranges={}), note, replan_shapes=True)


def as_exported(context: BuildContext) -> Again | None:
    """A retry: never worse than doing nothing. Where the backend runs the model as exported and
    not deploycc's (a deploycc bug), the result is the one it was given, axes as asked."""
    from deploycc.pipeline.legalize import as_exported_options

    options = context.options
    if not context.original_on_backend or options.legalize.only_passes == ("axes",):
        return None
    failed = f"{context.target.backend.kind} failed on deploycc's model ({context.message})"
    note = (f"{failed} and runs the model as exported: built that one, axes as asked "
            "(a deploycc bug: please report it)")
    return Again(dataclasses.replace(options, legalize=as_exported_options(options.legalize)), note,
                 original_on_backend=True)
