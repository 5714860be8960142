"""`deploycc build` from a torch model: export with the target's first exporter at its opset
ceiling (a transformers causal language model: Optimum's, with its KV cache; decoders.py), prove
the export against torch, build it as any ONNX model is built, and try the other exporter only
when the first fails to export, to prove, or to reach a legal, verified artifact.
The better attempt is kept (verified or bundled first, then the one that got further), proven
once more against torch, and written to OUTDIR with both attempts in its report.

    OUTDIR/model.exported.onnx   what the kept exporter wrote
    OUTDIR/...                   the rest of a build directory (pipeline/build.py)
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import DeployccError, ExportFailed, OptionError
from deploycc.frontend import decoders, first_line
from deploycc.frontend.build_proof import prove_build
from deploycc.frontend.causal_lm import is_causal_lm
from deploycc.frontend.decoders import INSTALL_HINT, OPTIMUM, optimum_installed
from deploycc.frontend.exporters import ExporterFailed, export_with, opset_ceiling, requested_opset
from deploycc.frontend.failures import classify
from deploycc.frontend.proof import named_outputs, prove, proven, second_size, torch_outputs
from deploycc.frontend.shared_exports import shared_export
from deploycc.frontend.sources import Axis, TorchSource
from deploycc.options import BuildOptions
from deploycc.records.build import SUCCEEDED, BuildReport
from deploycc.records.export import (
    DATA_DEPENDENT,
    NOT_PROVEN,
    OPSET_CEILING,
    TORCH_FAILURE,
    ExportAttempt,
    ExportFailure,
    ExportProof,
    ExportReport,
)
from deploycc.taxonomy import BuildStatus, Precision, Stage

if TYPE_CHECKING:
    from deploycc.pipeline.context import BuildContext
    from deploycc.targets.schema import Target
    from deploycc.verify.verification import Verification

EXPORTED = "model.exported.onnx"
# How far a build got, for choosing between two that both failed
STAGE_ORDER = (Stage.EXPORT, Stage.LEGALIZE, Stage.QUANTIZE, Stage.BUILD, Stage.VERIFY, Stage.DONE)


def build_from_torch(source: TorchSource, target: Target, outdir: str | Path,
                     options: BuildOptions | None = None, *,
                     progress: Callable[[str], None] | None = None) -> BuildReport:
    """Export `source` for `target`, build, verify, and write `outdir` atomically (see the module)."""
    from deploycc import io
    from deploycc.pipeline.outcome import listing, write_reports

    options = _with_ranges(source, options or BuildOptions())
    outdir = Path(outdir)
    started = time.perf_counter()
    source, batch_note = at_target_batch(source, target)
    record = _record(source, target, batch_note)
    expected = reference_outputs(source)
    archive = (Path(source.label),) if source.kind in ("pt2", "torchscript") else ()
    with io.StagedDirectory(outdir, force=options.force, protect=archive) as staged:
        staging = staged.staging
        built, refusals = _build_each_export(source, target, record, staging, expected, options, outdir,
                                             progress)
        if not built and refusals and len(refusals) == len(record.attempts) \
                and not any(a.failure and a.failure.kind == OPSET_CEILING for a in record.attempts):
            raise refusals[0]  # the options, not the export: every attempt was refused alike
        if not built:
            report = _export_failed(source, target, outdir, options, record)
        else:
            kept = _better(built)
            record.chosen = kept.attempt.exporter
            record.reason = _why(kept.attempt, record)
            record.final, record.final_against = kept.final or (None, "")
            report = kept.report
            # the export with its weights, under our name
            io.save(io.load(kept.exported, check=False).model, kept.folder / EXPORTED)
            for item in kept.folder.iterdir():
                item.rename(staging / item.name)
        for leftover in staging.glob(".*"):
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        record.seconds = round(time.perf_counter() - started, 3)
        report = dataclasses.replace(report, model=source.label, outdir=str(outdir), export=record,
                                     files=listing(staging))
        write_reports(staging, report)
        staged.commit()
    return report


@dataclass
class _Built:
    """One exporter's build: its attempt, the build's record, the export and the folder it was
    built in, and torch against the build's result (the verification and what it ran)."""

    attempt: ExportAttempt
    report: BuildReport
    exported: Path
    folder: Path
    final: tuple[Verification, str] | None


