"""INT8 for one target: calibrate, quantize with the backend's own tool, judge the metric on the
validation samples, keep layers in float while the budget is not met, and keep fp32 where int8
does not pay off (not within budget with most layers still int8, or not faster beyond noise when
the two are timed in interleaved rounds). --require-int8 makes that a failed build instead.

The backend chooses how (`Backend.stages.int8`, an `Int8Recipe`); this package does it:

  Quantizer.ORT_QDQ  ONNX Runtime's quantize_static, Q/DQ in the recipe's layout (ort_qdq: the
                     x86 form for ort-cpu, the form TensorRT takes), judged on ONNX Runtime
  Quantizer.NNCF     NNCF on the backend's own model (openvino-cpu), judged and timed by the
                     backend's int8 runner (`Backend.runners.int8`); NNCF's accuracy control as
                     the guard
  calibration_cache  also the engine's own calibration cache (TensorRT's): the DLA builds the fp32
                     model with it (implicit INT8, all it runs); on the GPU the board's runner
                     builds both forms, times them and keeps the faster
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.backends.base import Int8Recipe, QdqLayout, Quantizer
from deploycc.errors import OptionError
from deploycc.quantize import metrics
from deploycc.quantize.data import Sample, SampleSets, load_sample_sets, model_signature
from deploycc.quantize.guard import GuardStep, greedy
from deploycc.records.bench import Comparison
from deploycc.records.quantize import QuantizeReport  # re-exported: a record, in records/
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from deploycc.backends.base import Backend, Runner
    from deploycc.options import QuantizeOptions
    from deploycc.targets.schema import Target

INT8_ONNX, CALIBRATION_CACHE = "model.int8.onnx", "calibration.cache"
# NNCF's int8 IR is written under the OpenVINO artifact's own names: the backend takes it as it
# is, where a second name would leave two byte-identical copies in the output directory
OPENVINO_IR = "model.xml"
# int8 against fp32: warm-up runs each, then interleaved pairs (bench --compare-to's A/B), as many
# as fit in about RACE_SECONDS within these bounds. On a busy 2-core machine 50 pairs of a 0.4 ms
# model left an interval reaching 1.01 around a ratio of 0.4; 400 pairs of it take 0.2 s.
RACE_WARMUP, RACE_SECONDS, RACE_PAIRS = 5, 2.0, (100, 400)
NNCF_MISSING = "needs NNCF: pip install 'deploycc[int8]'"


def check_ready(target: Target, precision: Precision, options: QuantizeOptions) -> None:
    """Refuse, before any work, an int8 request this machine or these options cannot honour:
    --require-int8 on a build that is not int8, and OpenVINO without NNCF (an optional extra;
    quantizing without it would only fall back to fp32 and call that a result)."""
    if options.require_int8 and precision != Precision.INT8:
        if options.allow_fallback:
            raise OptionError(f"--require-int8, but this build is {precision}: --require-int8 and "
                              "--allow-fallback ask for opposite things")
        raise OptionError(f"--require-int8, but this build is {precision}: add --precision int8")
    recipe = _recipe(target) if precision == Precision.INT8 else None
    if recipe is not None and recipe.quantizer == Quantizer.NNCF:
        try:
            import nncf  # noqa: F401
        except ImportError:
            raise OptionError(f"int8 on {target.name} {NNCF_MISSING}") from None


def _backend(target: Target) -> Backend:
    from deploycc.backends.registry import get_backend

    return get_backend(target.backend.kind)


def _recipe(target: Target) -> Int8Recipe | None:
    return _backend(target).stages.int8


def _own_runner(backend: Backend) -> Callable[[Path, bool], Runner]:
    """The backend's runner on its own int8 model, which judges and times NNCF's candidates:
    (model, pinned to the precision an int8 build pins its float parts to)."""
    if backend.runners.int8 is None:
        raise OptionError(f"{backend.kind} has no runner for its own int8 model")
    return backend.runners.int8


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
    backend: Backend
    recipe: Int8Recipe
    options: QuantizeOptions
    sets: SampleSets
    inputs: list[str]
    dtypes: dict[str, np.dtype]
    metric: str = "auto"
    reference: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def fallback(self) -> Precision:
        """What is built where int8 does not pay off: the target's default precision."""
        default = self.target.precision.default
        return default if default != Precision.INT8 else Precision.FP32

    @functools.cached_property
    def calibration(self) -> list[Sample]:
        """The calibration samples as the legalized model takes them (its inputs, its dtypes)."""
        return [_feeds(s, self.inputs, self.dtypes) for s in self.sets.calibration]

    @functools.cached_property
    def validation(self) -> list[Sample]:
        """The validation samples as the legalized model takes them: converted once, judged on
        by every step of the guard."""
        return [_feeds(s, self.inputs, self.dtypes) for s in self.sets.validation]

    def judge(self, runner: Runner, kept: list[str]) -> GuardStep:
        """The metric of a candidate on the validation samples (its speed is raced once, at the end),
        and where options.min_cosine asks, each output as verification will judge it."""
        outputs = [runner.run(feeds) for feeds in self.validation]
        score = metrics.score(self.metric, self.reference, outputs, self.sets.validation)
        beyond = self.beyond_verification(outputs)
        within = score.drop <= self.options.max_drop + 1e-12 and not beyond
        return GuardStep(kept, score, within_budget=within, notes=[beyond] if beyond else [])

    def beyond_verification(self, outputs: list[dict[str, np.ndarray]]) -> str:
        """Where an output of a validation sample is beyond what `--precision auto` holds an int8
        engine to (options.min_cosine and int8's verification tolerances): a metric within its drop
        with an output at cosine 0.9988 was chosen by this guard, and then refused by the search."""
        if not self.options.min_cosine:
            return ""
        from deploycc.verify.compare import MISMATCH_SHARE, TOLERANCES, compare

        atol, rtol, cosine = TOLERANCES[Precision.INT8]
        for number, (want, got) in enumerate(zip(self.reference, outputs, strict=True), start=1):
            for name, array in want.items():
                if np.asarray(array).dtype.kind != "f":
                    continue
                result = compare(name, array, got[name], atol=atol, rtol=rtol, mismatch_share=MISMATCH_SHARE[
                    Precision.INT8], min_cosine=max(cosine, self.options.min_cosine))
                if not result.passed:
                    return f"{name} on validation sample {number}: {result.problem}"
                # the search's cosine holds where every element is within atol too (ALBERT's int8 was
                # refused by it at an output's cosine 0.966248, its largest error 0.023)
                if not result.degenerate and result.cosine_similarity < self.options.min_cosine:
                    return (f"{name} on validation sample {number}: cosine {result.cosine_similarity:.6f} < "
                            f"{self.options.min_cosine}")
        return ""


