"""INT8 for one target: calibrate, quantize with the backend's own tool, judge the metric on the
validation samples, keep layers in float while the budget is not met, and keep fp32 where int8
does not pay off (slower, or not within budget with most layers still int8).

  ort-cpu       ONNX Runtime's quantize_static, Q/DQ in the x86 form (ort_qdq)
  openvino-cpu  NNCF on the OpenVINO model; NNCF's accuracy control as the guard
  TensorRT      Q/DQ in the form TensorRT takes, plus TensorRT's own calibration cache: the DLA
                builds the fp32 model with it (implicit INT8, all it runs); on the GPU the board's
                runner builds both forms, times them and keeps the faster
                ONNX Runtime's quantizer, not NVIDIA's Model Optimizer: ModelOpt writes opset 19
                or newer, which TensorRT 8.5's parser (JetPack 5, the Xavier) does not read;
                ORT's writes any opset from 13, so one tool serves TensorRT 8.5 to 10.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.errors import OptionError
from deploycc.quantize import metrics
from deploycc.quantize.data import Sample, SampleSets, load_sample_sets, model_signature
from deploycc.quantize.guard import GuardStep, greedy
from deploycc.results import Result

if TYPE_CHECKING:
    from deploycc.backends.base import Runner
    from deploycc.options import QuantizeOptions
    from deploycc.targets.schema import Target

INT8_ONNX, INT8_XML, CALIBRATION_CACHE = "model.int8.onnx", "model.int8.xml", "calibration.cache"
TIMED_RUNS = 30
BACKENDS = ("onnxruntime", "openvino", "tensorrt")


@dataclass
class QuantizeReport(Result):
    target: str
    method: str
    # int8, or the target's default precision where int8 did not pay off (slower, or not within
    # the budget)
    decision: str
    reason: str
    metric: str
    fp32_metric: float
    int8_metric: float
    drop: float
    max_drop: float
    within_budget: bool
    calibration_samples: int
    validation_samples: int
    kept_float: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    fp32_latency_ms: float | None = None
    int8_latency_ms: float | None = None
    # OpenVINO: the same two models compiled without INFERENCE_PRECISION_HINT (the CPU's default,
    # bf16 where it has bf16 units), beside the f32-pinned figures above
    default_precision_latency_ms: dict[str, float] = field(default_factory=dict)
    model: str = ""  # the int8 model in the output directory ("" when fp32 is kept)
    calibration_cache: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        if self.fp32_latency_ms and self.int8_latency_ms:
            return round(self.fp32_latency_ms / self.int8_latency_ms, 3)
        return None


def load_samples(source: Path, options: QuantizeOptions) -> SampleSets:
    calibration = options.calibration if options.calibration is not None else options.samples
    validation = options.validation if options.validation is not None else options.validation_samples
    return load_sample_sets(source, calibration, validation)


def _feeds(sample: Sample, inputs: Sequence[str], dtypes: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    return {name: np.asarray(sample[name]).astype(dtypes[name], copy=False) for name in inputs}


@dataclass
class _Context:
    model: Path  # the legalized fp32 model
    target: Target
    options: QuantizeOptions
    sets: SampleSets
    inputs: list[str]
    dtypes: dict[str, np.dtype]
    metric: str = "auto"
    reference: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def fallback(self) -> str:
        """What is built where int8 does not pay off: the target's default precision."""
        default = self.target.precision.default
        return default if default != "int8" else "fp32"

    @functools.cached_property
    def calibration(self) -> list[Sample]:
        """The calibration samples as the legalized model takes them (its inputs, its dtypes)."""
        return [_feeds(s, self.inputs, self.dtypes) for s in self.sets.calibration]

    @functools.cached_property
    def validation(self) -> list[Sample]:
        """The validation samples as the legalized model takes them: converted once, judged on
        by every step of the guard."""
        return [_feeds(s, self.inputs, self.dtypes) for s in self.sets.validation]

    def judge(self, runner: Runner, timed: bool) -> tuple[metrics.Score, float | None]:
        from deploycc.bench.latency import measure

        outputs = [runner.run(feeds) for feeds in self.validation]
        score = metrics.score(self.metric, self.reference, outputs, self.sets.validation)
        if not timed:
            return score, None
        return score, measure(runner, self.validation[0], warmup=3, iterations=TIMED_RUNS).p50_ms

    def step(self, kept: list[str], score: metrics.Score, latency: float | None) -> GuardStep:
        return GuardStep(kept, score, None if latency is None else round(latency, 4),
                         within_budget=score.drop <= self.options.max_drop + 1e-12)


