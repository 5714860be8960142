"""Whole-model verification: the original and the rewritten model on ONNX Runtime CPU, on the
same inputs, every output compared with the comparator.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploycc.budget import TooLarge
from deploycc.records.verification import PERTURBATION_ULPS, Verification  # Verification re-exported
from deploycc.taxonomy import Failed, Precision
from deploycc.verify.compare import (
    MISMATCH_SHARE,
    TOLERANCES,
    OutputComparison,
    compare,
    degenerate_outputs,
    judged_as,
)
from deploycc.verify.inputs import (
    CONTENT_DESCRIBED,
    MAX_DRAWN_ELEMENTS,
    NOISE,
    SYMBOLIC_DIM_SIZE,
    draws,
    pictures_possible,
)
from deploycc.verify.runner import ORT, REFERENCE, RunError, run_ort_isolated, run_reference

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.graph.dim_roles import DimGuess
    from deploycc.options import LegalizeOptions


def _run_original(path: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    """The original on ORT CPU in a child process (a hostile model may crash ORT); the onnx
    reference evaluator when ORT refuses it (not when it crashed). Once per inputs (reference.py)."""
    from deploycc.verify.reference import original_outputs

    return original_outputs(path, feeds, lambda: _compute_original(path, feeds))


def _compute_original(path: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    try:
        return run_ort_isolated(path, feeds), ORT
    except RunError as ort_error:
        if ort_error.stage == Failed.RUN:
            raise
        if ort_error.stage == Failed.CRASH or path.stat().st_size > (1 << 30):  # died or hung: not a refusal
            raise RunError(f"cannot run the original: {ort_error}") from None
        try:
            return run_reference(path.read_bytes(), feeds), REFERENCE
        except Exception:
            raise RunError(f"onnxruntime cannot run the original: {ort_error}") from None


def feeds_for(graph: ir.Graph, options: LegalizeOptions, layouts: dict[str, list[int]],
              shapes: dict[str, list[int]] | None = None, source: Path | None = None,
              content: str = NOISE) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    """(inputs for the rewritten graph, the same laid out for the original, a description).
    Drawn at `shapes` (default: the typical sizes, graph/dim_roles.py), image inputs holding
    `content`, unless the user gave inputs; integer values as the original model's graph (the
    file `source`) reads them, where given."""
    from deploycc.verify import inputs as input_data

    signature = {v.name or "": v for v in graph.inputs if v.name not in graph.initializers}
    if options.inputs is not None:
        feeds = input_data.load_npz(options.inputs, signature)
        described = str(options.inputs)
    else:
        shapes = drawn_shapes(graph, options, 0) if shapes is None else shapes
        feeds = input_data.generate(list(signature.values()), seed=options.seed, shapes=shapes,
                                    ranges_from=_integer_inputs(source, signature), content=content)
        sizes = ", ".join(f"{name} {'x'.join(str(d) for d in array.shape) or 'scalar'}"
                          for name, array in feeds.items())
        held = f", images of {CONTENT_DESCRIBED[content]}" if content in CONTENT_DESCRIBED else ""
        described = f"generated (seed {options.seed}, {sizes}{held})"
    original = {name: (np.transpose(array, layouts[name]) if name in layouts else array)
                for name, array in feeds.items()}
    return feeds, original, described


def _integer_inputs(source: Path | None, signature: Mapping[str, ir.Value]) -> dict[str, ir.Value]:
    """The original model's integer inputs, when the rewritten graph has any: what reads them there
    says which values they take (loaded only then)."""
    integer = [name for name, value in signature.items() if value.dtype is not None and
               np.issubdtype(value.dtype.numpy(), np.integer)]
    if source is None or not integer:
        return {}
    from deploycc import io

    graph = io.peek(source).model.graph
    return {v.name or "": v for v in graph.inputs if v.name in integer}


def drawn_shapes(graph: ir.Graph, options: LegalizeOptions, attempt: int,
                 metadata: Mapping[str, str] | None = None) -> dict[str, list[int]]:
    """The dims to draw every input at, at an attempt (0: each dim's typical size, then its role's
    fallbacks, then the typical sizes at a batch of 1); a dynamic batch at SYMBOLIC_DIM_SIZE before
    that, so a rewrite that mixes the rows of a batch shows; the sizes the user (or a corpus's
    hints) gave win."""
    from deploycc.graph.dim_roles import guess_dims, sample_shapes

    guesses = guess_dims(graph, metadata)
    batch = SYMBOLIC_DIM_SIZE
    if attempt >= _sized_attempts(guesses, options) and _has_batch(guesses, options):
        attempt, batch = 0, 1
    shapes = sample_shapes(graph, guesses, attempt, batch=batch)
    shapes.update({name: list(dims) for name, dims in options.sample_shapes.items() if name in shapes})
    return shapes


def attempts_for(graph: ir.Graph, options: LegalizeOptions, metadata: Mapping[str, str] | None = None) -> int:
    """How many sets of sizes verification may try: one with the user's inputs, or when every
    dynamic input has sizes given; else as many as the longest list of fallbacks, and one more at a
    batch of 1 where a batch is drawn (onnxruntime-genai's decoders take a batch of 1 only where a
    prompt meets a cache: GroupQueryAttention's kernel)."""
    from deploycc.graph.dim_roles import guess_dims

    if options.inputs is not None:
        return 1
    guesses = guess_dims(graph, metadata)
    return _sized_attempts(guesses, options) + int(_has_batch(guesses, options))


def _sized_attempts(guesses: list[DimGuess], options: LegalizeOptions) -> int:
    from deploycc.graph.dim_roles import BATCH

    return max((g.attempts for g in guesses if g.role != BATCH and g.input not in options.sample_shapes),
               default=1)


def _has_batch(guesses: list[DimGuess], options: LegalizeOptions) -> bool:
    from deploycc.graph.dim_roles import BATCH

    return any(g.role == BATCH and g.input not in options.sample_shapes for g in guesses)


def verify_files(original: Path, candidate: Path, model: ir.Model, fed_layouts: dict[str, list[int]],
                 options: LegalizeOptions, precision: Precision = Precision.FP32,
                 retyped: Collection[str] = ()) -> Verification:
    """The candidate against the original on ORT, on inputs the original runs on and answers with
    some signal: the typical sizes first, then each role's fallbacks; needs-inputs when none does.
    `model` is the candidate's graph in memory; `fed_layouts`, the layouts its inputs are fed in
    (the axes pass's transposes); `retyped`, the outputs whose type a pass changed on purpose (a
    ZipMap's map become its tensor), whose dtype and rank are not held to the original's."""
    graph, metadata = model.graph, model.metadata_props
    attempts = attempts_for(graph, options, metadata)
    why_not = ""
    for attempt, content in draws(attempts):
        if content != NOISE and options.inputs is not None:
            continue  # the user's inputs are one draw
        shapes = drawn_shapes(graph, options, attempt, metadata) if options.inputs is None else {}
        if attempt and _drawn_elements(shapes) > MAX_DRAWN_ELEMENTS:
            continue
        try:
            feeds, original_feeds, described = feeds_for(graph, options, fed_layouts, shapes, original,
                                                         content)
        except (MemoryError, TooLarge) as error:  # a declared size no machine draws (2**31 rows)
            described = ", ".join(f"{name} {'x'.join(map(str, dims))}" for name, dims in shapes.items())
            budget = f": {error.message}" if isinstance(error, TooLarge) else ""
            why_not = (f"inputs of {_drawn_elements(shapes):,} elements do not fit in memory ({described})"
                       f"{budget}")
            continue
        if content != NOISE and not pictures_possible(feeds):
            continue  # no image input to draw as a picture: the noise was this size's draw
        try:
            expected, reference = _run_original(original, original_feeds)
        except RunError as error:
            if error.stage != Failed.RUN:
                return Verification(False, ORT, described, precision, problem=str(error))
            why_not = f"the original model fails on {described} ({error})"
            continue
        flat = degenerate_outputs(expected)
        if flat and options.inputs is None:
            why_not = (f"the original's outputs carry no signal on {described}: "
                       + "; ".join(f"{name} {why}" for name, why in flat.items()))
            continue
        break
    else:
        return Verification(False, ORT, described, precision, needs_inputs=True,
                            problem=f"needs --inputs: {why_not}")
    try:
        actual = run_ort_isolated(candidate, feeds)
    except RunError as error:
        return Verification(False, ORT, described, precision, problem=str(error))
    result = compare_all(expected, actual, reference=reference, inputs=described, precision=precision,
                         original=(original, original_feeds))
    changed = signature_changes(expected, {k: v for k, v in actual.items() if k not in retyped})
    if changed:  # what runs, not only what is declared: a rank or dtype no pass may change
        result.passed, result.problem = False, changed[0]
    # the given inputs' shapes too: a backend that needs static dims is built again at these
    result.shapes = {name: list(array.shape) for name, array in feeds.items()}
    result.attempt, result.content = attempt, content
    return result


def drawn_content(drawn: Verification | None) -> str:
    """What a verification drew its image inputs as (NOISE when there was none): every later run
    on its inputs (the engine, the fp16 analysis, the device's reference) draws the same."""
    return drawn.content if drawn is not None else NOISE


def signature_changes(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray]) -> list[str]:
    """The outputs whose rank or dtype differ between two runs of ONNX Runtime: a declared output
    shape can be wrong (or say nothing), so the pass manager's check of the declaration is not
    enough; this one looks at what was computed."""
    problems = []
    for name, array in actual.items():
        reference = expected.get(name)
        if reference is None:
            continue
        if np.ndim(array) != np.ndim(reference) or np.asarray(array).dtype != np.asarray(reference).dtype:
            problems.append(f"output '{name}': the rewritten model returns {np.asarray(array).dtype} of rank "
                            f"{np.ndim(array)} {list(np.shape(array))}, the original "
                            f"{np.asarray(reference).dtype} of rank {np.ndim(reference)} "
                            f"{list(np.shape(reference))}")
    return problems