def _build_each_export(source: TorchSource, target: Target, record: ExportReport, staging: Path,
                       expected: list[Any], options: BuildOptions, outdir: Path,
                       progress: Callable[[str], None] | None) -> tuple[list[_Built], list[DeployccError]]:
    """Export with each exporter in the target's order and run the build's stage list on each export,
    in a folder of its own, with torch's proof as its last stage, until one is built (or its outputs
    say nothing on these inputs): the builds, and the refusals before any build."""
    from deploycc.pipeline.build import prepare, report_of, run_build
    from deploycc.pipeline.stages import BuildStage

    built: list[_Built] = []
    refusals: list[DeployccError] = []
    proof: BuildStage[BuildContext] = BuildStage(
        "torch-proof", lambda context: prove_build(context, source, expected), label=lambda context: None,
        always=True)
    for exporter in record.order:
        if progress is not None:
            progress(f"export ({exporter})")
        attempt, exported = export_attempt(exporter, source, target, record.opset_ceiling,
                                           staging / f".export.{exporter}", expected)
        record.attempts.append(attempt)
        if exported is None:
            continue
        folder = staging / f".build.{exporter}"
        try:
            prepared = prepare(exported, target, options)
            folder.mkdir()
            context = run_build(folder, exported, target, prepared, progress=progress, after=(proof,))
        except DeployccError as error:  # the export's graph refused before any build (its opset)
            refusals.append(error)
            attempt.outcome, attempt.summary = str(BuildStatus.FAILED), str(error)
            attempt.failure = _refused(error, target)
            continue
        report = report_of(context, outdir)
        attempt.outcome, attempt.summary = str(report.status), report.summary
        built.append(_Built(attempt, report, exported, folder, context.source_proof))
        if report.status in SUCCEEDED or report.status == BuildStatus.NEEDS_INPUTS:
            break  # built, or the model's outputs say nothing on these inputs: no exporter changes that
    return built, refusals


def export_for_target(source: TorchSource, target: Target, folder: Path) -> tuple[ExportReport, Path]:
    """The first export, in the target's order, that exports and is proven against torch (no
    build: `legalize`, `check` and `build --partition` take it from here), written in `folder`.
    Raises ExportFailed, with each attempt's classified line, when none is."""
    source, batch_note = at_target_batch(source, target)
    record = _record(source, target, batch_note)
    started = time.perf_counter()
    expected = reference_outputs(source)
    for exporter in record.order:
        attempt, exported = export_attempt(exporter, source, target, record.opset_ceiling,
                                           folder / f"export.{exporter}", expected)
        record.attempts.append(attempt)
        if exported is not None:
            record.chosen, record.reason = exporter, _why(attempt, record)
            record.seconds = round(time.perf_counter() - started, 3)
            return record, exported
    failed = ExportFailed(f"{source.label}: {record.line()}")
    failed.record = record
    raise failed


def _record(source: TorchSource, target: Target, note: str | None = None) -> ExportReport:
    """The export's record before any attempt: the exporters in order (the user's, else Optimum's
    for a causal language model, which writes its KV cache, else the target's) at the target's
    opset ceiling."""
    default = (OPTIMUM,) if is_causal_lm(source.module) else target.export.exporters
    return ExportReport(source=source.label, kind=source.kind, target=target.name,
                        opset_ceiling=opset_ceiling(target), example_shapes=source.shapes(),
                        order=applicable(source, source.exporters or default), notes=[note] if note else [])


def applicable(source: TorchSource, exporters: tuple[str, ...] | list[str]) -> list[str]:
    """The exporters that can read what the user gave: a .pt2 is torch.export's program, which
    only dynamo exports (TorchScript would trace its module: "Calling train() is not supported");
    a TorchScript archive only TorchScript's (dynamo does not take a ScriptModule)."""
    only = {"pt2": "dynamo", "torchscript": "torchscript"}.get(source.kind)
    order = [exporter for exporter in exporters if only is None or exporter == only]
    if OPTIMUM in order and not is_causal_lm(source.module):
        raise OptionError(f"--exporter {OPTIMUM} exports a transformers causal language model, and "
                          f"{source.label} is none")
    if OPTIMUM in order and not optimum_installed():
        raise OptionError(f"{source.label} is a causal language model, exported with its KV cache by "
                          "Optimum, which is not installed", hint=INSTALL_HINT)
    if not order:
        archive = ".pt2" if source.kind == "pt2" else "TorchScript"
        raise OptionError(f"--exporter {', '.join(exporters)} does not apply to {source.label}",
                          hint=f"a {archive} archive is exported by {only}")
    return order


