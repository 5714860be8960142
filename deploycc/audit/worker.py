"""One audit cell, run in its own process: `python -m deploycc.audit.worker < spec.json`.

The parent gives it a timeout and a memory limit; whatever happens in here (a segfault in a
backend, a hang, an allocation storm) ends this process only. The last line of stdout is the
cell's result as JSON.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.errors import PrecisionRefused
from deploycc.records.audit import FROM_LEGALITY, HOST_SEGMENTS, CellResult, CellSpec
from deploycc.records.export import DATA_DEPENDENT, NOT_PROVEN, OPSET_CEILING, TORCH_FAILURE, UNSUPPORTED_OP
from deploycc.results import from_dict
from deploycc.taxonomy import (
    BuildStatus,
    CellStatus,
    Failure,
    LegalizeMode,
    Precision,
    Severity,
    Stage,
    says_out_of_memory,
)
from deploycc.verify import reference

if TYPE_CHECKING:
    from deploycc.analysis.check import TargetVerdict
    from deploycc.options import BuildOptions, LegalizeOptions
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.targets.schema import Target


def _category(error: BaseException) -> Failure:
    """The failure category of an exception that ended a cell (backend errors by default)."""
    from deploycc.budget import TooLarge
    from deploycc.errors import DynamicShapeError, ModelInputError
    from deploycc.passes.opset import OpsetConversionError

    if isinstance(error, TooLarge):  # past the memory or time budget (budget.py)
        return Failure.TIMEOUT if error.resource == "time" else Failure.OUT_OF_MEMORY
    if isinstance(error, MemoryError) or says_out_of_memory(str(error)):  # ENOMEM, bad_alloc
        return Failure.OUT_OF_MEMORY
    if isinstance(error, ModelInputError):
        return Failure.INVALID_MODEL
    if isinstance(error, OpsetConversionError):
        return Failure.OPSET
    if isinstance(error, DynamicShapeError):
        return Failure.DYNAMIC_SHAPE
    return Failure.BACKEND_ERROR  # BackendError, BackendUnavailable, and whatever a backend raised


def _cause(summary: str, legalized) -> str:
    """The summary, and for a refused model each op still illegal with why (the class alone does
    not say what to do next)."""
    if legalized is None or not legalized.unresolved:
        return summary
    reasons = sorted({f"{item.op}: {item.reasons[0]}" for item in legalized.unresolved})
    more = f"; and {len(reasons) - 4} more" if len(reasons) > 4 else ""
    return f"{summary}: {'; '.join(reasons[:4])}{more}"


def _with_host_segments(spec: CellSpec, target, options, result: CellResult,
                        model: str | None = None) -> None:
    """A model refused as a whole, built again with host segments: the cell says whether that
    deploys (chain verified on ORT, and on the engines where they build here). `model`: the ONNX
    model to partition, where the cell's own is a PyTorch model (its export)."""
    from deploycc.options import BuildOptions
    from deploycc.pipeline.partition import build_partitioned

    report = build_partitioned(model or spec.model, target, Path(spec.workdir) / "partition",
                               BuildOptions(legalize=options, bench=False, force=True,
                                            choose_precision=False))
    result.details["partition"] = {"status": report.status, "summary": report.summary,
                                   "segments": [s["placement"] for s in report.segments],
                                   "device_flops_share": round(report.device_flops_share, 4),
                                   "host_ops": sorted({op for s in report.segments if s["placement"] == "host"
                                                       for op in s["ops"]})}
    devices = sum(1 for s in report.segments if s["placement"] == "device")
    if report.status in (BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE) and devices:
        result.status = HOST_SEGMENTS
        result.message = f"{report.summary} (refused as a whole: {result.message})"


def _input_names(model: str) -> set[str]:
    """The names of a model's graph inputs (initializers excluded)."""
    from deploycc import io

    graph = io.peek(model, check=True).model.graph  # vetted, as the shape plan reads it next
    return {v.name or "" for v in graph.inputs if v.name not in graph.initializers}