def _ort_runner(model: Path) -> Runner:
    from deploycc.backends.onnxruntime import OrtRunner

    return OrtRunner(model, ["CPUExecutionProvider"])


def _openvino_runner(model: Path, pinned: bool) -> Runner:
    from deploycc.backends.openvino import OpenVinoRunner

    config = {"PERFORMANCE_HINT": "LATENCY"}
    if pinned:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    return OpenVinoRunner(model, "CPU", config)


def _timed(runner: Runner, feeds: dict[str, np.ndarray]) -> float:
    from deploycc.bench.latency import measure

    try:
        return round(measure(runner, feeds, warmup=3, iterations=TIMED_RUNS).p50_ms, 4)
    finally:
        runner.close()


def output_heads(model: Path) -> dict[str, str]:
    """Each graph output's producing op (a linear head or softmax makes class scores)."""
    from deploycc import io

    graph = io.load(model, check=False).model.graph
    heads = {}
    for value in graph.outputs:
        producer = value.producer()
        while producer is not None and producer.op_type == "Identity" and producer.inputs[0] is not None:
            producer = producer.inputs[0].producer()
        if producer is not None:
            heads[value.name or ""] = producer.op_type
    return heads


def quantize_for_target(model: Path, target: Target, options: QuantizeOptions, sets: SampleSets,
                        outdir: Path) -> QuantizeReport:
    """Quantize the legalized fp32 `model` for `target` into `outdir` (model.int8.onnx, or
    model.int8.xml/.bin on OpenVINO, and calibration.cache on TensorRT)."""
    kind = target.backend.kind
    if kind not in BACKENDS:
        raise OptionError(f"no INT8 path for the {kind} backend")
    signature = model_signature(model)
    inputs = list(signature)
    context = _Context(model, target, options, sets, inputs, {n: s.dtype for n, s in signature.items()})
    reference_runner = _ort_runner(model)
    try:
        context.reference = [reference_runner.run(feeds) for feeds in context.validation]
    finally:
        reference_runner.close()
    context.metric = metrics.resolve(options.metric, context.reference, output_heads(model))
    work = Path(tempfile.mkdtemp(prefix="deploycc-int8-"))
    try:
        if kind == "openvino":
            report = _openvino(context, work, outdir)
        else:
            report = _qdq(context, work, outdir)
    except (OptionError, KeyboardInterrupt):
        raise
    except Exception as error:  # the quantizer's own failure on this graph: the float build goes on
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        tool = "NNCF" if kind == "openvino" else "ONNX Runtime's quantizer"
        report = QuantizeReport(
            target=target.name, method=tool, decision=context.fallback,
            reason=f"{tool} failed on this graph ({type(error).__name__}: {first})", metric=context.metric,
            fp32_metric=1.0, int8_metric=0.0, drop=1.0, max_drop=options.max_drop, within_budget=False,
            calibration_samples=len(sets.calibration), validation_samples=len(sets.validation))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.notes = list(sets.notes) + report.notes
    return report