def _ort_runner(model: Path) -> Runner:
    """ONNX Runtime on the CPU, whatever the target: the fp32 reference every int8 model is judged
    against (as verification's), and where ORT_QDQ's Q/DQ models are judged and timed."""
    from deploycc.backends.onnxruntime import OrtRunner

    return OrtRunner(model, ["CPUExecutionProvider"])


def _race(int8: Runner, fp32: Runner, feeds: dict[str, np.ndarray]) -> Comparison:
    """int8 against fp32 the way `bench --compare-to` times two engines: both warmed, then A B B A
    rounds, so a job that starts half-way slows both alike, and a bootstrap interval of the ratio
    of medians. Two runs timed one after the other printed "13.4x fp32's speed" on a busy 2-core
    machine for a model that, timed alone, ran at 0.35x fp32's latency."""
    from deploycc.bench.run import compare

    try:
        int8.run(feeds)  # the first runs are the slowest by far: not counted in the pilot below
        fp32.run(feeds)
        started = time.perf_counter()
        for _ in range(RACE_WARMUP):
            int8.run(feeds)
            fp32.run(feeds)
        pair_seconds = (time.perf_counter() - started) / RACE_WARMUP
        low, high = RACE_PAIRS
        pairs = int(min(high, max(low, RACE_SECONDS / max(pair_seconds, 1e-6))))
        return compare(int8, fp32, feeds, pairs, "fp32")
    finally:
        int8.close()
        fp32.close()


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
    """Quantize the legalized fp32 `model` for `target` into `outdir` (model.int8.onnx, or with
    NNCF the IR under OpenVINO's artifact names model.xml/.bin, and calibration.cache where the
    recipe asks for it)."""
    backend = _backend(target)
    recipe = backend.stages.int8
    if recipe is None:
        raise OptionError(f"no INT8 path for the {target.backend.kind} backend")
    signature = model_signature(model)
    inputs = list(signature)
    context = _Context(model, target, backend, recipe, options, sets, inputs,
                       {n: s.dtype for n, s in signature.items()})
    reference_runner = _ort_runner(model)
    try:
        context.reference = [reference_runner.run(feeds) for feeds in context.validation]
    finally:
        reference_runner.close()
    context.metric = metrics.resolve(options.metric, context.reference, output_heads(model))
    work = Path(tempfile.mkdtemp(prefix="deploycc-int8-"))
    try:
        report = QUANTIZERS[recipe.quantizer](context, work, outdir)
    except (OptionError, KeyboardInterrupt):
        raise
    except Exception as error:  # the quantizer's own failure on this graph: the float build goes on
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        tool = "NNCF" if recipe.quantizer == Quantizer.NNCF else "ONNX Runtime's quantizer"
        report = QuantizeReport(
            target=target.name, method=tool, decision=context.fallback,
            reason=f"{tool} failed on this graph ({type(error).__name__}: {first})", metric=context.metric,
            fp32_metric=1.0, int8_metric=0.0, drop=1.0, max_drop=options.max_drop, within_budget=False,
            calibration_samples=len(sets.calibration), validation_samples=len(sets.validation))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.notes = list(sets.notes) + report.notes
    report.required = options.require_int8
    report.unjudged = metrics.judges_nothing(context.metric, context.reference)
    return report