def _legalize_options(spec: CellSpec, target, inputs: set[str]):
    """The cell's axes, as `build` takes them: the user's (flags, or the hints' own "batch",
    "dynamic_batch", "shape_ranges") first; the hints' static shapes where the target builds
    engines for fixed shapes (TensorRT) or the batch is fixed, else only as the sizes to draw; and
    what neither says, the target's shape policy (`build` applies it)."""
    from deploycc.options import LegalizeOptions

    fixed = {name: list(dims) for name, dims in spec.fixed.items() if name in inputs}  # --shape
    hinted = {name: list(dims) for name, dims in spec.shapes.items()
              if name in inputs and name not in fixed and name not in spec.shape_ranges}
    if spec.batch_range:  # the batch keeps a profile: hint shapes fix every other dim only
        hinted = {name: ["dynamic", *dims[1:]] if dims else dims for name, dims in hinted.items()}
    fix_axes = spec.batch is not None or target.backend.fixed_shape_engines or \
        target.shapes.policy == "static"
    static = {name: [int(d) for d in dims] for name, dims in spec.shapes.items()
              if all(isinstance(d, int) for d in dims) and name in inputs}
    return LegalizeOptions(batch=spec.batch, verify=Stage.VERIFY in spec.stages,
                           shapes={**(hinted if fix_axes else {}), **fixed},
                           inputs=Path(spec.inputs) if spec.inputs else None, sample_shapes=static)


# What a build's messages tell a user to type, in the words of the audit, which takes no model's
# inputs on its command line: they go in the model's hints file.
AUDIT_WORDS = (
    (re.compile(r"(give inputs the model takes: )?--inputs( data\.npz)?( \(one array per input name\))?"),
     'an .npz of inputs named as "inputs" in MODEL.hints.json'),
    (re.compile(r"--sample-shape NAME:DIMS|--sample-shape"), '"shapes" in MODEL.hints.json'),
)


def in_audit_words(text: str) -> str:
    """A build's message with every flag `audit` does not take put as the audit's way to say it."""
    for pattern, words in AUDIT_WORDS:
        text = pattern.sub(words, text)
    return text


# How a build's end counts in the audit: (build status, stage reached) -> (the cell's status, its
# stage, why it failed); None for the stage keeps the build's. Two words of the build's own win
# over a row's failure: the backend's category over backend-error, and the check's category (why
# the model as exported was refused) over unsupported-op. A build that failed at verify without a
# comparison (the engine refused the inputs, or the reference run failed) reads as the build row.
BUILD_TO_CELL: dict[tuple[BuildStatus, Stage], tuple[CellStatus, Stage | None, Failure | None]] = {
    (BuildStatus.VERIFIED, Stage.DONE): (CellStatus.VERIFIED, Stage.VERIFY, None),
    (BuildStatus.PENDING_ON_DEVICE, Stage.DONE): (CellStatus.LEGALIZED, Stage.BUILD, None),
    **{(BuildStatus.NEEDS_INPUTS, stage): (CellStatus.FAILED, Stage.VERIFY, Failure.NEEDS_INPUTS)
       for stage in Stage},
    (BuildStatus.FAILED, Stage.LEGALIZE): (CellStatus.FAILED, None, Failure.UNSUPPORTED_OP),
    (BuildStatus.FAILED, Stage.QUANTIZE): (CellStatus.FAILED, None, Failure.UNSUPPORTED_OP),
    (BuildStatus.FAILED, Stage.BUILD): (CellStatus.FAILED, None, Failure.BACKEND_ERROR),
    (BuildStatus.FAILED, Stage.VERIFY): (CellStatus.FAILED, None, Failure.NUMERIC_MISMATCH),
}
PENDING_MESSAGE = "engine pending on the device (device bundle written)"


