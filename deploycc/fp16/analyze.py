"""Which layers half precision breaks, found on the host before the board does.

1. The model runs once on ORT CPU in fp32, each layer's activation reduced to its largest and
   smallest value inside the run: each tensor's range. A tensor beyond the half range, or all
   below its smallest normal number, is flagged (and only those are fetched, to describe them;
   the search, step 3, fetches every activation).
2. The model runs again with half emulated between layers (emulate.py). Its outputs are judged
   against the fp32 run at the precision's tolerances, as verification judges an engine.
3. While they are beyond tolerance, the layer that does the most damage is kept in fp32 and the
   emulation runs again. Where half made inf of finite values, the search starts from every layer
   whose fp32 output step 1 measured beyond the half range: each is inf in half for certain, and
   found one per run, a chain of them used up the runs (EfficientNet, ConvMixer, RepVGG: 13 runs,
   each model's verdict "not within"). A layer's damage is measured, as the INT8 guard ranks its layers: the
   error of its output less the worst error it was handed (error that arrives from upstream is
   not charged to it). Every layer that turns finite inputs into inf or NaN is kept in one step.
4. Each kept layer that the others make unnecessary is given back to half (a mask at the float
   minimum that half holds as -inf, harmlessly, is the usual one).

What is left is the fewest layers this greedy search finds, not a proven minimum; each choice is
measured, never guessed from the op type.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploycc.fp16.emulate import (
    FP16_MAX,
    HalfEmulation,
    activations,
    add_range_reducers,
    float_layers,
    rounded_feeds,
    without_range_reducers,
)
from deploycc.fp16.record import BELOW_NORMAL, BEYOND_RANGE, FlaggedTensor, HalfPrecisionReport
from deploycc.graph.graphs import name_layers
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import onnx_ir as ir

# The half types' limits: the largest finite value and the smallest normal one.
LIMITS = {Precision.FP16: (FP16_MAX, float(np.finfo(np.float16).tiny)),
          Precision.BF16: (float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny))}
MAX_RUNS = 12  # emulation runs before the search gives up and says so
# After this many runs, a search whose error has not fallen to half of the all-half error is
# chasing rounding spread over the whole model (RAFT's iterations), which no few layers fix.
STALL_RUNS, STALL_SHARE = 4, 0.5
MAX_PRUNED = 12  # kept layers each tried back in half; beyond that, the search's choice stands
MAX_FLAGGED = 50  # flagged tensors listed in the report (the widest first)
# A value this near float32's limit stands in for infinity (an additive mask at the float minimum):
# half holds it as inf with the same meaning, so it is no reason to keep its layer in fp32
INFINITY_STAND_IN = float(np.finfo(np.float32).max) / 2


def analyze_half(model_path: Path, feeds: dict[str, np.ndarray], precision: Precision, *, inputs: str,
                 tolerance: Precision | None = None,
                 progress: Callable[[str], None] | None = None) -> HalfPrecisionReport:
    """The half-precision analysis of a model on these inputs, judged at the tolerances of
    `tolerance` (None: as verification judges this model built in `precision`: a quantized one
    at int8's). Raises RunError when ORT cannot run the model on them."""
    from deploycc import io
    from deploycc.fp16 import recalled

    started = time.monotonic()
    found = recalled.key(model_path, feeds, precision, tolerance)
    report = recalled.recall(found, inputs)
    if report is not None:
        return report
    loaded = io.load(model_path, check=False)
    size = loaded.file_size + sum(f.size_bytes for f in loaded.external_files)
    with io.scratch_folder("deploycc-fp16-", size) as folder:
        prepared = Path(folder) / "prepared.onnx"
        model, written = _prepared(loaded.model, prepared)
        report = _analyze(prepared, model, written, feeds, precision, inputs, progress, tolerance)
    report.seconds = round(time.monotonic() - started, 2)
    recalled.keep(found, report)
    return report


def _prepared(model: ir.Model, path: Path) -> tuple[ir.Model, int]:
    """The model (in place) with its tensors typed (onnx's inference), every node named and each
    layer's activation reduced to its extremes (add_range_reducers), written once to `path`: the
    fp32 run that measures the ranges loads that file as it is, the other runs start from it.
    Returns the model (without the reducers) and its own outputs' count (they come first)."""
    from deploycc import io
    from deploycc.graph.shapes import infer_shapes

    infer_shapes(model)  # a failure leaves the types the model declares
    name_layers(model.graph)
    written = len(model.graph.outputs)
    add_range_reducers(model)
    io.save(model, path)
    return without_range_reducers(model, written), written


def _analyze(model_path: Path, model: ir.Model, written: int, feeds: dict[str, np.ndarray],
             precision: Precision, inputs: str, progress: Callable[[str], None] | None,
             tolerance: Precision | None) -> HalfPrecisionReport:
    """The analysis of the prepared model (`model`, read for its layers, its first `written`
    outputs its own, then handed to the emulation, whose first rebuilt run rounds it; the
    others load its file)."""
    from deploycc.verify.verification import tolerance_precision

    layers = float_layers(model.graph)
    if tolerance is None:
        ops = {node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}": 1
               for node in model.graph}
        tolerance = tolerance_precision(ops, precision)
    report = HalfPrecisionReport(precision=precision, inputs=inputs, layers=len(layers), tolerance=tolerance)
    if not layers:
        report.reason = "no layer computes a float32 tensor"
        return report
    outputs = [v.name or "" for v in model.graph.outputs[:written]]
    emulation = HalfEmulation(model_path, precision, written, model)
    reference, flagged, every_activation = _measured(emulation, layers, precision, feeds)
    judged = [name for name in outputs if name in reference
              and np.issubdtype(reference[name].dtype, np.floating)]
    report.flagged = flagged[:MAX_FLAGGED]
    half_feeds = rounded_feeds(feeds, precision)

    def emulate(kept: set[str], expose: bool = True) -> dict[str, np.ndarray]:
        report.runs += 1
        if progress is not None:
            progress(f"{precision.value} emulation {report.runs}")
        return emulation.run(half_feeds, kept, every_activation=expose)

    # All in half, its outputs only: every activation is wanted only when the search runs, and
    # holding them all costs gigabytes and several times the run on a large model
    state = emulate(set(), expose=False)
    report.within_all_half, report.error_all_half = _judge(reference, state, judged, report.tolerance)
    report.within_with_kept, report.error_with_kept = report.within_all_half, report.error_all_half
    if not report.within_all_half:
        model = emulation.prepared_model(every_activation=False)  # the one in memory was rounded
        layers = float_layers(model.graph)
        # the layers certain to overflow, where an overflow is what put the outputs off
        beyond = {flag.node for flag in flagged if flag.why == BEYOND_RANGE and flag.node
                  and flag.max_abs < INFINITY_STAND_IN} if math.isinf(report.error_all_half) else set()
        seeds = [node.name or "" for node in layers if node.name in beyond]
        if not every_activation:
            reference = emulation.run(feeds, None, every_activation=True)
        _search(report, layers, reference, seeds, judged, emulate, precision)
    if not report.kept:
        return report
    _set_shapes(model.graph, {**feeds, **reference})
    flops = {node.name or "": _flops(node) for node in layers}
    total = sum(flops.values())
    report.kept_flops_share = sum(flops.get(name, 0) for name in report.kept) / total if total else 0.0
    return report