def _report(context: _Context, method: str, steps: list[GuardStep], fp32_ms: float | None) -> QuantizeReport:
    chosen = steps[-1]
    report = QuantizeReport(
        target=context.target.name, method=method, decision="int8", reason="", metric=context.metric,
        fp32_metric=round(chosen.score.fp32, 6), int8_metric=round(chosen.score.value, 6),
        drop=round(chosen.score.drop, 6), max_drop=context.options.max_drop,
        within_budget=chosen.within_budget, calibration_samples=len(context.sets.calibration),
        validation_samples=len(context.sets.validation), kept_float=chosen.kept_float,
        steps=[s.to_dict() for s in steps], fp32_latency_ms=fp32_ms, int8_latency_ms=chosen.latency_ms)
    if chosen.score.detail:
        report.notes.append(chosen.score.detail)
    if not chosen.within_budget:
        report.decision = context.fallback
        report.reason = (f"no int8 model was within the budget: {context.metric} dropped "
                         f"{chosen.score.drop:.4f} (budget {context.options.max_drop}) with "
                         f"{len(chosen.kept_float)} layer(s) in float")
    elif fp32_ms is not None and chosen.latency_ms is not None and chosen.latency_ms >= fp32_ms:
        report.decision = context.fallback
        report.reason = (f"int8 does not pay off here: {chosen.latency_ms:.3f} ms against fp32's "
                         f"{fp32_ms:.3f} ms (p50)")
    else:
        report.reason = (f"{context.metric} {chosen.score.value:.4f} against fp32's "
                         f"{chosen.score.fp32:.4f}, within the budget of {context.options.max_drop}")
    return report


def _qdq(context: _Context, work: Path, outdir: Path) -> QuantizeReport:
    from deploycc.quantize import ort_qdq
    from deploycc.quantize.sensitivity import rank_layers

    on_device = context.target.backend.kind == "tensorrt"
    form = ort_qdq.tensorrt_form() if on_device else ort_qdq.x86_form()
    calibration = context.calibration
    quantizer = ort_qdq.QdqQuantizer(context.model, form, calibration, context.inputs, work=work)
    fp32_ms = None if on_device else _timed(_ort_runner(context.model), context.validation[0])
    attempts: dict[int, Path] = {}

    def attempt(kept: list[str]) -> GuardStep:
        path = quantizer.quantize(work / f"int8-{len(attempts)}.onnx", kept)
        attempts[len(kept)] = path
        runner = _ort_runner(path)
        try:
            score, latency = context.judge(runner, timed=not on_device)
        finally:
            runner.close()
        return context.step(kept, score, latency)

    first = attempt([])
    ranking: list[str] = []
    if not first.within_budget:
        candidates = ort_qdq.quantized_nodes(attempts[0], quantizer.form.op_types)
        by_sqnr = [name for name, _ in rank_layers(quantizer.prepared, attempts[0], candidates,
                                                   context.validation, context.inputs)]
        ranking = _measured_ranking(context, quantizer, by_sqnr, candidates, first.score.value, work)
    steps = greedy(ranking, attempt, first=first) if ranking else [first]
    where = "ONNX Runtime stands in for TensorRT to judge it" if on_device else "timed on ONNX Runtime"
    report = _report(context, f"onnxruntime quantize_static: {quantizer.form.describe()} ({where})", steps,
                     fp32_ms)
    report.notes += quantizer.notes
    report.kept_float = sorted({*quantizer.wide, *report.kept_float})
    if on_device and report.decision == "int8":
        import onnx

        low, high = context.target.opset.min, context.target.opset.max
        problems = ort_qdq.tensorrt_form_problems(onnx.load(attempts[len(report.kept_float)]), (low, high))
        if problems:  # never ship what the parser would refuse
            report.decision = context.fallback
            report.reason = f"the Q/DQ model is not in TensorRT's form: {problems[0]}"
    if report.decision == "int8":
        shutil.copyfile(attempts[len(report.kept_float)], outdir / INT8_ONNX)
        report.model = INT8_ONNX
    if on_device:
        from deploycc.quantize.calibration_cache import entropy_scales, write_cache

        # the DLA builds the legalized fp32 model: the cache names its tensors
        scales = entropy_scales(context.model, calibration, context.inputs)
        write_cache(outdir / CALIBRATION_CACHE, scales, context.target.backend.version)
        report.calibration_cache = CALIBRATION_CACHE
        report.notes.append("the GPU builds the Q/DQ model (explicit quantization, TensorRT's recommended "
                            "form); the DLA builds the fp32 model with calibration.cache (implicit "
                            "quantization, which it needs)")
    return report