def _check(result: CellResult, verdict: TargetVerdict) -> None:
    """The model as exported, judged: legal, or why not (the first refusal's category)."""
    result.legal_as_exported = verdict.legal
    result.blocking_ops = sorted({g.op for g in verdict.illegal})
    result.status = CellStatus.LEGAL_AS_EXPORTED if verdict.legal else CellStatus.FAILED
    if verdict.legal:
        return
    first = verdict.illegal[0] if verdict.illegal else None
    if first is not None:
        result.category = FROM_LEGALITY.get(first.category, Failure.UNSUPPORTED_OP)
        result.message = first.reason
    else:
        findings = [f for f in verdict.graph_findings if f.severity == Severity.ILLEGAL]
        result.category = FROM_LEGALITY.get(findings[0].category, Failure.DTYPE) if findings \
            else Failure.DTYPE
        result.message = "; ".join(f.message for f in findings)


def _build_options(spec: CellSpec, options: LegalizeOptions) -> BuildOptions:
    from deploycc.options import BuildOptions, QuantizeOptions

    quantize = QuantizeOptions(calibration=Path(spec.calibration) if spec.calibration else None,
                               max_drop=spec.max_drop, metric=spec.metric)
    # The matrix is of conversion, at the target's default precision: choosing one would build and
    # time every precision in every cell (pass a precision to the audit to audit another)
    return BuildOptions(
        legalize=options, bench=Stage.BENCH in spec.stages, force=True, choose_precision=False,
        bundle_only=spec.device_engine is not None, precision=spec.precision, quantize=quantize,
        half_analysis=spec.half_analysis,
        batch_range=tuple(spec.batch_range) if spec.batch_range else None,  # type: ignore[arg-type]
        shape_ranges={name: (list(low), list(opt), list(high))
                      for name, (low, opt, high) in spec.shape_ranges.items()})


def _refused_before_building(spec: CellSpec, target: Target, options: BuildOptions,
                             result: CellResult) -> bool:
    """A precision the target lacks (the build's own refusal), or int8 without samples: the cell
    fails before any work, and says how."""
    from deploycc.pipeline.build import resolve_precision

    try:
        precision, _ = resolve_precision(options, target)
    except PrecisionRefused as refused:
        result.status, result.category = CellStatus.FAILED, Failure.PRECISION
        result.message = f"no {refused.precision} on {target.name}: {refused.reason} (use {refused.instead})"
        return True
    if precision == Precision.INT8 and options.quantize.calibration is None:
        result.status, result.category = CellStatus.FAILED, Failure.NEEDS_INPUTS
        result.message = ("no calibration samples for int8: name a folder of .npz samples as "
                          '"calibration" in the model\'s hints file')
        return True
    return False


def _from_build(result: CellResult, report: BuildReport, spec: CellSpec, target: Target,
                options: LegalizeOptions, exported: str | None = None) -> None:
    """The cell as its build ended (BUILD_TO_CELL), with what the build found (`exported`: a
    PyTorch model's export, which host segments are cut from)."""
    legalized = report.legalize
    result.rules = sorted({r.rule for r in legalized.rewrites}) if legalized else []
    result.details = {"build_status": report.status, "summary": report.summary}
    if report.shapes is not None and report.shapes.inputs:
        result.details["shapes"] = report.shapes.line()
    if report.original_on_backend:  # a deploycc bug, set aside by building the model as exported
        result.details["backend_failed_on_deploycc_model"] = True
    if report.quantization is not None:
        quantized = report.quantization
        result.details["int8"] = {
            "decision": quantized.decision, "reason": quantized.reason, "metric": quantized.metric,
            "drop": quantized.drop, "within_budget": quantized.within_budget,
            "faster": quantized.faster, "speed": quantized.speed_text,
            "kept_float": len(quantized.kept_float)}
    reached = report.stage
    if report.status == BuildStatus.FAILED and reached == Stage.VERIFY and report.verification is None:
        reached = Stage.BUILD
    status, stage, failure = BUILD_TO_CELL[(report.status, reached)]
    if failure == Failure.BACKEND_ERROR:
        failure = report.failure_category or failure
    elif failure == Failure.UNSUPPORTED_OP:
        failure = result.category or failure
    result.status, result.stage, result.category = status, stage or report.stage, failure
    if report.status == BuildStatus.VERIFIED:
        if Stage.BENCH in spec.stages and report.benchmark:
            result.status = CellStatus.BENCHMARKED
        result.message = ""
        if report.benchmark is not None:
            result.details["p50_ms"] = report.benchmark.p50_ms
    elif report.status == BuildStatus.PENDING_ON_DEVICE:
        result.message = PENDING_MESSAGE
    elif report.status == BuildStatus.NEEDS_INPUTS:
        result.message = report.summary
    else:
        result.message = _cause(report.summary, legalized)
        # Regressed: refused after deploycc while the model as exported (axes as asked) is not, or
        # failed on the backend, which runs the model as exported.
        refused = bool(result.legal_as_exported) and report.stage == Stage.LEGALIZE and \
            not (legalized is not None and legalized.as_exported)
        result.regressed = refused or bool(report.original_on_backend)
        if (spec.partition or target.mode == LegalizeMode.PARTITION) and report.stage == Stage.LEGALIZE:
            _with_host_segments(spec, target, options, result, exported)