def _drawn_elements(shapes: dict[str, list[int]]) -> int:
    return sum(int(np.prod(dims)) if dims else 1 for dims in shapes.values())


QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                 "ConvInteger", "QLinearConv", "QLinearMatMul", "com.microsoft::QLinearAdd",
                 "com.microsoft::QLinearMul", "com.microsoft::QLinearGlobalAveragePool",
                 "com.microsoft::QGemm", "com.microsoft::QLinearAveragePool", "com.microsoft::QLinearSigmoid",
                 "com.microsoft::QLinearLeakyRelu", "com.microsoft::DynamicQuantizeLSTM"}


def tolerance_precision(source_ops: Mapping[str, int], precision: Precision, *,
                        float16: bool = False) -> Precision:
    """A quantized model is judged with int8 tolerances whatever precision it is built in: an engine
    with real int8 kernels (OpenVINO fuses Q/DQ pairs, ONNX Runtime's optimizer makes QLinearConv)
    and its float form round differently by one step of the quantization grid. A model that
    computes in float16 (`float16`: its weights are) is judged with float16's: a kernel that
    accumulates in float32, or ops in another order, moves its outputs by float16 roundings."""
    if QUANTIZED_OPS & set(source_ops):
        return Precision.INT8
    return Precision.FP16 if float16 and precision in (Precision.FP32, Precision.FP16) else precision