def _measured(emulation: HalfEmulation, layers: list[ir.Node], precision: Precision,
              feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[FlaggedTensor], bool]:
    """The fp32 run: its outputs (with every activation, where it had to fetch them all), the
    tensors half cannot hold, and whether every activation is there. Each activation's range is
    measured inside the run; only those half cannot hold are fetched, to describe them."""
    from deploycc.verify.runner import RunError

    try:
        own, ranges = emulation.ranges(feeds)
    except RunError:  # a reduction ORT refuses (an empty activation): every activation fetched
        reference = emulation.run(feeds, None, every_activation=True)
        return reference, flagged_tensors(reference, layers, precision, feeds), True
    largest, smallest_normal = LIMITS[precision]

    def held(high: float, low: float) -> bool:
        top = max(abs(high), abs(low))
        return math.isfinite(top) and top <= largest and not 0 < top < smallest_normal

    described = [name for name, (high, low) in ranges.items() if not held(high, low)]
    reference = {**own, **emulation.activations_named(feeds, described)} if described else own
    return reference, flagged_tensors(reference, layers, precision, feeds), False


def _search(report: HalfPrecisionReport, layers: list[ir.Node],
            reference: dict[str, np.ndarray], seeds: list[str], judged: list[str],
            emulate: Callable[[set[str]], dict[str, np.ndarray]], precision: Precision) -> None:
    """Keep layers in fp32, most damaging first, until the emulated outputs are within tolerance;
    then give back to half each that is not needed. `seeds`: the layers kept from the start (their
    output is beyond the half range), never given back."""
    kept: list[str] = list(seeds)
    earlier = report.runs  # the runs before the first state's: not the search's budget
    state = emulate(set(kept))
    within, error = _judge(reference, state, judged, report.tolerance) if seeds else (False, math.inf)
    # the error a stall is judged against: all in half, or where that was inf, the first finite
    # one (an inf all-half error never stalled: such a search ran its 12 runs)
    baseline = report.error_all_half if math.isfinite(report.error_all_half) else error
    while not within and report.runs - earlier < MAX_RUNS:
        damage = layer_damage(layers, reference, state)
        candidates = sorted(((d, name) for name, d in damage.items() if name not in kept and d > 0),
                            key=lambda item: -item[0])
        if not candidates:
            break
        sources = [name for d, name in candidates if math.isinf(d)]
        kept += sources or [candidates[0][1]]
        state = emulate(set(kept))
        within, error = _judge(reference, state, judged, report.tolerance)
        baseline = baseline if math.isfinite(baseline) else error
        if within or (report.runs - earlier >= STALL_RUNS and error > STALL_SHARE * baseline):
            break
    if not within:
        spread = "the error is rounding spread over many layers, not one layer's range"
        why = f"{len(seeds)} of them write values beyond the half range; beyond those, {spread}" \
            if seeds else spread
        report.reason = (f"{len(kept)} layer(s) tried in fp32 did not bring the emulated output within "
                         f"{precision.value} tolerance in {report.runs} runs: {why}; build in fp32 where "
                         "it matters")
        report.within_with_kept, report.error_with_kept = False, report.error_all_half
        return
    report.error_with_kept = error
    for name in [name for name in reversed(kept) if name not in seeds][:MAX_PRUNED]:
        if len(kept) == 1 or report.runs - earlier >= MAX_RUNS + MAX_PRUNED:
            break
        trial = [k for k in kept if k != name]
        within, trial_error = _judge(reference, emulate(set(trial)), judged, report.tolerance)
        if within:
            kept, report.error_with_kept = trial, trial_error
    report.kept, report.within_with_kept = kept, True


