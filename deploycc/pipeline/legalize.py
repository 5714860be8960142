"""The legalization pipeline: load, run the passes, judge once, verify, write atomically.

    opset -> axes -> map-outputs -> fold -> tidy -> refold -> [simplify] -> prune -> fuse -> legalize
    -> fold-bodies -> final check -> verify     (the list: deploycc/passes/__init__.py)

`build` runs the same function before handing the result to a backend.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc import io
from deploycc.errors import EXIT_FINDINGS, DeployccError
from deploycc.graph.graphs import name_layers
from deploycc.graph.shapes import load_inferred
from deploycc.options import LegalizeOptions
from deploycc.passes import default_passes
from deploycc.passes.base import Pass, PipelineState
from deploycc.pipeline.blame import find_blame
from deploycc.pipeline.manager import InvariantError, run_passes, source_ops
from deploycc.records.legalize import Blame, LegalizeReport, PassRecord, Unresolved
from deploycc.taxonomy import Legality, LegalizeMode, Precision, Refusal, Severity
from deploycc.verify.exact import exact_integers

if TYPE_CHECKING:
    from deploycc.analysis.check import TargetVerdict
    from deploycc.io import LoadedModel
    from deploycc.targets.schema import Target
    from deploycc.verify.verification import Verification


def _unresolved(state: PipelineState, final: TargetVerdict) -> list[Unresolved]:
    by_node = {d.node: d for d in state.unresolved}
    items = []
    for group in final.illegal:
        for node in group.nodes:
            decision = by_node.get(node)
            tried = [f"{rule}: {reason}" for rule, reason in decision.declined] if decision else []
            if decision is not None and not decision.declined:
                tried = [decision.explain()]
            tried = tried or ["no rule in the catalog for this op"]
            items.append(Unresolved(node, group.op, [group.reason], tried))
    return items


def run_pipeline(path: str | Path, target: Target, options: LegalizeOptions,
                 passes: list[Pass] | None = None,
                 progress: Callable[[str], None] | None = None
                 ) -> tuple[PipelineState, list[PassRecord], LoadedModel]:
    """Load and rewrite; returns the state, the pass records and the loaded model's metadata."""
    from deploycc.graph.graphs import all_nodes

    loaded = load_inferred(path)
    state = PipelineState(model=loaded.model, target=target, options=options, source=loaded.path)
    state.source_opset = state.opsets.get("")
    state.source_nodes = sum(1 for _ in all_nodes(state.model.graph))
    state.notes.extend(loaded.notes)
    records = run_passes(passes or default_passes(), state, progress=progress)
    return state, records, loaded


@dataclass
class _Attempt:
    """One run of the passes and the verdict on its result (or the deploycc bug that stopped it)."""

    state: PipelineState | None
    records: list[PassRecord]
    loaded: LoadedModel | None
    final: TargetVerdict | None
    error: Exception | None = None


def _attempt(path: str | Path, target: Target, options: LegalizeOptions,
             progress: Callable[[str], None] | None) -> _Attempt:
    from deploycc.analysis.check import judge_model

    try:
        state, records, loaded = run_pipeline(path, target, options, progress=progress)
    except InvariantError as error:
        return _Attempt(None, [], None, None, error)
    except DeployccError as error:
        if error.exit_code != EXIT_FINDINGS:
            raise  # the user's input or options: reported as such
        return _Attempt(None, [], None, None, error)  # a finding (opset out of reach): try as exported
    except Exception as error:  # a pass or a library under it broke on this model: a deploycc bug
        return _Attempt(None, [], None, None, error)
    if progress is not None:
        progress("final check")
    # Every attempt, the model as exported too, is judged as a result: an opset left outside
    # the target's range is illegal, not a note that legalize will convert it.
    return _Attempt(state, records, loaded, judge_model(state.model, target, legalized=True))


MAX_SET_ASIDE = 3  # passes or rules blamed and set aside before the model as exported is kept