def _from_legalize(result: CellResult, report: LegalizeReport) -> None:
    """The cell as legalization alone ended (no build stage asked)."""
    result.rules = sorted({r.rule for r in report.rewrites})
    if report.success:
        result.status, result.category, result.message = CellStatus.LEGALIZED, None, ""
        return
    result.status = CellStatus.FAILED
    verification = report.verification
    if verification is not None and verification.needs_inputs:
        result.category = Failure.NEEDS_INPUTS
    elif verification is not None and not verification.passed:
        result.category = Failure.NUMERIC_MISMATCH
    else:
        result.category = result.category or Failure.UNSUPPORTED_OP
    result.message = _cause(report.summary, report)
    result.regressed = bool(result.legal_as_exported) and \
        result.category != Failure.NEEDS_INPUTS and not report.as_exported


# The front end's export failure classes as the audit's categories
EXPORT_TO_CELL = {UNSUPPORTED_OP: Failure.UNSUPPORTED_OP, DATA_DEPENDENT: Failure.DYNAMIC_SHAPE,
                  OPSET_CEILING: Failure.OPSET, TORCH_FAILURE: Failure.EXPORT,
                  NOT_PROVEN: Failure.NUMERIC_MISMATCH}


def run_torch_cell(spec: CellSpec, target: Target, result: CellResult) -> None:
    """A cell whose model is a PyTorch model (a .pt2 or TorchScript archive, or a factory): the
    front end exports it for the target as `deploycc build` does, and the cell reads as an ONNX
    model's from there. "Legal as exported" judges the export the front end kept, so a model
    refused after deploycc is still a regression; an export that fails ends the cell at the export
    stage with the front end's class (EXPORT_TO_CELL) and its one line."""
    from deploycc.analysis.check import check_model
    from deploycc.errors import ExportFailed
    from deploycc.frontend.build import EXPORTED, build_from_torch, export_for_target
    from deploycc.frontend.sources import load_source
    from deploycc.options import LegalizeOptions
    from deploycc.pipeline.legalize import legalize

    result.stage = Stage.EXPORT
    source = load_source(spec.model, example_inputs=Path(spec.inputs) if spec.inputs else None)
    if spec.exporters:
        source.exporters = tuple(spec.exporters)
    options = LegalizeOptions(batch=spec.batch, verify=Stage.VERIFY in spec.stages,
                              shapes={name: list(dims) for name, dims in spec.fixed.items()})
    workdir = Path(spec.workdir)
    if Stage.BUILD in spec.stages:
        build_options = _build_options(spec, options)
        if _refused_before_building(spec, target, build_options, result):
            return
        report = build_from_torch(source, target, workdir, build_options)
        exported = workdir / EXPORTED
        if report.stage == Stage.EXPORT:
            _from_export(result, report)
            return
        _check(result, check_model(str(exported), [target]).targets[0])
        result.stage = Stage.BUILD
        _from_build(result, report, spec, target, options, str(exported))
        _note_export(result, report)
        return
    try:
        record, exported_path = export_for_target(source, target, workdir / "export")
    except ExportFailed as failed:
        result.status, result.message = CellStatus.FAILED, str(failed)
        result.category = _export_category(failed.record)
        return
    result.details["export"] = {"chosen": record.chosen, "reason": record.reason}
    _check(result, check_model(str(exported_path), [target]).targets[0])
    if Stage.LEGALIZE in spec.stages:
        result.stage = Stage.LEGALIZE
        _from_legalize(result, legalize(str(exported_path), target, options))