def at_target_batch(source: TorchSource, target: Target) -> tuple[TorchSource, str | None]:
    """`source` with its example inputs at the batch the target's shape policy fixes (a Jetson
    builds batch 1), axis 0 of every input of rank 2 or more taken cyclically, and a note saying
    so; as it is where the policy keeps the batch open, the user made axis 0 dynamic, a .pt2 has
    its own dims, or the module does not run at that batch (said in the note)."""
    import torch

    if target.shapes.batch != "fixed" or source.program is not None:
        return source, None
    size = target.shapes.batch_size
    moved, changed = [], []
    for name, tensor in zip(source.names, source.inputs, strict=True):
        if tensor.dim() >= 2 and 0 not in source.dynamic.get(name, {}) and tensor.shape[0] != size:
            changed.append(f"{name} {tensor.shape[0]} -> {size}")
            tensor = torch.index_select(tensor, 0, torch.arange(size) % max(int(tensor.shape[0]), 1))
        moved.append(tensor)
    if not changed:
        return source, None
    try:
        torch_outputs(source.module, tuple(moved))
    except Exception as error:  # the module is made for its example's batch: keep it, and say so
        return source, (f"kept the example's batch: {target.name} builds batch {size}, and the module "
                        f"does not run at it ({type(error).__name__}: {first_line(error)})")
    return dataclasses.replace(source, inputs=tuple(moved)), (
        f"batch {size}, {target.name}'s shape policy (the example inputs' batch: {', '.join(changed)}); "
        "--dynamic NAME:0:MIN:OPT:MAX keeps it open")


def _with_ranges(source: TorchSource, options: BuildOptions) -> BuildOptions:
    """The ranges given with `--dynamic name:axis:min:opt:max` (or a .pt2's bounded dims) as the
    engine's profile for that input, its other dims at the example's sizes; `--shape-range` wins."""
    ranges = dict(options.shape_ranges)
    for name, axes in source.dynamic.items():
        bounded = {axis: bounds for axis, bounds in axes.items()
                   if bounds.low is not None and bounds.high is not None}
        if not bounded or name in ranges:
            continue
        shape = [int(size) for size in source.inputs[source.names.index(name)].shape]
        low, opt, high = list(shape), list(shape), list(shape)
        for axis, bounds in bounded.items():
            low[axis], high[axis] = int(bounds.low or 1), int(bounds.high or shape[axis])
            opt[axis] = min(max(int(bounds.opt or shape[axis]), low[axis]), high[axis])
        ranges[name] = (low, opt, high)
    return dataclasses.replace(options, shape_ranges=ranges) if ranges != options.shape_ranges else options


def reference_outputs(source: TorchSource) -> list[Any]:
    """torch's outputs on the example inputs, what every proof compares with (a causal language
    model: its greedy generation from the example prompt); a module that does not run on them is a
    failure of torch itself, said in one line."""
    try:
        if is_causal_lm(source.module):
            return [decoders.reference(source)]
        names, outputs = named_outputs(source.module, source.inputs)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as error:
        failure = ExportFailure(TORCH_FAILURE, f"the module fails on its example inputs: "
                                f"{type(error).__name__}: {first_line(error)}",
                                hint="give example inputs it takes (--example-inputs, --input)")
        raise ExportFailed(f"{source.label}: {failure.line()}") from None
    if source.output_names is None:
        source.output_names = [f"{name}_out" if name in source.names else name for name in names]
    return outputs


def default_axes(source: TorchSource, target: Target) -> dict[str, dict[int, Axis]]:
    """The axes exported dynamic: the user's (`--dynamic`) and a .pt2's own, and the batch (axis 0
    of every input of rank 2 or more) unless the target's shape policy fixes it (Jetson builds
    batch 1: a static export is what it runs)."""
    axes = {name: dict(dims) for name, dims in source.dynamic.items()}
    if target.shapes.batch == "fixed" or source.program is not None:
        return axes
    for name, tensor in zip(source.names, source.inputs, strict=True):
        if tensor.dim() >= 2:
            axes.setdefault(name, {}).setdefault(0, Axis("batch"))
    return axes


def export_attempt(exporter: str, source: TorchSource, target: Target, ceiling: int, folder: Path,
                   expected: list[Any]) -> tuple[ExportAttempt, Path | None]:
    """One exporter's export, proven at the example inputs and at a second size of every dynamic
    axis; a batch the export could not keep dynamic is exported static (said in the notes).
    Returns the attempt and the ONNX file (None when it failed or was not proven)."""
    opset, axes = requested_opset(exporter, ceiling), default_axes(source, target)
    return shared_export(exporter, source, opset, axes, folder,
                         lambda: _export_attempt(exporter, source, target, opset, axes, folder, expected))