def as_exported_options(options: LegalizeOptions) -> LegalizeOptions:
    """The model as exported, with only what the user asked of its axes: the fallback when
    deploycc's own rewrites leave a worse model than the one it was given."""
    from dataclasses import replace

    return replace(options, only_passes=("axes",), disable_passes=())


def legalize(path: str | Path, target: Target, options: LegalizeOptions | None = None, *,
             output: str | Path | None = None,
             progress: Callable[[str], None] | None = None) -> LegalizeReport:
    """Rewrite the model for the target, verify it, write it. Never worse than doing nothing: when
    the rewritten model is refused, fails verification, or a pass breaks, while the model as
    exported (axes fixed as asked) is legal and verifies, that one is the result, and a note says
    why deploycc's rewrites were set aside. A GPU computes integer ops exactly: a model bound for
    one is judged against the spec's values, not a saturating CPU kernel's (verify/exact.py)."""
    with exact_integers(target.device.kind == "GPU"), \
            io.output_lock(Path(output)) if output is not None else contextlib.nullcontext():
        return _legalize(path, target, options, output=output, progress=progress)


@dataclass
class _Search:
    """The attempts of one legalization: the one chosen (with its outcome), the passes and rules
    set aside on the way, and why the model as exported or the first attempt was not kept."""

    chosen: tuple[_Attempt, _Outcome] | None = None
    tried: list[_Attempt] = field(default_factory=list)
    blames: list[Blame] = field(default_factory=list)
    as_exported: str = ""
    set_aside: str = ""  # why the first attempt was not kept


def _legalize(path: str | Path, target: Target, options: LegalizeOptions | None = None, *,
              output: str | Path | None = None,
              progress: Callable[[str], None] | None = None) -> LegalizeReport:
    started = time.perf_counter()
    options = options or LegalizeOptions()
    mode = options.effective_mode(target)
    if output is not None:  # the input model and its weight files are never an output
        io.refuse_inputs(io.written_files(Path(output)), [Path(path)])
    staging = _staging(Path(output) if output is not None else None)
    try:
        search = _search(path, target, options, mode, output, staging, progress)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if search.chosen is None:
        first = next((a.error for a in search.tried if a.error is not None), None)
        if isinstance(first, DeployccError):
            raise first  # e.g. the opset cannot be reached, and the model as exported is refused too
        raise InternalError(f"deploycc failed on this model: {search.set_aside}")
    return _report(search, target, mode, output, started)


def _search(path: str | Path, target: Target, options: LegalizeOptions, mode: LegalizeMode,
            output: str | Path | None, staging: Path, progress: Callable[[str], None] | None) -> _Search:
    """Legalize with every pass, then without what broke or failed verification (blamed one at a
    time), then the model as exported, until an attempt succeeds (or needs inputs to say)."""
    fallback = None if options.only_passes == ("axes",) else as_exported_options(options)
    search = _Search()
    blames = search.blames
    current: LegalizeOptions | None = options
    while current is not None:
        is_fallback = current is fallback
        attempt = _attempt(path, target, current, progress)
        search.tried.append(attempt)
        following = None if is_fallback else fallback
        if attempt.state is None:  # a pass broke: without it, the fallback, or a one-line error
            if is_fallback:
                search.as_exported = _first_line(attempt.error)
            search.set_aside = search.set_aside or _first_line(attempt.error)
            broke = getattr(attempt.error, "pass_name", "")
            if broke and not is_fallback and len(blames) < MAX_SET_ASIDE:
                blames.append(Blame(broke, None, "", f"the pass broke: {_first_line(attempt.error)}"))
                following = blames[-1].without(current)
            current = following
            continue
        assert attempt.loaded is not None and attempt.final is not None
        refused = mode == LegalizeMode.FULL or _opset_refused(attempt.final)
        if is_fallback and not attempt.final.legal and refused:
            search.as_exported = "; ".join(_problems(attempt.final))
            break  # not legal as exported either: the first attempt's report stands
        outcome = _judge_and_write(target, current, attempt, mode, output, staging, progress)
        verification = outcome.verification
        if outcome.success or (verification is not None and verification.needs_inputs):
            search.chosen = (attempt, outcome)
            if not is_fallback:
                for blame in blames:
                    blame.set_aside = True
            search.set_aside = search.set_aside if (is_fallback or blames) else ""
            break
        if search.chosen is None:
            search.chosen, search.set_aside = (attempt, outcome), outcome.reason
        if is_fallback:
            search.as_exported = outcome.reason
        elif verification is not None and len(blames) < MAX_SET_ASIDE:
            if progress is not None:
                progress("blame")
            found = find_blame(_verify_run(path, target, verification.precision), current,
                               attempt.records, verification)
            if found is not None:
                blames.append(found)
                following = found.without(current)
        current = following
    return search


