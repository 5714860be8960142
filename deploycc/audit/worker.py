"""One audit cell, run in its own process: `python -m deploycc.audit.worker < spec.json`.

The parent gives it a timeout and a memory limit; whatever happens in here (a segfault in a
backend, a hang, an allocation storm) ends this process only. The last line of stdout is the
cell's result as JSON.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

from deploycc.audit.cells import FROM_LEGALITY, CellResult, CellSpec
from deploycc.taxonomy import CellStatus, Failure


def _category(error: BaseException) -> str:
    """The failure category of an exception that ended a cell (backend errors by default)."""
    from deploycc.errors import DynamicShapeError, ModelInputError
    from deploycc.passes.opset import OpsetConversionError

    if isinstance(error, MemoryError):
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


def _with_host_segments(spec: CellSpec, target, options, result: CellResult) -> None:
    """A model refused as a whole, built again with host segments: the cell says whether that
    deploys (chain verified on ORT, and on the engines where they build here)."""
    from deploycc.audit.cells import HOST_SEGMENTS
    from deploycc.options import BuildOptions
    from deploycc.pipeline.build import PENDING, VERIFIED
    from deploycc.pipeline.partition import build_partitioned

    report = build_partitioned(spec.model, target, Path(spec.workdir) / "partition",
                               BuildOptions(legalize=options, bench=False, force=True))
    result.details["partition"] = {"status": report.status, "summary": report.summary,
                                   "segments": [s["placement"] for s in report.segments],
                                   "device_flops_share": round(report.device_flops_share, 4),
                                   "host_ops": sorted({op for s in report.segments if s["placement"] == "host"
                                                       for op in s["ops"]})}
    devices = sum(1 for s in report.segments if s["placement"] == "device")
    if report.status in (VERIFIED, PENDING) and devices:
        result.status = HOST_SEGMENTS
        result.message = f"{report.summary} (refused as a whole: {result.message})"


def _input_names(model: str) -> set[str]:
    """The names of a model's graph inputs (initializers excluded)."""
    from deploycc import io

    graph = io.load(model, check=False).model.graph
    return {v.name or "" for v in graph.inputs if v.name not in graph.initializers}