FLOAT16_SHARE = 0.5  # of a model's floating-point weights, by element count


def computes_in_float16(path: Path) -> bool:
    """Whether most of a model file's floating-point weights are float16 (onnxconverter-common's
    and ORT's float16 conversions): it then computes in float16 whatever it is built in."""
    from deploycc import io

    counts = {"half": 0, "other": 0}
    graph = io.peek(path).model.graph
    for value in graph.initializers.values():
        tensor = value.const_value
        if tensor is None or not tensor.dtype.is_floating_point():
            continue
        counts["half" if tensor.dtype.name == "FLOAT16" else "other"] += tensor.size
    total = counts["half"] + counts["other"]
    return total > 0 and counts["half"] / total > FLOAT16_SHARE


def compare_all(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], *, reference: str,
                inputs: str, precision: Precision,
                original: tuple[Path, dict[str, np.ndarray]] | None = None) -> Verification:
    """Every output the candidate produces, compared with the reference's, at the precision's
    tolerances. With `original` (its file and the feeds `expected` came from), a failing output is
    checked for ill-conditioning before it is called a mismatch."""
    atol, rtol, min_cosine = TOLERANCES[judged_as(precision)]
    share = MISMATCH_SHARE.get(judged_as(precision), 0.0)
    result = Verification(passed=True, reference=reference, inputs=inputs, precision=precision)
    for name, array in actual.items():
        if name not in expected:
            continue
        comparison = compare(name, expected[name], array, atol=atol, rtol=rtol, min_cosine=min_cosine,
                             mismatch_share=share)
        result.outputs.append(comparison)
        if not comparison.passed and result.passed:
            result.passed = False
            result.problem = f"output '{name}': {comparison.problem}"
    if not result.outputs:
        result.passed, result.problem = False, "no output of the candidate matches an output of the original"
    if not result.passed:
        _compare_as_sets(expected, actual, result, atol, rtol, min_cosine)
    # The original is run again on ORT with its inputs moved: that says nothing of a reference
    # that came from onnx's evaluator (ORT could not run the model), and all of one that came from
    # ORT or from the framework the model was exported from (torch, the front end's proof).
    if not result.passed and original is not None and reference != REFERENCE:
        _within_own_variation(original, expected, actual, result, atol, rtol)
    flat = degenerate_outputs(expected)
    if flat and result.passed:  # a match on outputs that say nothing is no verification
        result.passed, result.needs_inputs = False, True
        result.problem = (f"needs --inputs: the original's outputs carry no signal on {inputs}: "
                          + "; ".join(f"{name} {why}" for name, why in flat.items()))
    return result