def _report(search: _Search, target: Target, mode: LegalizeMode, output: str | Path | None,
            started: float) -> LegalizeReport:
    """The chosen attempt's report, with what was set aside on the way to it."""
    from deploycc.graph.graphs import all_nodes

    assert search.chosen is not None
    attempt, outcome = search.chosen
    state, records, loaded, final = attempt.state, attempt.records, attempt.loaded, attempt.final
    assert state is not None and loaded is not None and final is not None
    kept_own = [b for b in search.blames if b.set_aside]
    if outcome.success and kept_own:
        state.notes.append("set aside what failed verification, and kept the rest of deploycc's rewrites: "
                           + "; ".join(str(b) for b in kept_own))
    elif outcome.success and search.set_aside:  # the fallback was kept
        state.notes.append("kept the model as exported (axes as asked): deploycc's rewrites were set "
                           f"aside because {search.set_aside}")
    verification = outcome.verification
    summary = _summary(final.legal, mode, verification, final, target, output if outcome.success else None)
    return LegalizeReport(
        source=str(loaded.path), output=str(output) if output and outcome.success else None,
        target=target.name, mode=mode, success=outcome.success, summary=summary,
        opset={"before": state.source_opset, "after": state.opsets.get("")},
        nodes={"before": state.source_nodes, "after": sum(1 for _ in all_nodes(state.model.graph))},
        passes=records, rewrites=state.rewrites, final=final, unresolved=_unresolved(state, final),
        verification=verification, signature_changes=state.signature_changes,
        notes=state.notes, fed_layouts=state.fed_layouts, files=[str(f) for f in outcome.files],
        seconds=round(time.perf_counter() - started, 3),
        as_exported="" if outcome.success else search.as_exported, blame=search.blames)


def _staging(output: Path | None) -> Path:
    """A folder for the attempts' files beside `output` (a rename puts the result in place), named
    with this process' id: what a killed run left in that folder (a complete-looking model) is
    removed here."""
    if output is None:
        output = Path(tempfile.gettempdir()) / "deploycc-legalize"
    io.remove_stale_partials(output.parent)
    return Path(tempfile.mkdtemp(prefix=io.staging_prefix(output), dir=output.parent))


def _verify_run(path: str | Path, target: Target, precision: Precision
                ) -> Callable[[LegalizeOptions], Verification | None]:
    """Blame's probe: the pipeline with the options it is given, verified at `precision`; None
    when the pipeline broke (counted as failing)."""
    from dataclasses import replace

    def run(options: LegalizeOptions) -> Verification | None:
        try:
            state, _, loaded = run_pipeline(path, target, replace(options, verify=False))
            with tempfile.TemporaryDirectory(prefix="deploycc-blame-") as folder:
                staged = Path(folder) / "prefix.onnx"
                io.save(state.model, staged, force_external=bool(loaded.external_files))
                return _verify(state, loaded, staged, options, precision)
        except Exception:  # a prefix that breaks counts as failing
            return None

    return run