def _export_attempt(exporter: str, source: TorchSource, target: Target, opset: int,
                    axes: dict[str, dict[int, Axis]], folder: Path,
                    expected: list[Any]) -> tuple[ExportAttempt, Path | None]:
    attempt = ExportAttempt(exporter=exporter, opset_requested=opset)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    path = _export(exporter, source, axes, folder, attempt, target)
    if path is None and attempt.failure is not None and attempt.failure.kind == DATA_DEPENDENT \
            and _opened_by_default(axes, source):
        attempt.notes.append(f"batch exported static: the dynamic batch failed ({attempt.failure.message})")
        attempt.failure, axes = None, dict(source.dynamic)
        path = _export(exporter, source, axes, folder, attempt, target)
    if path is not None:
        path = _prove(exporter, source, axes, folder, attempt, target, expected, path)
    attempt.seconds = round(time.perf_counter() - started, 3)
    return attempt, path


def _export(exporter: str, source: TorchSource, axes: dict[str, dict[int, Axis]], folder: Path,
            attempt: ExportAttempt, target: Target) -> Path | None:
    path = folder / f"{exporter}.onnx"
    try:
        findings = export_with(exporter, source, _widened(source, axes), axes, path,
                               attempt.opset_requested, source.output_names)
    except ExporterFailed as failed:
        attempt.failure = classify(failed.error, failed.printed, target, module=source.module,
                                   inputs=source.inputs, user_dynamic=bool(source.dynamic))
        return None
    if exporter == "torchscript" and source.traced_guards:  # an archive deploycc traced: what it found
        findings.guards = list(source.traced_guards)
    attempt.trace_warnings, attempt.data_guards = findings.warnings, findings.guards
    constant = _read_back(path, attempt, source)
    if constant:
        attempt.failure = ExportFailure(
            NOT_PROVEN, f"no output of the export depends on an input ({', '.join(constant)}): torch "
            "computed them outside the graph (NumPy, Python) and the exporter wrote constants",
            hint="keep forward in torch ops (torch.tanh, not np.tanh on x.numpy())")
        return None
    if findings.guards and not source.accept_trace_warnings:
        attempt.failure = ExportFailure(
            DATA_DEPENDENT, f"the trace fixed what the inputs' data decides, at {findings.guards[0]}"
            + (f" and {len(findings.guards) - 1} more place(s)" if len(findings.guards) > 1 else ""),
            hint="compute it with torch ops (torch.where, torch.cond), or pass --accept-trace-warnings to "
                 "keep the traced path for every input", module_path=None)
        return None
    if findings.guards:
        attempt.guards_accepted = True
        attempt.notes.append(f"accepted with --accept-trace-warnings: the path the example inputs took is "
                             f"fixed in the export at {'; '.join(findings.guards)}")
    return path


def _prove(exporter: str, source: TorchSource, axes: dict[str, dict[int, Axis]], folder: Path,
           attempt: ExportAttempt, target: Target, expected: list[Any], path: Path) -> Path | None:
    if exporter == OPTIMUM:  # a decoder: its greedy generation, the cache growing from empty
        why = decoders.GENERATED
        proof = ExportProof(source.shapes(), decoders.prove_on_ort(path, expected[0], why), why)
        attempt.proofs.append(proof)
        if not proven(proof):
            attempt.failure = _not_proven(proof.verification.problem, why)
            return None
        return path
    first = prove(path, source, source.inputs, "the example inputs", expected)
    attempt.proofs.append(first)
    if not proven(first):
        attempt.failure = _not_proven(first.verification.problem, "the example inputs")
        return None
    dims = {name: {int(axis): dim for axis, dim in axes_.items()} for name, axes_ in attempt.dynamic.items()}
    moved = second_size(source, dims)
    if moved is None:
        return path
    try:
        moved_expected = torch_outputs(source.module, moved)
    except Exception as error:  # the module itself does not take that size: nothing to prove there
        attempt.notes.append(f"torch does not run at a second size ({type(error).__name__}); "
                             "the dynamic axes are proven at the example size only")
        return path
    second = prove(path, source, moved, "a second size of each dynamic axis", moved_expected)
    attempt.proofs.append(second)
    if proven(second):
        return path
    if _opened_by_default(axes, source):  # the tracer wrote the batch as a constant somewhere: go static
        attempt.notes.append("batch exported static: at another batch size the export "
                             f"{second.verification.problem}")
        attempt.proofs.clear()
        static = dict(source.dynamic)
        retried = _export(exporter, source, static, folder, attempt, target)
        if retried is None:
            return None
        return _prove(exporter, source, static, folder, attempt, target, expected, retried)
    attempt.failure = _not_proven(second.verification.problem, "a second size of the dynamic axes")
    return None