PERTURBATION = PERTURBATION_ULPS * float(np.finfo(np.float32).eps)  # relative, per element
PERTURBATION_TRIALS = 5  # per batch
PERTURBATION_TRIALS_MAX = 20
ENVELOPE_SLACK = 1.1


def _within_own_variation(original: tuple[Path, dict[str, np.ndarray]], expected: dict[str, np.ndarray],
                          actual: dict[str, np.ndarray], result: Verification, atol: float,
                          rtol: float) -> None:
    """A detector with random weights scores thousands of boxes within 1e-6 of each other: which
    300 survive TopK then turns on the last bit, and ONNX Runtime itself returns other boxes for an
    input moved by one rounding (or with its graph optimizations off). No engine can match such an
    output elementwise. The original is run on inputs moved by a few roundings; an output that the
    original itself moves beyond tolerance is ill-conditioned at these inputs, and the candidate
    passes it when it is no further from the reference, by every statistic, than the original's
    own worst trial is."""
    path, feeds = original
    failing = [c for c in result.outputs if not c.passed]
    if not any(np.issubdtype(array.dtype, np.floating) for array in feeds.values()):
        return
    # In process, one session: the original already ran in isolation on these very shapes.
    try:
        from deploycc.verify.runner import run_session, session

        loaded = session(path, optimize=True, threads=0)
    except Exception:
        return
    rng = np.random.default_rng(0)
    spreads: dict[str, list[OutputComparison]] = {c.name: [] for c in failing}
    # The worst of a few trials understates the spread's tail: more trials while the candidate is
    # outside it, up to PERTURBATION_TRIALS_MAX, and the verdict is the last batch's.
    while len(spreads[failing[0].name]) < PERTURBATION_TRIALS_MAX:
        for _ in range(PERTURBATION_TRIALS):
            moved = {name: (array * (1 + PERTURBATION * rng.standard_normal(array.shape))).astype(array.dtype)
                     if np.issubdtype(array.dtype, np.floating) else array for name, array in feeds.items()}
            try:
                again = run_session(loaded, moved)
            except Exception:
                return
            for comparison in failing:
                spreads[comparison.name].append(compare(comparison.name, expected[comparison.name],
                                                        again[comparison.name], atol=atol, rtol=rtol))
        if any(all(trial.passed for trial in spreads[c.name]) for c in failing):
            return  # well-conditioned: the mismatch is the candidate's
        if all(_within(c, spreads[c.name]) for c in failing):
            result.ill_conditioned = [c.name for c in failing]
            result.passed, result.problem = True, ""
            return
        if any(_beyond_reach(c, spreads[c.name]) for c in failing):
            return  # more trials widen the spread by a sample's tail, not by orders of magnitude


# How far outside the original's own spread (1 - cosine, over the worst trial's) a candidate is past
# the reach of more trials: bf16 LR-ASPP's map at cosine 0.82 against trials at 0.99999+ ran 15 more
# runs of the original (5 s) to the same verdict
BEYOND_REACH = 1000.0


def _beyond_reach(candidate: OutputComparison, trials: list[OutputComparison]) -> bool:
    spread = max(1 - t.cosine_similarity for t in trials)
    return spread > 0 and 1 - candidate.cosine_similarity > BEYOND_REACH * spread


