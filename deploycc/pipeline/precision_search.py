"""`--precision auto`: of the precisions the target offers, the fastest whose engine stays within the
accuracy budget, decided by measurement where the target runs here and from its data where it runs
elsewhere.

Each candidate (fp32, bf16, fp16; int8 with calibration data, or where the backend quantizes
constant weights ahead and activations at run time, and given data both where it does; weight-only
int8 and int4 for a decoder with a KV cache, judged by its greedy generation and timed on a decode
step) is built from the one legalized model by the build's own stages (quantize, the half-precision
analysis, the engine, verification), each in a folder of its own, on the inputs the build drew once.
A half candidate is built with every layer in half first: when that engine is within budget no layer
needs to stay in fp32, and the analysis that finds such layers (emulated runs, a third of a small
CNN's search) is not run; when it is not, the analysis runs and the candidate is built again with
what it keeps. Those within budget are timed against the fp32 engine, interleaved (A B B A, as
`bench --compare-to`; pipeline/precision_timing.py), and the one with the lowest median ratio whose
whole 95% interval lies below FASTER is chosen; none: fp32. Where two are faster than fp32, the two
with the lowest ratios are raced against each other, and the narrower is chosen only where faster
than the other beyond the noise. The chosen candidate's engine, verified, is the build's: the later
stages take it as it is (the bench times it).

The budget: the candidate's verification passes at its precision's tolerances (those fp16 and int8
builds are judged by everywhere), and every output's cosine against the original is at least
MIN_COSINE.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.io.files import disk_full
from deploycc.pipeline.context import BuildContext, verifying_on_sample
from deploycc.pipeline.precision_cache import cache_file, remember, remembered_choice
from deploycc.pipeline.precision_timing import FASTER, duel, loaded, pairs, race
from deploycc.records.precision import PrecisionCandidate, PrecisionChoice
from deploycc.taxonomy import QUANTIZED, WEIGHT_ONLY_BITS, BuildStatus, CandidateOutcome, Precision

if TYPE_CHECKING:
    from deploycc.pipeline.stages import BuildStage
    from deploycc.records.verification import Verification

MIN_COSINE = 0.999
BUDGET = (f"verification at the precision's tolerances, and every output's cosine against the "
          f"original >= {MIN_COSINE}")
ORDER = (Precision.FP32, Precision.BF16, Precision.FP16, Precision.INT8, Precision.INT8_WEIGHTS,
         Precision.INT4)
SEARCH_FOLDER = ".precision"  # in the staging folder, removed when the choice is made
# The build's stages a candidate runs, by name (the same functions, so a candidate is built as
# the chosen one will be): the build's stage list hands them over
CANDIDATE_STAGES = ("quantize", "int8-dynamic", "weight-only", "half", "half-declined", "build", "verify",
                    "generate")
HALF_ANALYSIS_STAGES = ("half", "half-declined")


def candidates(context: BuildContext) -> list[Precision]:
    """The precisions to try: the target's, in ORDER, but those it computes in float32 (declined);
    int8 with calibration data, or without where the backend quantizes weights ahead and
    activations at run time and the model has such weights."""
    supported = context.target.precision.supported
    return [p for p in ORDER if p in supported and p not in declined(context)
            and (p != Precision.INT8 or _int8_candidate(context))
            and (p not in WEIGHT_ONLY_BITS or _weight_only_candidate(context))]


# The element type of each half precision, as the target's [dtypes.computed_as] names it
HALF_DTYPES = {Precision.FP16: "float16", Precision.BF16: "bfloat16"}


def declined(context: BuildContext) -> dict[Precision, str]:
    """The half precisions the target offers and computes in another type, from its data (ONNX
    Runtime's CPU provider has no float16 kernel for Conv, MatMul or Gemm: its InsertCastTransformer
    runs them in float32) or, where the runtime picks by the device, from the backend (OpenVINO's
    CPU plugin computes f16 as bf16 without FP16 units): such an engine saves nothing, or is another
    candidate's, so it is not built, and the report says why. Likewise int8 weight-only beside a
    dynamic int8 candidate, which keeps the same weights in int8."""
    supported = context.target.precision.supported
    computed = {p: context.target.dtypes.computed_as_dtype(dtype) for p, dtype in HALF_DTYPES.items()}
    found = {p: (f"{context.target.name} computes {HALF_DTYPES[p]} as {computed[p]} (the target's "
                 "dtypes.computed_as): it saves no arithmetic, so it is not built")
             for p in ORDER if p in supported and p in computed and computed[p] != HALF_DTYPES[p]}
    computes_as = context.backend.stages.computes_as
    for precision in HALF_DTYPES:
        if computes_as is None or precision in found or precision not in supported:
            continue
        other = computes_as(context.target, precision)
        if other != precision:
            same = f"the {other} candidate's engine" if other in supported else "it saves nothing"
            found[precision] = (f"{context.target.device.kind} here computes {precision} as {other} (the "
                                f"runtime picks by this machine's units): {same}, so it is not built")
    if Precision.INT8_WEIGHTS in supported and _int8_candidate(context) and context.samples is None \
            and _weight_only_candidate(context):
        # ONNX Runtime's dynamic int8 keeps the same MatMul weights in int8 (TinyLlama-1.1B: 3.06x fp32
        # on a decode step, int8-weights 3.02x), and a second 8-bit engine beside fp32 in the race
        # took the build past its memory bound (1.78x the weights, from 1.52x)
        found[Precision.INT8_WEIGHTS] = ("the int8 candidate (dynamic) already keeps the MatMul weights in "
                                         "int8, its activations quantized at run time: the same weights' "
                                         "candidate twice, so it is not built")
    return found


def _int8_candidate(context: BuildContext) -> bool:
    return context.samples is not None or _dynamic_int8(context)


def _dynamic_int8(context: BuildContext) -> bool:
    from deploycc.quantize.dynamic import quantizable_weights

    recipe = context.backend.stages.int8
    return recipe is not None and recipe.dynamic and quantizable_weights(context.model.graph) > 0


# The recipes of an int8 candidate given calibration data: calibrated on it, and dynamic beside it
CALIBRATED, DYNAMIC = "calibrated on the given samples", "dynamic"
Key = tuple[Precision, str]  # a candidate: its precision and its recipe ("": the precision's one)


def candidate_keys(context: BuildContext) -> list[Key]:
    """The candidates to build: int8 given calibration data twice where the backend also quantizes
    weights ahead and activations at run time, calibrated on the data and dynamic (which needs none):
    a random-weight BERT given calibration data kept fp32 on ort-cpu, where without data its dynamic
    int8 was chosen, and data given must not make the artifact slower than none."""
    keys: list[Key] = []
    for precision in candidates(context):
        if precision == Precision.INT8 and context.samples is not None:
            keys += [(precision, CALIBRATED)] + ([(precision, DYNAMIC)] if _dynamic_int8(context) else [])
        else:
            keys.append((precision, ""))
    return keys


def _weight_only_candidate(context: BuildContext) -> bool:
    """Weight-only (int4, int8-weights) for a decoder with a KV cache, whose tokens it speeds (each
    step reads every weight once: TinyLlama-1.1B's int4 decode 3.6x fp32 on ORT, 2.5x on OpenVINO),
    judged by its greedy generation; not for encoders, where the corpus measured int4 no faster
    than the chosen one."""
    from deploycc.quantize.dynamic import quantizable_weights

    return context.decoder is not None and context.backend.stages.weight_only is not None and \
        quantizable_weights(context.model.graph) > 0


DECODE_STEP = " (one decode step, what each generated token costs)"


def timing_feeds(context: BuildContext) -> dict[str, Any]:
    """What the candidates are timed on: the inputs the build drew, or for a decoder with a KV cache
    one decode step after the drawn cache (a generation's cost is its tokens: the drawn forward is
    a prompt's, where int4's unpacking weighs more than its weights read)."""
    from deploycc.verify.generation import decode_step

    drawn = context.inputs().feeds
    return decode_step(context.decoder, drawn) if context.decoder is not None else drawn


def measured_here(context: BuildContext) -> bool:
    """Whether this machine is the target's: a CPU target whose backend builds and runs here."""
    return context.target.device.kind == "CPU" and context.backend.unavailable_reason() is None


def choose_precision(context: BuildContext, stages: Sequence[BuildStage[BuildContext]]) -> None:
    """Set the context's precision to the fastest candidate within budget; each candidate is built
    by `stages` (the build's own, those named CANDIDATE_STAGES)."""
    started = time.perf_counter()
    default = Precision(context.target.precision.default)
    if not measured_here(context):
        why = (f"{context.target.name} runs on its device, not here: its default precision, from the "
               "target's data")
        context.precision = default
        context.precision_choice = PrecisionChoice(default, BUDGET, [PrecisionCandidate(
            default, CandidateOutcome.NOT_MEASURED, why)])
        context.notes.append(f"--precision auto: {default} ({why})")
        return
    feeds = timing_feeds(context)  # drawn by the build itself: every candidate takes them
    cache = cache_file(context, [str(p) for p in candidates(context)], BUDGET)
    remembered = remembered_choice(cache)
    if remembered is not None:
        remembered.seconds, remembered.cached = round(time.perf_counter() - started, 3), True
        context.precision, context.precision_choice = remembered.chosen, remembered
        context.notes.append(f"--precision auto: {remembered.chosen}, as measured for this model, these "
                             "options and this machine before")
        return
    folder = context.staging / SEARCH_FOLDER
    built: dict[Key, BuildContext] = {}
    tried: list[PrecisionCandidate] = []
    try:
        for key in candidate_keys(context):
            candidate, verdict = _built_and_judged(context, key, folder, stages)
            candidate.close()  # the race and the adoption load their own: one engine held at a time
            if verdict is None:
                built[key] = candidate
            else:
                verdict.recipe = key[1]
                tried.append(verdict)
        try:
            timed = _timed(built, feeds)
        except Exception as error:  # an engine that verified and then fails to run again: fp32, said
            why = f"timing failed ({type(error).__name__}: {str(error).strip()[:150]}): fp32 kept"
            timed = [_candidate(p, CandidateOutcome.FAILED, why, c.verification, recipe=recipe)
                     for (p, recipe), c in built.items()]
        tried = [*timed, *tried]
        winner = next((c for c in tried if c.outcome == CandidateOutcome.CHOSEN), None)
        chosen = winner.precision if winner is not None else Precision.FP32
        context.precision = chosen
        if winner is not None and (chosen, winner.recipe) in built:
            _adopt(context, built[(chosen, winner.recipe)])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    tried += [PrecisionCandidate(p, CandidateOutcome.NOT_MEASURED, why)
              for p, why in declined(context).items()]
    tried.sort(key=lambda c: (ORDER.index(c.precision), c.recipe))
    context.precision_choice = PrecisionChoice(chosen, BUDGET, tried,
                                               {name: list(array.shape) for name, array in feeds.items()},
                                               round(time.perf_counter() - started, 3),
                                               timed_on=DECODE_STEP if context.decoder is not None else "")
    context.notes.append(f"--precision auto: {chosen} (" + "; ".join(
        f"{c.precision}{f' ({c.recipe})' if c.recipe else ''} {c.outcome}" for c in tried) + ")")
    if cache is not None and not any(c.outcome == CandidateOutcome.FAILED for c in tried):
        remember(cache, context.precision_choice)


def _built_and_judged(context: BuildContext, key: Key, folder: Path,
                      stages: Sequence[BuildStage[BuildContext]]
                      ) -> tuple[BuildContext, PrecisionCandidate | None]:
    """The candidate built, and why it is not within budget (None: it is). A half candidate in
    every layer's half first; the half analysis and a second build only where that is over budget."""
    precision, recipe = key
    analysed = precision in HALF_DTYPES and context.options.half_analysis
    if not analysed:
        named = precision.value + ("-dynamic" if recipe == DYNAMIC else "")
        candidate = _build_candidate(context, precision, folder / named, stages, dynamic=recipe == DYNAMIC)
        return candidate, _judged(candidate, precision)
    plain = _build_candidate(context, precision, folder / f"{precision.value}-all",
                             [stage for stage in stages if stage.name not in HALF_ANALYSIS_STAGES])
    verdict = _judged(plain, precision) or _on_other_samples(context, plain, precision, stages)
    if verdict is None:
        plain.notes.append(f"{precision}: every layer in {precision}, within the budget on the drawn inputs: "
                           "no layer needs fp32, so the half-precision analysis was not needed")
        return plain, None
    plain.close()
    if verdict.outcome != CandidateOutcome.OVER_BUDGET:  # it failed to build or run: kept layers won't help
        return plain, verdict
    candidate = _build_candidate(context, precision, folder / precision.value, stages, proceed=_keeps_layers)
    if not _keeps_layers(candidate):  # its engine would be the one just judged, verified again: not built
        verdict.why = (f"over budget with every layer in {precision}, and the half analysis keeps no "
                       f"layer in fp32: {verdict.why}")
        return candidate, verdict
    verdict = _judged(candidate, precision) or _on_other_samples(context, candidate, precision, stages)
    if verdict is not None and candidate.half is not None:
        kept = candidate.half.kept
        verdict.why = (f"over budget with every layer in {precision}, and with the half analysis's "
                       f"{len(kept)} layer(s) kept in fp32{': ' + ', '.join(kept[:4]) if kept else ''}"
                       f"{' and more' if len(kept) > 4 else ''}: {verdict.why}")
    return candidate, verdict


def _on_other_samples(context: BuildContext, candidate: BuildContext, precision: Precision,
                      stages: Sequence[BuildStage[BuildContext]]) -> PrecisionCandidate | None:
    """A half candidate within budget on the first validation sample (every candidate's inputs) judged
    on the others too, as the int8 guard is (PP-OCRv4 rec's bf16 passed the first and was over budget
    on held-out inputs: cosine 0.998892). None: within budget on every one; else why not."""
    verify_stage = next(stage.run for stage in stages if stage.name == "verify")
    samples = context.samples.validation if context.samples is not None else []
    for number, sample in enumerate(samples[1:], start=2):
        inputs = candidate.staging / f"validation-{number}.npz"
        options = verifying_on_sample(candidate.options, sample, inputs)
        # drawn inputs are cached by their sizes, which the samples share: the probe's are its own
        probe = dataclasses.replace(candidate, options=options, engine=None, notes=[], _drawn={})
        with contextlib.closing(probe):
            try:
                verify_stage(probe)
            finally:  # the candidate's staging becomes the artifact, which holds the first sample's alone
                inputs.unlink(missing_ok=True)
            verdict = _judged(probe, precision)
        if verdict is not None:
            verdict.why = f"over budget on validation sample {number} of {len(samples)}: {verdict.why}"
            return verdict
    return None


def _keeps_layers(analysed: BuildContext) -> bool:
    """Whether the half analysis keeps any layer in fp32 (or did not run): only then is its engine
    another than every layer's half."""
    return analysed.half is None or bool(analysed.half.kept)


def _build_candidate(context: BuildContext, precision: Precision, folder: Path,
                     stages: Sequence[BuildStage[BuildContext]], dynamic: bool = False,
                     proceed: Callable[[BuildContext], bool] | None = None) -> BuildContext:
    """The build's own stages for one precision, over a context that shares the legalized model
    (read where the build wrote it: its external data, linked into `folder`, is what onnx refuses to
    load, hard links and symbolic ones alike; the dynamic int8 candidate of every decoder past 2 GB
    failed so) and the inputs drawn for it; with `proceed`, the engine is built only where it says so
    of the candidate as the stages before the engine's build leave it."""
    from deploycc.pipeline.outcome import Clock
    from deploycc.pipeline.stages import run_stages

    folder.mkdir(parents=True)
    candidate = BuildContext(source=context.source, target=context.target, options=context.options,
                             staging=folder, backend=context.backend, precision=precision,
                             clock=Clock({}, None, memory=False), notes=[], shapes=context.shapes,
                             legalized=context.legalized, legalized_file=context.legalized_path,
                             _model=context._model,
                             engine_model=context.legalized_path,
                             samples=context.samples if precision == Precision.INT8 and not dynamic else None)
    candidate._drawn = context._drawn  # the inputs are drawn once for every candidate
    candidate.shared = context.shared
    engine_at = next((at for at, stage in enumerate(stages) if stage.name == "build"), len(stages))
    try:
        run_stages(candidate, stages[:engine_at])
        if proceed is None or proceed(candidate):
            run_stages(candidate, stages[engine_at:])
    except Exception as error:  # a candidate that breaks is not chosen; the build goes on without it
        if disk_full(error):  # ... unless it is the machine's: the next would not fit either
            raise
        candidate.stop(BuildStatus.FAILED, message=f"{type(error).__name__}: {str(error).strip()[:200]}")
    return candidate


def _adopt(context: BuildContext, candidate: BuildContext) -> None:
    """The chosen candidate's engine, built and verified, becomes the build's: its files move into
    the staging folder and its records into the context, loaded as the verify stage leaves one, so
    the later stages (the bench, a torch proof) take it as their own and nothing is built twice."""
    for file in candidate.staging.iterdir():
        os.replace(file, context.staging / file.name)

    def moved(path: Path | None) -> Path | None:
        if path is None or not path.is_relative_to(candidate.staging):
            return path
        return context.staging / path.relative_to(candidate.staging)

    request = candidate.request
    assert request is not None
    context.request = dataclasses.replace(
        request, model=moved(request.model) or request.model, outdir=context.staging,
        calibration_cache=moved(request.calibration_cache), fp32_model=moved(request.fp32_model))
    context.engine_model = moved(candidate.engine_model)
    for name in ("quantization", "half", "placement", "artifact", "verification", "feeds", "status", "stage",
                 "message", "failure_category"):
        setattr(context, name, getattr(candidate, name))
    context.skipped += candidate.skipped
    context.notes += candidate.notes
    from deploycc.backends.base import BackendError

    assert context.artifact is not None
    with contextlib.suppress(BackendError):  # the bench loads it again and reports the failure
        context.engine = context.backend.load(context.artifact, context.staging, context.request)


def _judged(candidate: BuildContext, precision: Precision) -> PrecisionCandidate | None:
    """None where the candidate is within budget (to be timed), else why it is not."""
    verification = candidate.verification
    if precision == Precision.INT8 and candidate.precision != Precision.INT8:  # the int8 guard kept float
        why = candidate.quantization.reason if candidate.quantization is not None else candidate.message
        return _candidate(precision, CandidateOutcome.OVER_BUDGET,
                          f"the int8 guard kept {candidate.precision}: {why}", None)
    if candidate.status != BuildStatus.VERIFIED or verification is None:
        outcome = CandidateOutcome.OVER_BUDGET if verification is not None else CandidateOutcome.FAILED
        return _candidate(precision, outcome, candidate.message or str(candidate.status), verification)
    judged = _candidate(precision, CandidateOutcome.OVER_BUDGET, "", verification)
    generation = verification.generation
    by_generation = precision in QUANTIZED and generation is not None and generation.passed
    if verification.forward_problem or by_generation:
        return None  # a quantized decoder: within budget by its generation, whatever one forward's cosine
    judged.why = below_budget_cosine(verification)
    return judged if judged.why else None


def below_budget_cosine(verification: Verification) -> str:
    """Why a verified engine is still over the budget by cosine (an output's below MIN_COSINE), or
    "". An ill-conditioned output is judged by the original's own spread, which its cosine may lie
    within (a detector's boxes among tied scores): SSDlite's fp32 engine, delivered, read "over budget"
    so. The benchmarks hold every pipeline to this same rule."""
    conditioned = [o.cosine_similarity for o in verification.outputs
                   if o.name not in verification.ill_conditioned
                   and math.isfinite(o.cosine_similarity) and not o.degenerate]
    if conditioned and min(conditioned) < MIN_COSINE:
        return f"an output's cosine {min(conditioned):.6f} < {MIN_COSINE}"
    return ""


def _candidate(precision: Precision, outcome: CandidateOutcome, why: str, verification: Verification | None,
               ratio: float | None = None, ci95: tuple[float, float] | None = None,
               recipe: str = "") -> PrecisionCandidate:
    """The candidate's record, with its error against the original from its verification."""
    outputs = verification.outputs if verification is not None else []
    cosines = [o.cosine_similarity for o in outputs
               if math.isfinite(o.cosine_similarity) and not o.degenerate]
    errors = [o.max_abs_error for o in outputs if math.isfinite(o.max_abs_error)]
    return PrecisionCandidate(precision, outcome, why, ratio=ratio, ci95=ci95, recipe=recipe,
                              min_cosine=round(min(cosines), 6) if cosines else None,
                              max_abs_error=float(f"{max(errors):.3g}") if errors else None)


def _timed(built: dict[Key, BuildContext], feeds: dict[str, Any]) -> list[PrecisionCandidate]:
    """The candidates within budget timed against fp32, interleaved, on `feeds` (timing_feeds); the
    chosen one marked."""
    fp32 = (Precision.FP32, "")
    if fp32 not in built:  # nothing to time against: the first within budget
        untimed = [_candidate(p, CandidateOutcome.NOT_FASTER, "fp32 did not pass: not timed", c.verification,
                              recipe=recipe) for (p, recipe), c in built.items()]
        if untimed:
            untimed[0].outcome = CandidateOutcome.CHOSEN
        return untimed
    with loaded(built[fp32]) as baseline:  # the others loaded one at a time beside it
        block, pause = pairs(baseline, feeds)
        timed = [_candidate(Precision.FP32, CandidateOutcome.BASELINE, "what the others are timed against",
                            built[fp32].verification, ratio=1.0)]
        for (precision, recipe), candidate in built.items():
            if precision == Precision.FP32:
                continue
            with loaded(candidate) as runner:
                comparison = race(runner, baseline, feeds, block, pause)
            timed.append(_candidate(precision, CandidateOutcome.NOT_FASTER,
                                    comparison.verdict(_named(precision, recipe)) + _layers(candidate),
                                    candidate.verification, ratio=comparison.ratio_of_medians,
                                    ci95=comparison.ci95, recipe=recipe))
    faster = sorted((c for c in timed if c.ci95 is not None and c.ci95[1] < FASTER),
                    key=lambda c: (c.ratio, ORDER.index(c.precision)))
    if len(faster) > 1:
        faster = [_settled(faster[0], faster[1], built, feeds)]
    if faster:
        faster[0].outcome = CandidateOutcome.CHOSEN
    else:
        timed[0].why = ("no other candidate within budget is faster beyond the interval's noise"
                        if len(timed) > 1 else "the only candidate built")
        timed[0].outcome = CandidateOutcome.CHOSEN
    return timed


def _settled(one: PrecisionCandidate, other: PrecisionCandidate, built: dict[Key, BuildContext],
             feeds: dict[str, Any]) -> PrecisionCandidate:
    """Of two candidates faster than fp32, the less exact (the narrower precision, else the lower
    cosine) where it is faster than the other beyond the noise, raced against it directly; else the
    more exact."""
    more, less = sorted((one, other), key=lambda c: (ORDER.index(c.precision), -(c.min_cosine or 0.0)))
    more_named, less_named = _named(more.precision, more.recipe), _named(less.precision, less.recipe)
    comparison = duel(built[(less.precision, less.recipe)], built[(more.precision, more.recipe)], feeds,
                      against=more_named)
    faster = comparison.ci95 is not None and comparison.ci95[1] < FASTER
    winner, loser = (less, more) if faster else (more, less)
    loser.why += f"; against {winner.precision} directly: {comparison.verdict(less_named)}"
    winner.why += f"; against {loser.precision} directly: {comparison.verdict(less_named)}"
    return winner


def _named(precision: Precision, recipe: str) -> str:
    return f"{precision} ({recipe})" if recipe else str(precision)


def _layers(candidate: BuildContext) -> str:
    """For a half candidate, what of it is in half: every layer, or all but those kept in fp32."""
    if candidate.precision not in HALF_DTYPES:
        return ""
    if candidate.half is None or not candidate.half.kept:
        return f"; every layer in {candidate.precision}"
    return f"; {len(candidate.half.kept)} layer(s) kept in fp32 by the half analysis"