SHORTLIST_BY_SQNR, SHORTLIST_BY_SPREAD, RESTORE_SAMPLES = 16, 8, 32


def _measured_ranking(context: _Context, quantizer: Any, by_sqnr: list[str], candidates: list[str],
                      baseline: float, work: Path) -> list[str]:
    """The layers in the order keeping each alone in float raises the metric: measured for a
    shortlist (the most SQNR lost, the widest-spread inputs), the rest after in SQNR order.
    SQNR loss alone misleads: a first layer loses many dB the metric never sees, a BERT FFN
    input with a few huge channels loses few and costs the most."""
    spread = sorted(candidates, key=lambda name: -quantizer.spread.get(name, 1.0))[:SHORTLIST_BY_SPREAD]
    shortlist = list(dict.fromkeys([*by_sqnr[:SHORTLIST_BY_SQNR], *spread]))
    subset = context.sets.validation[:RESTORE_SAMPLES]
    feeds = context.validation[:RESTORE_SAMPLES]
    reference = context.reference[:RESTORE_SAMPLES]
    gains = {}
    for index, name in enumerate(shortlist):
        runner = _ort_runner(quantizer.quantize(work / f"restore-{index}.onnx", [name]))
        try:
            outputs = [runner.run(sample) for sample in feeds]
        finally:
            runner.close()
        gains[name] = metrics.score(context.metric, reference, outputs, subset).value - baseline
    measured = sorted(shortlist, key=lambda name: -gains[name])
    return measured + [name for name in by_sqnr if name not in gains]


def _openvino(context: _Context, work: Path, outdir: Path) -> QuantizeReport:
    import openvino as ov

    from deploycc.quantize import openvino_nncf

    calibration, validation = context.calibration, context.validation
    feeds = validation[0]
    fp32_ms = _timed(_openvino_runner(context.model, pinned=True), feeds)
    source = openvino_nncf.read(context.model)

    def judge(model: Any, name: str, kept: list[str]) -> tuple[GuardStep, Path]:
        path = work / name
        ov.save_model(model, str(path), compress_to_fp16=False)
        runner = _openvino_runner(path, pinned=True)
        try:
            score, latency = context.judge(runner, timed=True)
        finally:
            runner.close()
        return context.step(kept, score, latency), path

    quantized = openvino_nncf.quantize(source, calibration, context.inputs)
    first, path = judge(quantized, "int8-0.xml", [])
    steps = [first]
    if not first.within_budget:
        def evaluate(compiled: Any, indices: list[int]) -> tuple[float, list[float]]:
            outputs = []
            for index in indices:
                result = compiled(validation[index])
                outputs.append({port.get_any_name(): np.asarray(result[port]) for port in compiled.outputs})
            reference = [context.reference[i] for i in indices]
            samples = [context.sets.validation[i] for i in indices]
            per_sample = [metrics.score(context.metric, [r], [o], [s]).value
                          for r, o, s in zip(reference, outputs, samples, strict=True)]
            return metrics.score(context.metric, reference, outputs, samples).value, per_sample

        guarded = openvino_nncf.quantize_guarded(openvino_nncf.read(context.model), calibration, validation,
                                                 context.inputs, evaluate, context.options.max_drop)
        kept = sorted(openvino_nncf.quantized_ops(quantized) - openvino_nncf.quantized_ops(guarded))
        step, path = judge(guarded, "int8-guarded.xml", kept)
        steps.append(step)
    report = _report(context, "NNCF quantize on the OpenVINO model (accuracy control as the guard), "
                              "compiled with INFERENCE_PRECISION_HINT f32", steps, fp32_ms)
    report.default_precision_latency_ms = {
        "fp32": _timed(_openvino_runner(context.model, pinned=False), feeds),
        "int8": _timed(_openvino_runner(path, pinned=False), feeds)}
    if report.decision == "int8":
        shutil.copyfile(path, outdir / INT8_XML)
        shutil.copyfile(path.with_suffix(".bin"), outdir / "model.int8.bin")
        report.model = INT8_XML
    return report