def _refused(error: DeployccError, target: Target) -> ExportFailure:
    """A build that refused the exported graph outright: an opset it cannot convert down to the
    target's (dynamo writes 18 and up), or the options."""
    text = str(error)
    if "cannot convert opset" in text:
        return ExportFailure(OPSET_CEILING, f"{text.split(' (')[0]} ({target.name} reads up to opset "
                             f"{target.opset.max})", hint="build for a target that reads it")
    return ExportFailure(TORCH_FAILURE, text.split(" (")[0], hint=error.hint or "")


def _not_proven(problem: str, where: str) -> ExportFailure:
    return ExportFailure(NOT_PROVEN, f"on {where}, ONNX Runtime does not compute what torch does: {problem}",
                         hint="export with static shapes, or report the model to torch.onnx")


def _opened_by_default(axes: dict[str, dict[int, Axis]], source: TorchSource) -> bool:
    """Whether some dynamic axis is the batch opened by default (nobody asked for it): that one
    may be exported static instead, the user's axes stay."""
    return any(axis not in source.dynamic.get(name, {}) for name, dims in axes.items() for axis in dims)


def _widened(source: TorchSource, axes: dict[str, dict[int, Axis]]) -> tuple[Any, ...]:
    """The example inputs, with a batch of 1 on an axis exported dynamic repeated to 2: torch.export
    specializes a size of 1, and a tracer that sees 1 may write it as a constant."""
    import torch

    widened = []
    for name, tensor in zip(source.names, source.inputs, strict=True):
        for axis in axes.get(name, {}):
            if tensor.shape[axis] == 1:
                tensor = torch.cat([tensor, tensor], dim=axis)
        widened.append(tensor)
    return tuple(widened)


def _read_back(path: Path, attempt: ExportAttempt, source: TorchSource) -> list[str]:
    """The opset, node count and dynamic dims the exporter actually wrote, in `attempt`; returns
    the outputs that no input reaches when none does (an export that lost what forward computes)."""
    import onnx_ir as ir

    from deploycc import io
    from deploycc.graph.graphs import outputs_apart_from_inputs

    model = io.load(path, check=False).model
    attempt.opset_written = model.opset_imports.get("", None)
    attempt.nodes = sum(1 for _ in model.graph)
    attempt.dynamic = {}
    for value in model.graph.inputs:
        if value.shape is None or value.name not in source.names:
            continue
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, ir.SymbolicDim):
                attempt.dynamic.setdefault(value.name, {})[str(axis)] = dim.value or f"{value.name}_{axis}"
    constant = outputs_apart_from_inputs(model.graph)
    # one output that is a constant beside others that are not is a model's own (an anchor grid)
    return constant if constant and len(constant) == len(model.graph.outputs) else []


def _better(built: list[_Built]) -> _Built:
    """The attempt to keep: a verified (or bundled) build first, then the one that got further,
    then fewer nodes after legalization; the target's order breaks ties."""
    def rank(item: _Built) -> tuple[int, int, int]:
        report = item.report
        nodes = report.legalize.nodes.get("after", 0) if report.legalize is not None else 0
        return (0 if report.status in SUCCEEDED else 1, -STAGE_ORDER.index(report.stage)
                if report.stage in STAGE_ORDER else 0, int(nodes or 0))

    return min(built, key=rank)


def _why(kept: ExportAttempt, record: ExportReport) -> str:
    others = [a for a in record.attempts if a is not kept]
    if not others:
        return f"the first in {record.target}'s order"
    reasons = [f"{a.exporter} {a.failure.line() if a.failure else a.summary}" for a in others]
    return "; ".join(reasons)


def _export_failed(source: TorchSource, target: Target, outdir: Path, options: BuildOptions,
                   record: ExportReport) -> BuildReport:
    first = next(a.failure for a in record.attempts if a.failure is not None)
    precision = options.precision or Precision(target.precision.default)
    return BuildReport(model=source.label, target=target.name, outdir=str(outdir), status=BuildStatus.FAILED,
                       stage=Stage.EXPORT, summary=record.line(), next_step=first.hint or "see report.md",
                       precision=precision, legalize=None, artifact=None, verification=None, benchmark=None)