def _report(context: _Context, method: str, steps: list[GuardStep],
            race: Callable[[], Comparison] | None) -> QuantizeReport:
    """The guard's verdict on its last step: int8 when within the budget and, where `race` times
    the chosen model against fp32 here, faster beyond noise; else the target's fallback."""
    chosen = steps[-1]
    report = QuantizeReport(
        target=context.target.name, method=method, decision=Precision.INT8, reason="", metric=context.metric,
        fp32_metric=round(chosen.score.fp32, 6), int8_metric=round(chosen.score.value, 6),
        drop=round(chosen.score.drop, 6), max_drop=context.options.max_drop,
        within_budget=chosen.within_budget, calibration_samples=len(context.sets.calibration),
        validation_samples=len(context.sets.validation), kept_float=chosen.kept_float,
        steps=[s.to_dict() for s in steps])
    if chosen.score.detail:
        report.notes.append(chosen.score.detail)
    if not chosen.within_budget:
        report.decision = context.fallback
        within_metric = chosen.score.drop <= context.options.max_drop + 1e-12
        report.reason = (f"no int8 model was within the budget: with {len(chosen.kept_float)} layer(s) in "
                         f"float, {chosen.notes[0]}" if within_metric and chosen.notes else
                         f"no int8 model was within the budget: {context.metric} dropped "
                         f"{chosen.score.drop:.4f} (budget {context.options.max_drop}) with "
                         f"{len(chosen.kept_float)} layer(s) in float")
        return report
    if race is not None:
        report.speed = race()
        report.int8_latency_ms, report.fp32_latency_ms = report.speed.median_ms, report.speed.other_median_ms
    if report.faster is False:
        report.decision = context.fallback
        report.reason = f"int8 does not pay off here: {report.speed_text}"
    else:
        report.reason = (f"{context.metric} {chosen.score.value:.4f} against fp32's "
                         f"{chosen.score.fp32:.4f}, within the budget of {context.options.max_drop}")
    return report