def tensor_error(expected: np.ndarray, actual: np.ndarray) -> float:
    """The largest difference relative to the tensor's largest finite value; inf where a finite
    value came out inf or NaN (or the other way round)."""
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape:
        return math.inf
    if e.dtype != a.dtype or e.dtype != np.float32:  # float32 differences are exact enough to rank by
        e, a = e.astype(np.float64), a.astype(np.float64)
    finite = np.isfinite(e)
    # Where one side is finite and the other not, the rounding made inf or NaN (or took one away).
    # Where both are not (the same inf, NaN for NaN, or not), nothing is measured.
    if not np.array_equal(finite, np.isfinite(a)):
        return math.inf
    if not finite.all():  # the rare case, the long way: only where both are finite
        if not finite.any():
            return 0.0
        e, a = e[finite], a[finite]
    # reads each tensor twice and writes one temporary: this runs on every activation of every
    # emulation (hundreds of tensors of millions of elements on a detector)
    scale = float(np.max(np.abs(e))) or 1e-30
    return float(np.max(np.abs(np.subtract(a, e)))) / scale


def layer_damage(layers: list[ir.Node], reference: dict[str, np.ndarray],
                 state: dict[str, np.ndarray]) -> dict[str, float]:
    """Per layer, the error of its output less the worst error of the activations it reads (inf
    for a layer that makes inf or NaN of finite inputs)."""
    errors: dict[str, float] = {}

    def error(name: str) -> float:
        if name not in errors:
            errors[name] = tensor_error(reference[name], state[name]) \
                if name in reference and name in state else 0.0
        return errors[name]

    damage = {}
    for node in layers:
        own = max((error(v.name or "") for v in activations(node)), default=0.0)
        handed = max((error(v.name or "") for v in node.inputs if v is not None and v.name), default=0.0)
        if math.isinf(own):
            damage[node.name or ""] = 0.0 if math.isinf(handed) else math.inf
        else:
            damage[node.name or ""] = max(0.0, own - handed)
    return damage


