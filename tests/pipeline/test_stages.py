"""The stage runner (pipeline/stages.py): stages run in order over one build context, a stage that
stops the build ends it, each is timed under its label, what a stage holds open is released, and
the retries rebuild once each with their options and say why."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np

from deploycc.backends.registry import get_backend
from deploycc.options import BuildOptions
from deploycc.pipeline.context import VERIFY_INPUTS, BuildContext
from deploycc.pipeline.outcome import Clock
from deploycc.pipeline.stages import Again, BuildStage, empty_keeping_inputs, run_stages, run_with_retries
from deploycc.targets import registry
from deploycc.taxonomy import BuildStatus, Precision


class _Engine:
    closed = 0

    def close(self) -> None:
        _Engine.closed += 1


def _context(tmp_path: Path, options: BuildOptions | None = None,
             seconds: dict | None = None) -> BuildContext:
    target = registry.resolve("ort-cpu")
    return BuildContext(source=tmp_path / "model.onnx", target=target, options=options or BuildOptions(),
                        staging=tmp_path, backend=get_backend(target.backend.kind), precision=Precision.FP32,
                        clock=Clock(seconds if seconds is not None else {}, None), notes=[])


def test_stages_run_in_order_until_one_stops_and_what_they_hold_is_released(tmp_path):
    ran: list[str] = []
    seconds: dict[str, float] = {}

    def step(name: str, stop: bool = False):
        def run(context: BuildContext) -> None:
            ran.append(name)
            context.engine = _Engine()  # type: ignore[assignment]
            if stop:
                context.stop(BuildStatus.NEEDS_INPUTS, message=f"{name} stopped")
        return run

    stages = (BuildStage("first", step("first")),
              BuildStage("skipped", step("skipped"), wanted=lambda c: False),
              BuildStage("untimed", step("untimed"), label=lambda c: None),
              BuildStage("second", step("second", stop=True)),
              BuildStage("never", step("never")))
    _Engine.closed = 0
    context = run_stages(_context(tmp_path, seconds=seconds), stages)
    context.clock.stop()
    assert ran == ["first", "untimed", "second"]
    assert set(seconds) == {"first", "second"}  # skipped and untimed stages take no line
    assert (context.status, context.message) == (BuildStatus.NEEDS_INPUTS, "second stopped")
    assert context.engine is None and _Engine.closed == 1  # the last engine is closed at the end


def test_a_retry_builds_again_once_with_its_options_and_says_why(tmp_path):
    built: list[int | None] = []

    def build_stage(context: BuildContext) -> None:
        built.append(context.options.legalize.batch)
        (context.staging / "artifact.bin").write_bytes(b"x")
        context.stop(BuildStatus.FAILED, message="refused")

    def fix_batch(context: BuildContext) -> Again | None:
        if context.options.legalize.batch == 1:
            return None  # applies once: the rebuilt one does not ask again
        legalize = dataclasses.replace(context.options.legalize, batch=1)
        return Again(dataclasses.replace(context.options, legalize=legalize), "built at batch 1",
                     original_on_backend=True)

    notes: list[str] = []

    def start(options: BuildOptions, shapes) -> BuildContext:
        context = _context(tmp_path, options)
        context.notes = notes
        return context

    stages = (BuildStage("build", build_stage),)
    context = run_with_retries(start, BuildOptions(), None, lambda c: stages, (fix_batch, fix_batch))
    assert built == [None, 1]
    assert notes == ["built at batch 1"]
    assert context.original_on_backend is True and context.options.legalize.batch == 1


def test_emptying_the_staging_folder_keeps_the_sample_verification_reads(tmp_path):
    """An int8 build verifies on a sample written into the staging folder: a retry that empties
    the folder must leave it, or the rebuilt legalize has no inputs to read."""
    np.savez(tmp_path / VERIFY_INPUTS, x=np.ones(3, np.float32))
    (tmp_path / "model.legalized.onnx").write_bytes(b"x")
    (tmp_path / "bundle").mkdir()
    options = BuildOptions()
    with_sample = dataclasses.replace(options, legalize=dataclasses.replace(
        options.legalize, inputs=tmp_path / VERIFY_INPUTS))
    empty_keeping_inputs(tmp_path, with_sample)
    assert [p.name for p in tmp_path.iterdir()] == [VERIFY_INPUTS]
    empty_keeping_inputs(tmp_path, options)  # not the options' inputs: removed like the rest
    assert list(tmp_path.iterdir()) == []


def test_the_verification_inputs_are_drawn_in_one_place():
    """Every build stage takes its inputs from the build context (BuildContext.inputs), so they
    cannot drift apart: one call in the package draws inputs from a legalize record (its fed
    layouts), the context's. The others draw for a graph in hand: legalization's own verification,
    and `check`'s fp16 analysis of a model as given (no layouts moved, api/onnx_models.py)."""
    package = Path(__file__).resolve().parents[2] / "deploycc"
    calls = {f"{path.relative_to(package.parent)}": ast.unparse(node) for path in package.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "feeds_for"
             and len(node.args) >= 3}
    from_records = [path for path, call in calls.items() if "fed_layouts" in call and "legalized" in call]
    assert from_records == ["deploycc/pipeline/context.py"], calls
    in_pipeline = {path for path in calls if path.startswith("deploycc/pipeline")}
    assert in_pipeline == {"deploycc/pipeline/context.py"}