def _qdq(context: _Context, work: Path, outdir: Path) -> QuantizeReport:
    from deploycc.quantize import ort_qdq
    from deploycc.quantize.sensitivity import rank_layers

    recipe = context.recipe
    form = ort_qdq.form_for(recipe.qdq_layout)
    calibration = context.calibration
    quantizer = ort_qdq.QdqQuantizer(context.model, form, calibration, context.inputs, work=work)
    attempts: dict[int, Path] = {}

    def attempt(kept: list[str]) -> GuardStep:
        path = quantizer.quantize(work / f"int8-{len(attempts)}.onnx", kept)
        attempts[len(kept)] = path
        runner = _ort_runner(path)
        try:
            return context.judge(runner, kept)
        finally:
            runner.close()

    first = attempt([])
    ranking: list[str] = []
    if not first.within_budget:
        candidates = ort_qdq.quantized_nodes(attempts[0], quantizer.form.op_types)
        by_sqnr = [name for name, _ in rank_layers(quantizer.prepared, attempts[0], candidates,
                                                   context.validation, context.inputs)]
        ranking = _measured_ranking(context, quantizer, by_sqnr, candidates, first.score.value, work)
    steps = greedy(ranking, attempt, first=first) if ranking else [first]
    chosen = attempts[len(steps[-1].kept_float)]

    def race() -> Comparison:
        return _race(_ort_runner(chosen), _ort_runner(context.model), context.validation[0])

    # an engine built elsewhere (on the board) is judged here with ONNX Runtime standing in, not timed
    where = f"ONNX Runtime stands in for {recipe.stand_in_for} to judge it" if recipe.stand_in_for \
        else "timed on ONNX Runtime"
    report = _report(context, f"onnxruntime quantize_static: {quantizer.form.describe()} ({where})", steps,
                     None if recipe.stand_in_for else race)
    report.notes += quantizer.notes
    report.kept_float = sorted({*quantizer.wide, *report.kept_float})
    if recipe.qdq_layout == QdqLayout.TENSORRT and report.decision == Precision.INT8:
        import onnx

        low, high = context.target.opset.min, context.target.opset.max
        problems = ort_qdq.tensorrt_form_problems(onnx.load(chosen), (low, high))
        if problems:  # never ship what the parser would refuse
            report.decision = context.fallback
            report.reason = f"the Q/DQ model is not in TensorRT's form: {problems[0]}"
    if report.decision == Precision.INT8:
        shutil.copyfile(chosen, outdir / INT8_ONNX)
        report.model = INT8_ONNX
    if recipe.calibration_cache:
        _write_calibration_cache(context, report, outdir)
    return report


def _write_calibration_cache(context: _Context, report: QuantizeReport, outdir: Path) -> None:
    """TensorRT's implicit-quantization scales beside the Q/DQ model, for the DLA."""
    from deploycc.quantize.calibration_cache import entropy_scales, write_cache

    # the DLA builds the legalized fp32 model: the cache names its tensors
    scales = entropy_scales(context.model, context.calibration, context.inputs)
    write_cache(outdir / CALIBRATION_CACHE, scales, context.target.backend.version)
    report.calibration_cache = CALIBRATION_CACHE
    report.notes.append("the GPU builds the Q/DQ model (explicit quantization, TensorRT's recommended "
                        "form); the DLA builds the fp32 model with calibration.cache (implicit "
                        "quantization, which it needs)")


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