def _within(candidate: OutputComparison, trials: list[OutputComparison]) -> bool:
    """No further from the reference, by every statistic, than the original's worst trial, with
    ENVELOPE_SLACK: the worst of 20 trials is a sample's maximum, and a rewritten graph rounds
    inside the network, not only at its inputs (SSDlite: 789 boxes moved against 786 at most)."""
    return (candidate.max_abs_error <= ENVELOPE_SLACK * max(t.max_abs_error for t in trials)
            and candidate.mismatched <= ENVELOPE_SLACK * max(t.mismatched for t in trials)
            and 1 - candidate.cosine_similarity
            <= ENVELOPE_SLACK * (1 - min(t.cosine_similarity for t in trials)))


def within_backend_on_original(result: Verification, expected: dict[str, np.ndarray],
                                on_original: dict[str, np.ndarray]) -> None:
    """A failed engine verification set beside the same backend running the model as exported, on
    the same inputs: where every failing output of the engine is no further from the reference,
    by every statistic (with ENVELOPE_SLACK), than the backend's own result for the original, the
    difference is the backend's arithmetic (OpenVINO's fp32 kernels on a deep network), which a
    user who deploys without deploycc gets as well: passed, and said."""
    if result.passed or result.needs_inputs:
        return
    atol, rtol, min_cosine = TOLERANCES[judged_as(result.precision)]
    failing = [c for c in result.outputs if not c.passed]
    baseline = {c.name: compare(c.name, expected[c.name], on_original[c.name], atol=atol, rtol=rtol,
                                min_cosine=min_cosine)
                for c in failing if c.name in on_original and c.name in expected}
    if len(baseline) != len(failing) or any(b.passed for b in baseline.values()):
        return  # the backend computes the original within tolerance: the engine's miss is the change's
    if all(_within(c, [baseline[c.name]]) for c in failing):
        result.backend_bound = [c.name for c in failing]
        result.backend_defect = [c.name for c in failing if baseline[c.name].cosine_similarity < min_cosine]
        result.passed, result.problem = True, ""


# Rows are ordered by their leading columns only: np.lexsort takes one pass per column, and a wide
# row (a segmentation map's batch item, 1M columns) took 28 s a sort; a detection's row is narrow
ROW_KEY_COLUMNS = 64


def _row_order(arrays: dict[str, np.ndarray], names: list[str], rows: int) -> np.ndarray:
    table = np.concatenate([arrays[name].reshape(rows, -1)[:, :ROW_KEY_COLUMNS].astype(np.float64)
                            for name in names], axis=1)[:, :ROW_KEY_COLUMNS]
    return np.lexsort(table.T[::-1])


def _compare_as_sets(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], result: Verification,
                     atol: float, rtol: float, min_cosine: float) -> None:
    """Detections whose order is not defined (NMS and TopK among tied scores: a random-weight
    detector scores every box alike) differ only in the order of their rows. The outputs that
    share a leading dim are sorted by their rows taken together, in both, and compared again;
    when every failing output then passes, the verification passes, and says it compared sets."""
    by_rows: dict[int, list[str]] = {}
    for comparison in result.outputs:
        array = expected[comparison.name]
        if array.ndim >= 1 and array.shape[0] > 1 and actual[comparison.name].shape == array.shape:
            by_rows.setdefault(array.shape[0], []).append(comparison.name)
    failing = {c.name for c in result.outputs if not c.passed}
    replaced: dict[str, OutputComparison] = {}
    for rows, names in by_rows.items():
        if not failing & set(names):
            continue

        expected_order, actual_order = _row_order(expected, names, rows), _row_order(actual, names, rows)
        for name in names:
            replaced[name] = compare(name, expected[name][expected_order], actual[name][actual_order],
                                     atol=atol, rtol=rtol, min_cosine=min_cosine)
    if not failing <= set(replaced) or not all(replaced[name].passed for name in failing):
        return
    result.outputs = [replaced.get(c.name, c) for c in result.outputs]
    result.passed, result.problem = True, ""
    result.compared_as_sets = sorted(failing)


def reference_outputs(original: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    """The original model's outputs on ORT CPU (the onnx reference evaluator as a fallback)."""
    return _run_original(original, feeds)