def _judge(reference: dict[str, np.ndarray], state: dict[str, np.ndarray], judged: list[str],
           precision: Precision) -> tuple[bool, float]:
    """Whether every float output is within the precision's tolerances, and the worst max error."""
    from deploycc.verify.compare import MISMATCH_SHARE, TOLERANCES, compare

    atol, rtol, cosine = TOLERANCES[precision]
    within, worst = True, 0.0
    for name in judged:
        result = compare(name, reference[name], state[name], atol=atol, rtol=rtol, min_cosine=cosine,
                         mismatch_share=MISMATCH_SHARE.get(precision, 0.0))
        within = within and result.passed
        worst = max(worst, result.max_abs_error)
    return within, worst


def flagged_tensors(reference: dict[str, np.ndarray], layers: list[ir.Node], precision: Precision,
                    feeds: dict[str, np.ndarray]) -> list[FlaggedTensor]:
    """The activations (and float inputs) the half type cannot hold, the widest first (all of them;
    the report lists MAX_FLAGGED). An activation `reference` lacks is not looked at."""
    largest, smallest_normal = LIMITS[precision]
    found = []
    where = [(v.name or "", node.name or "", node.op_type) for node in layers for v in activations(node)]
    where += [(name, "", "") for name, array in feeds.items() if array.dtype == np.float32]
    for name, node, op in where:
        array = reference.get(name, feeds.get(name))
        if array is None or array.size == 0:
            continue
        array = np.asarray(array)
        # the widest magnitude from the two ends, without a copy of the tensor (gigabytes of
        # activations on a large model); the long way only where a value is not finite
        top = max(abs(float(array.max())), abs(float(array.min())))
        if not math.isfinite(top):
            finite = array[np.isfinite(array)]
            if finite.size == 0:
                continue
            array, top = finite, float(np.abs(finite).max())
        if top > largest:
            found.append(FlaggedTensor(name, node, op, BEYOND_RANGE, top, _smallest_nonzero(array)))
        elif 0 < top < smallest_normal:
            found.append(FlaggedTensor(name, node, op, BELOW_NORMAL, top, _smallest_nonzero(array)))
    found.sort(key=lambda flag: -flag.max_abs if flag.why == BEYOND_RANGE else flag.max_abs)
    return found


def _smallest_nonzero(array: np.ndarray) -> float:
    magnitude = np.abs(array)
    low = float(np.min(magnitude, where=magnitude > 0, initial=np.inf))
    return low if math.isfinite(low) else 0.0


def _set_shapes(graph: ir.Graph, arrays: dict[str, np.ndarray]) -> None:
    """The shapes the run had, where the graph's are not static (for the FLOP count)."""
    import onnx_ir as ir

    for node in graph:
        for value in node.outputs:
            if value.name in arrays:
                value.shape = ir.Shape(arrays[value.name].shape)
    for value in graph.inputs:
        if value.name in arrays:
            value.shape = ir.Shape(arrays[value.name].shape)


def _flops(node: ir.Node) -> int:
    from deploycc.bench.flops import node_flops

    try:
        return node_flops(node, unknown_dim=1) or 0
    except Exception:  # an attribute or shape the counter does not read: counted as none
        return 0