class InternalError(DeployccError):
    """A pass broke on a model and the model as exported could not be kept either: a deploycc
    bug, reported in one line with exit code 1 (the model was not made legal)."""

    exit_code = EXIT_FINDINGS


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip() if error is not None else ""
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


@dataclass
class _Outcome:
    success: bool
    verification: Verification | None
    files: list[Path]
    reason: str


def _judge_and_write(target: Target, options: LegalizeOptions, attempt: _Attempt,
                     mode: str, output: str | Path | None, staging: Path,
                     progress: Callable[[str], None] | None) -> _Outcome:
    """Verify the attempt's model and move it to `output` when it is legal (or mode partial)."""
    state, loaded, final = attempt.state, attempt.loaded, attempt.final
    assert state is not None and loaded is not None and final is not None
    success = final.legal or (mode == LegalizeMode.PARTIAL and not _opset_refused(final))
    reason = "" if success else "; ".join(_problems(final))
    verification = None
    files: list[Path] = []
    staged = staging / (Path(output).name if output else "legalized.onnx")
    # A refused model is neither written nor verified; without -o, only verification needs a file.
    if success and (output is not None or options.verify):
        name_layers(state.model.graph)  # an engine's layer names, and a half build's kept layers
        io.save(state.model, staged, force_external=bool(loaded.external_files))
    if options.verify and success:
        if progress is not None:
            progress("verify")
        from deploycc.verify.verification import computes_in_float16, tolerance_precision

        precision = tolerance_precision(source_ops(attempt.records), Precision.FP32,
                                        float16=computes_in_float16(loaded.path))
        verification = _verify(state, loaded, staged, options, precision)
        if not verification.passed:
            success = False
            reason = f"verification failed: {verification.problem}"
    if output is not None and success:
        files = _publish(staged, Path(output))
    return _Outcome(success, verification, files, reason)


def _verify(state: PipelineState, loaded: LoadedModel, staged: Path, options: LegalizeOptions,
            precision: Precision) -> Verification:
    """The staged result of a run of the passes against the original it was loaded from: what
    legalize's own verification and blame's probes both judge by."""
    from deploycc.verify.verification import verify_files

    return verify_files(loaded.path, staged, state.model, state.fed_layouts, options,
                        precision=precision, retyped=state.retyped_outputs)


def _publish(staged: Path, output: Path) -> list[Path]:
    """Move the verified model (and its data file) into place; the model file last."""
    moved = []
    data = staged.with_name(staged.name + ".data")
    if data.exists():
        os.replace(data, output.with_name(output.name + ".data"))
        moved.append(output.with_name(output.name + ".data"))
    os.replace(staged, output)
    return [output, *moved]


def _opset_refused(final: TargetVerdict) -> bool:
    """The opset is outside the target's range: the target refuses the whole model, so partial
    mode has no node to leave for it to fall back on."""
    return any(f.severity == Severity.ILLEGAL and f.category == Refusal.OPSET for f in final.graph_findings)


def _problems(final: TargetVerdict) -> list[str]:
    illegal = final.counts.get(Legality.ILLEGAL, 0)
    findings = [f.message for f in final.graph_findings if f.severity == Severity.ILLEGAL]
    return ([f"{illegal} node(s) still illegal"] if illegal else []) + findings


def _summary(legal: bool, mode: str, verification: Verification | None, final: TargetVerdict,
             target: Target, output: str | Path | None) -> str:
    problems = "; ".join(_problems(final))
    if verification is not None and not verification.passed:
        return f"verification failed: {verification.problem}"
    if not legal and (mode == LegalizeMode.FULL or _opset_refused(final)):
        return f"{problems} on {target.name}; not written (mode {mode})"
    where = f"written to {output}" if output else "not written (no -o)"
    if not legal:
        return f"{problems}: left for {target.name} to fall back on (mode partial); {where}"
    return f"legal on {target.name}; {where}"