def _nncf(context: _Context, work: Path, outdir: Path) -> QuantizeReport:
    from deploycc.io.files import save_openvino_ir
    from deploycc.quantize import openvino_nncf

    calibration, validation = context.calibration, context.validation
    feeds, own_runner = validation[0], _own_runner(context.backend)
    source = openvino_nncf.read(context.model)

    def judge(model: Any, name: str, kept: list[str]) -> tuple[GuardStep, Path]:
        path = work / name
        save_openvino_ir(model, path)
        runner = own_runner(path, True)  # pinned
        try:
            return context.judge(runner, kept), path
        finally:
            runner.close()

    quantized = openvino_nncf.quantize(source, calibration, context.inputs)
    first, path = judge(quantized, "int8-0.xml", [])
    scheme, schemes = openvino_nncf.AUTO, ""
    if not first.within_budget and openvino_nncf.model_type(source) is not None:
        # NNCF's transformer scheme (SmoothQuant, Softmax's inputs left float) broke a legalized Whisper
        # encoder (an output's cosine 0.9988) that its default scheme keeps at 0.99995: both, before the
        # accuracy control, which starts from the better
        default = openvino_nncf.quantize(openvino_nncf.read(context.model), calibration, context.inputs, None)
        step, default_path = judge(default, "int8-0-default-scheme.xml", [])
        better = step.within_budget or step.score.value > first.score.value
        schemes = (f"NNCF's transformer scheme: {_scored(first)}; its "
                   f"default scheme: {_scored(step)} (the accuracy control starts from the "
                   f"{'default' if better else 'transformer'} scheme's)")
        if better:
            quantized, first, path, scheme = default, step, default_path, None
    steps, out_of_time = [first], ""
    if not first.within_budget:
        def evaluate(compiled: Any, indices: list[int]) -> tuple[float, list[float]]:
            outputs = []
            for index in indices:
                result = compiled(validation[index])
                outputs.append({port.get_any_name(): np.asarray(result[port]) for port in compiled.outputs})
            reference = [context.reference[i] for i in indices]
            if context.options.min_cosine:  # the worst output's cosine, which the budget bounds
                worst = [metrics.worst_cosine(r, o) for r, o in zip(reference, outputs, strict=True)]
                return min(worst), worst
            samples = [context.sets.validation[i] for i in indices]
            per_sample = [metrics.score(context.metric, [r], [o], [s]).value
                          for r, o, s in zip(reference, outputs, samples, strict=True)]
            return metrics.score(context.metric, reference, outputs, samples).value, per_sample

        # aiming at the worst output's cosine, fp32 at 1: a drop of 1 - min_cosine at most
        aimed = context.options.min_cosine
        max_drop = 1.0 - aimed if aimed else context.options.max_drop
        try:
            guarded = openvino_nncf.quantize_guarded(openvino_nncf.read(context.model), calibration,
                                                     validation, context.inputs, evaluate, max_drop, scheme)
        except openvino_nncf.GuardOutOfTime as stopped:
            out_of_time = (f"NNCF's accuracy control was {stopped} (its limit: "
                           f"{openvino_nncf.GUARD_SECONDS:.0f} s) with no int8 model within the budget")
        else:
            kept = sorted(openvino_nncf.quantized_ops(quantized) - openvino_nncf.quantized_ops(guarded))
            step, path = judge(guarded, "int8-guarded.xml", kept)
            steps.append(step)

    def race(pinned: bool) -> Comparison:
        return _race(own_runner(path, pinned), own_runner(context.model, pinned), feeds)

    report = _report(context, "NNCF quantize on the OpenVINO model (accuracy control as the guard), "
                              "compiled with INFERENCE_PRECISION_HINT f32", steps, lambda: race(pinned=True))
    if out_of_time:
        report.reason += f"; {out_of_time}"
    if schemes:
        report.notes.append(schemes)
    unpinned = race(pinned=False)
    report.default_precision_latency_ms = {"fp32": unpinned.other_median_ms, "int8": unpinned.median_ms}
    if report.decision == Precision.INT8:
        # under the artifact's names: the backend builds this IR as it is, and it stays the one copy
        shutil.copyfile(path, outdir / OPENVINO_IR)
        shutil.copyfile(path.with_suffix(".bin"), (outdir / OPENVINO_IR).with_suffix(".bin"))
        report.model = OPENVINO_IR
    return report


def _scored(step: GuardStep) -> str:
    """A guard step in words: its metric, and where an output is beyond the budget, which."""
    return f"{step.score.metric} {step.score.value:.6f}" + (f", {step.notes[0]}" if step.notes else "") + (
        ", within the budget" if step.within_budget else "")


# The quantizers a backend's recipe names, and the function here that runs each
QUANTIZERS: dict[Quantizer, Callable[[_Context, Path, Path], QuantizeReport]] = {
    Quantizer.ORT_QDQ: _qdq, Quantizer.NNCF: _nncf}