def _legalize_options(spec: CellSpec, target, inputs: set[str]):
    """The cell's axes, as `build` takes them: the user's (flags, or the hints' own "batch",
    "dynamic_batch", "shape_ranges") first; the hints' static shapes where the target builds
    engines for fixed shapes (TensorRT) or the batch is fixed, else only as the sizes to draw; and
    what neither says, the target's shape policy (`build` applies it)."""
    from deploycc.backends.registry import get_backend
    from deploycc.options import LegalizeOptions

    fixed = {name: list(dims) for name, dims in spec.fixed.items() if name in inputs}  # --shape
    hinted = {name: list(dims) for name, dims in spec.shapes.items()
              if name in inputs and name not in fixed and name not in spec.shape_ranges}
    if spec.batch_range:  # the batch keeps a profile: hint shapes fix every other dim only
        hinted = {name: ["dynamic", *dims[1:]] if dims else dims for name, dims in hinted.items()}
    fix_axes = spec.batch is not None or get_backend(target.backend.kind).fixed_shape_engines or \
        target.shapes.policy == "static"
    static = {name: [int(d) for d in dims] for name, dims in spec.shapes.items()
              if all(isinstance(d, int) for d in dims) and name in inputs}
    return LegalizeOptions(batch=spec.batch, verify="verify" in spec.stages,
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


def run_cell(spec: CellSpec) -> CellResult:
    from deploycc.analysis.check import check_model
    from deploycc.options import BuildOptions, QuantizeOptions
    from deploycc.pipeline.build import NEEDS_INPUTS, PENDING, VERIFIED, build
    from deploycc.pipeline.legalize import legalize
    from deploycc.targets.registry import resolve

    started = time.perf_counter()
    result = CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED, stage="check")
    try:
        target = resolve(spec.target, spec.jetpack)
        verdict = check_model(spec.model, [target]).targets[0]
        result.legal_as_exported = verdict.legal
        result.blocking_ops = sorted({g.op for g in verdict.illegal})
        result.status = CellStatus.LEGAL_AS_EXPORTED if verdict.legal else CellStatus.FAILED
        if not verdict.legal:
            first = verdict.illegal[0] if verdict.illegal else None
            if first is not None:
                result.category = FROM_LEGALITY.get(first.category, Failure.UNSUPPORTED_OP)
                result.message = first.reason
            else:
                findings = [f for f in verdict.graph_findings if f.severity == "illegal"]
                result.category = FROM_LEGALITY.get(findings[0].category, Failure.DTYPE) if findings \
                    else Failure.DTYPE
                result.message = "; ".join(f.message for f in findings)
        stages = spec.stages
        options = _legalize_options(spec, target, _input_names(spec.model))
        if "build" in stages:
            result.stage = "build"
            quantize = QuantizeOptions(calibration=Path(spec.calibration) if spec.calibration else None,
                                       max_drop=spec.max_drop, metric=spec.metric)
            refused = target.precision.refusal(spec.precision) if spec.precision else None
            if refused is not None:
                result.status, result.category = CellStatus.FAILED, Failure.PRECISION
                result.message = f"no {spec.precision} on {target.name}: {refused[0]} (use {refused[1]})"
                return _timed(result, started)
            if spec.precision == "int8" and quantize.calibration is None:
                result.status, result.category = CellStatus.FAILED, Failure.NEEDS_INPUTS
                result.message = ("no calibration samples for int8: name a folder of .npz samples as "
                                  '"calibration" in the model\'s hints file')
                return _timed(result, started)

            report = build(spec.model, target, Path(spec.workdir), BuildOptions(
                legalize=options, bench="bench" in stages, force=True,
                bundle_only=spec.device_engine is not None, precision=spec.precision, quantize=quantize,
                batch_range=tuple(spec.batch_range) if spec.batch_range else None,  # type: ignore[arg-type]
                shape_ranges={name: (list(low), list(opt), list(high))
                              for name, (low, opt, high) in spec.shape_ranges.items()}))
            result.details = {}
            legalized = report.legalize
            result.rules = sorted({r.rule for r in legalized.rewrites}) if legalized else []
            result.details.update({"build_status": report.status, "summary": report.summary})
            if report.shapes is not None and report.shapes.inputs:
                result.details["shapes"] = report.shapes.line()
            if report.quantization is not None:
                quantized = report.quantization
                result.details["int8"] = {
                    "decision": quantized.decision, "reason": quantized.reason, "metric": quantized.metric,
                    "drop": quantized.drop, "within_budget": quantized.within_budget,
                    "faster": quantized.faster, "speed": quantized.speed_text,
                    "kept_float": len(quantized.kept_float)}
            if report.status == VERIFIED:
                benched = "bench" in stages and report.benchmark
                result.status = CellStatus.BENCHMARKED if benched else CellStatus.VERIFIED
                result.stage, result.category, result.message = "verify", None, ""
                if report.benchmark is not None:
                    result.details["p50_ms"] = report.benchmark.p50_ms
            elif report.status == PENDING:
                result.status, result.stage, result.category = CellStatus.LEGALIZED, "build", None
                result.message = "engine pending on the device (device bundle written)"
            elif report.status == NEEDS_INPUTS:
                result.status, result.stage = CellStatus.FAILED, "verify"
                result.category = Failure.NEEDS_INPUTS
                result.message = report.summary
            else:
                result.status, result.stage = CellStatus.FAILED, report.stage
                ran = report.verification is not None
                if report.stage == "verify" and ran:
                    result.category = Failure.NUMERIC_MISMATCH
                elif report.stage in ("build", "verify"):  # built, and then refused the inputs
                    result.category = report.failure_category or Failure.BACKEND_ERROR
                else:
                    result.category = result.category or Failure.UNSUPPORTED_OP
                result.message = _cause(report.summary, legalized)
                # Regressed: refused after deploycc while the model as exported (axes as asked) is not.
                result.regressed = bool(result.legal_as_exported) and report.stage == "legalize" and \
                    not (legalized is not None and legalized.as_exported)
                if (spec.partition or target.mode == "partition") and report.stage == "legalize":
                    _with_host_segments(spec, target, options, result)
        elif "legalize" in stages:
            result.stage = "legalize"
            report_l = legalize(spec.model, target, options)
            result.rules = sorted({r.rule for r in report_l.rewrites})
            if report_l.success:
                result.status, result.category, result.message = CellStatus.LEGALIZED, None, ""
            else:
                result.status = CellStatus.FAILED
                verification = report_l.verification
                failed_verify = verification is not None and not verification.passed
                if verification is not None and verification.needs_inputs:
                    result.category = Failure.NEEDS_INPUTS
                elif failed_verify:
                    result.category = Failure.NUMERIC_MISMATCH
                else:
                    result.category = result.category or Failure.UNSUPPORTED_OP
                result.message = _cause(report_l.summary, report_l)
                result.regressed = bool(result.legal_as_exported) and \
                    result.category != Failure.NEEDS_INPUTS and not report_l.as_exported
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
    payload = json.loads(sys.stdin.read())
    payload["stages"] = tuple(payload["stages"])
    cell = run_cell(CellSpec(**payload))
    sys.stdout.write("\n" + json.dumps(asdict(cell)) + "\n")


if __name__ == "__main__":
    main()