def _from_export(result: CellResult, report: BuildReport) -> None:
    """No exporter exported and proved the model: the first attempt's class, every attempt's line."""
    result.status = CellStatus.FAILED
    result.category = _export_category(report.export)
    result.message = report.summary
    result.details = {"build_status": report.status, "summary": report.summary}
    _note_export(result, report)


def _export_category(record: object) -> Failure:
    """The cell's category for a failed export: the first attempt's class (EXPORT_TO_CELL), or
    out-of-memory where torch ran out of it (a giant's export is not a failure of the exporter)."""
    failures = [a.failure for a in getattr(record, "attempts", []) if a.failure is not None]
    if failures and all(says_out_of_memory(failure.message) for failure in failures):
        return Failure.OUT_OF_MEMORY
    return EXPORT_TO_CELL.get(failures[0].kind, Failure.EXPORT) if failures else Failure.EXPORT


def _note_export(result: CellResult, report: BuildReport) -> None:
    record = report.export
    if record is None:
        return
    result.details["export"] = {
        "chosen": record.chosen, "reason": record.reason,
        "attempts": [{"exporter": a.exporter, "opset": a.opset_written or a.opset_requested,
                      "failure": a.failure.short() if a.failure else None, "outcome": a.outcome}
                     for a in record.attempts]}


def run_cell(spec: CellSpec) -> CellResult:
    from deploycc.analysis.check import check_model
    from deploycc.frontend import shared_exports, source_kind
    from deploycc.pipeline.build import build
    from deploycc.pipeline.legalize import legalize
    from deploycc.rules import proven
    from deploycc.targets.registry import resolve

    started = time.perf_counter()
    result = CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED, stage=Stage.CHECK)
    # The originals' outputs shared between the cells of the audit (a Ray worker runs many cells)
    os.environ[reference.CACHE_ENV], os.environ[reference.MODEL_ENV] = spec.references, spec.model_sha256
    if spec.proofs:
        os.environ[proven.CACHE_ENV] = spec.proofs
    try:
        target = resolve(spec.target, spec.jetpack)
        if source_kind(spec.model) is not None:
            if spec.exports:
                os.environ[shared_exports.CACHE_ENV] = spec.exports
                os.environ[shared_exports.MODEL_ENV] = spec.model_sha256
            run_torch_cell(spec, target, result)
            return _timed(result, started)
        _check(result, check_model(spec.model, [target]).targets[0])
        options = _legalize_options(spec, target, _input_names(spec.model))
        if Stage.BUILD in spec.stages:
            result.stage = Stage.BUILD
            build_options = _build_options(spec, options)
            if _refused_before_building(spec, target, build_options, result):
                return _timed(result, started)
            report = build(spec.model, target, Path(spec.workdir), build_options)
            _from_build(result, report, spec, target, options)
        elif Stage.LEGALIZE in spec.stages:
            result.stage = Stage.LEGALIZE
            _from_legalize(result, legalize(spec.model, target, options))
    except BaseException as error:  # every failure is a cell result, never a dead worker
        if isinstance(error, KeyboardInterrupt):
            raise
        result.status, result.category = CellStatus.FAILED, _category(error)
        result.message = str(error).splitlines()[0] if str(error) else type(error).__name__
        result.regressed = bool(result.legal_as_exported) and result.category not in (
            Failure.OUT_OF_MEMORY, Failure.NEEDS_INPUTS, Failure.DYNAMIC_SHAPE)
    return _timed(result, started)


def _timed(result: CellResult, started: float) -> CellResult:
    result.seconds = round(time.perf_counter() - started, 3)
    result.message = in_audit_words(result.message)
    return result


def main() -> None:
    cell = run_cell(from_dict(CellSpec, json.loads(sys.stdin.read())))
    sys.stdout.write("\n" + json.dumps(asdict(cell)) + "\n")


if __name__ == "__main__":
    main()
