"""The shapes an engine is built for when the user does not say: the target's default shape
policy (target data, `[shapes]` batch / batch_size / batch_profile / dims) applied to every dim
the model leaves dynamic, at the typical size of each (graph/dim_roles.py), checked on the
original model on ONNX Runtime before anything is built.

    jetson-*     a dynamic batch fixed at 1; other dims a profile min/opt/max around the typical size
    gpu-trt10    a batch profile 1/8/32; other dims a profile
    CPU targets  everything kept dynamic; verification and bench draw the typical sizes

What the user says wins, dim by dim: `--shape` fixes an input, `--shape-range` gives its profile,
`--batch` fixes the batch, `--dynamic-batch MIN:OPT:MAX` gives the batch a profile. The plan
says which shapes the engine accepts, where each size came from, and which flag changes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.graph.dim_roles import BATCH, DimGuess, guess_dims, summed_dims, with_sums
from deploycc.graph.dim_ties import tie_guesses
from deploycc.records.shapes import InputShapes, ShapePlan, ShapeProfile
from deploycc.verify.inputs import NOISE, SYMBOLIC_DIM_SIZE, draws, pictures_possible

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target

PROFILE_SPAN = 2  # a profile reaches from half the typical size to twice it, where the model takes both


@dataclass
class _Dim:
    """One dynamic dim's decision: fixed at a size, a profile, or kept dynamic."""

    guess: DimGuess
    decision: str  # fixed | profile | dynamic
    size: int  # the size verification draws and bench times (fixed: the size)
    by: str  # who decided: the user's flag or the target's policy
    low: int = 0  # a profile's min, opt and max
    opt: int = 0
    high: int = 0


def plan_shapes(source: Path, target: Target, options: BuildOptions) -> tuple[ShapePlan, BuildOptions]:
    """The plan, and the options that carry it out: fixed dims as `--shape`s, profiles as
    `--shape-range`s (engines with fixed shapes only), the drawn sizes as verification's sample
    shapes. A model without dynamic dims, or given inputs, gets the options back unchanged."""
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.graph.graphs import dims_of

    model = io.peek(source, check=True).model  # vetted: a malformed model is one line here, as in legalize
    graph = model.graph
    values = {v.name or "": v for v in graph.inputs if v.name not in graph.initializers}
    declared = {name: dims_of(value) for name, value in values.items()}
    guesses = [g for g in tie_guesses(model, guess_dims(graph, model.metadata_props))
               if g.input not in options.legalize.shapes and g.input not in options.shape_ranges]
    plan = ShapePlan()
    if not guesses:
        plan.inputs = [_as_given(name, dims, options) for name, dims in declared.items()]
        return plan, options
    static_dims = get_backend(target.backend.kind).stages.static_dims  # the build's own reason to fix dims
    static = static_dims(options) if static_dims is not None else None
    dims = [_decide(guess, target, options, target.backend.builds_profiles, static) for guess in guesses]
    if options.legalize.inputs is None:
        _find_sizes(source, model, dims, options, plan)
    else:
        _sizes_given(options.legalize.inputs, dims)
    _prompt_to_decode(graph, dims, plan)
    _summed(graph, dims)
    return plan, _carry_out(plan, dims, declared, options)


def _sizes_given(inputs: Path, dims: list[_Dim]) -> None:
    """With the user's inputs, their sizes are the ones drawn, and the profiles reach them: the
    engine is verified on the device with those very arrays."""
    from deploycc.verify.inputs import load_npz

    arrays = load_npz(inputs)
    for d in dims:
        array = arrays.get(d.guess.input)
        if array is None or d.guess.axis >= array.ndim:
            continue
        size = int(array.shape[d.guess.axis])
        d.size = size
        if d.decision == "profile":
            if not d.low <= size <= d.high:
                d.opt = size
            d.low, d.high = min(d.low, size), max(d.high, size)
        else:
            d.low = d.opt = d.high = size


def _decide(guess: DimGuess, target: Target, options: BuildOptions, profiles_built: bool,
            static: str | None) -> _Dim:
    """`static`: why this build fixes the dims the policy would give a profile (TensorRT on a DLA
    core), or None."""
    policy = target.shapes
    legalize = options.legalize
    if guess.role == BATCH:
        if legalize.batch is not None:
            return _Dim(guess, "fixed", legalize.batch, "--batch")
        ranged, by = options.batch_range, "--dynamic-batch"
        if ranged is None and policy.batch == "profile" and policy.batch_profile and profiles_built:
            ranged, by = policy.batch_profile, f"{target.name}'s shape policy"
        if ranged is not None:  # drawn small (a batch of 2 shows rows mixed), built for the range
            low, opt, high = ranged
            return _Dim(guess, "profile", min(max(SYMBOLIC_DIM_SIZE, low), high), by, low, opt, high)
        if policy.batch == "fixed":
            return _Dim(guess, "fixed", policy.batch_size, f"{target.name}'s shape policy")
        return _Dim(guess, "dynamic", SYMBOLIC_DIM_SIZE, f"{target.name} takes it dynamic")
    decision = policy.dims
    if static is not None and decision == "profile":
        decision = "fixed"
    if decision == "profile" and not profiles_built:
        decision = "dynamic"
    by = static if static is not None and policy.dims == "profile" else f"{target.name}'s shape policy"
    return _Dim(guess, decision, guess.typical, by, guess.typical, guess.typical, guess.typical)


def _find_sizes(source: Path, model: ir.Model, dims: list[_Dim], options: BuildOptions,
                plan: ShapePlan) -> None:
    """Sizes the original model runs on with some signal in its outputs: each dim's typical size,
    then its role's fallbacks; then how far each profile reaches (half to twice) where the model
    still runs. Only what the user did not size is moved."""
    from deploycc.verify.runner import RunError, probe_inputs

    free = [d for d in dims if d.guess.role != BATCH]
    if not free:
        return
    attempts = max(d.guess.attempts for d in free)
    candidates, drawn = [], []  # the attempt each candidate was drawn at
    for k, content in draws(attempts):
        feeds = _feeds(model, dims, options, {id(d): d.guess.size(k) for d in free}, content)
        if content == NOISE or pictures_possible(feeds):
            candidates.append(feeds)
            drawn.append(k)
    try:
        verdicts = probe_inputs(source, candidates)
    except RunError as error:  # ORT cannot load or crashes: verification will say so
        plan.notes.append(f"typical sizes not checked: {error}")
        return
    good = next((drawn[index] for index, verdict in enumerate(verdicts) if not verdict), None)
    if good is None and _takes_one_row(source, model, dims, options, free, plan):
        good = 0
    if good is None:
        plan.notes.append("the original model took none of the typical sizes: "
                          + "; ".join(v[:160] for v in verdicts[-2:] if v))
        return
    for d in free:
        d.size = d.low = d.opt = d.high = d.guess.size(good)
        if good:
            d.guess = dataclasses.replace(d.guess, source=f"{d.guess.role}: {d.size}, the first of its sizes "
                                                         f"the original runs on with signal")
    ranged = [d for d in free if d.decision == "profile"]
    if not ranged:
        return
    low = {id(d): max(1, d.size // PROFILE_SPAN) for d in ranged}
    high = {id(d): d.size * PROFILE_SPAN for d in ranged}
    try:
        reach = probe_inputs(source, [_feeds(model, dims, options, low), _feeds(model, dims, options, high)],
                             stop_at_first=False)
    except RunError as error:
        reach = [f"fails: {error}"] * 2
    reach = (reach + ["fails: not run"] * 2)[:2]  # a child that died early left fewer verdicts
    labels = (f"1/{PROFILE_SPAN}", f"{PROFILE_SPAN}x")
    refused = [f"{label} ({verdict[:160]})" for label, verdict in zip(labels, reach, strict=True)
               if verdict.startswith("fails")]
    for d in ranged:
        d.low = d.size if reach[0].startswith("fails") else low[id(d)]
        d.high = d.size if reach[1].startswith("fails") else high[id(d)]
    if refused:
        plan.notes.append("the profile stops at the typical size where the original model refuses "
                          + "; ".join(refused))


def _takes_one_row(source: Path, model: ir.Model, dims: list[_Dim], options: BuildOptions,
                   free: list[_Dim], plan: ShapePlan) -> bool:
    """Where the original refuses every size at the batch drawn and the batch is deploycc's to
    choose: whether it takes the typical sizes in a batch of 1, which the batch is then drawn at.
    onnxruntime-genai's decoders take one row only where a prompt meets a cache (GroupQueryAttention:
    "batch_size must be 1 when sequence_length > 1 and past context is given")."""
    from deploycc.verify.runner import RunError, probe_inputs

    users = ("--batch", "--dynamic-batch")
    rows = [d for d in dims if d.guess.role == BATCH and d.size != 1 and d.by not in users]
    if not rows:
        return False
    sizes = {id(d): d.guess.size(0) for d in free} | {id(d): 1 for d in rows}
    try:
        (verdict,) = probe_inputs(source, [_feeds(model, dims, options, sizes)])
    except RunError:
        return False
    if verdict:
        return False
    for d in rows:
        d.size, d.low = 1, min(d.low, 1)  # a profile's range takes the row drawn
    plan.notes.append(f"the original takes its typical sizes in a batch of 1 only, not {SYMBOLIC_DIM_SIZE}: "
                      "verification draws one row")
    return True


def _feeds(model: ir.Model, dims: list[_Dim], options: BuildOptions, sizes: dict[int, int],
           content: str = NOISE) -> dict[str, np.ndarray]:
    """Seeded inputs with each free dim at `sizes` and the batch as it will be drawn."""
    from deploycc.verify.inputs import generate

    graph = model.graph
    shapes = _shapes(graph, dims, options, sizes)
    values = [v for v in graph.inputs if v.name not in graph.initializers]
    return generate(values, seed=options.legalize.seed, shapes=shapes, content=content)


def _shapes(graph: ir.Graph, dims: list[_Dim], options: BuildOptions, sizes: dict[int, int]
            ) -> dict[str, list[int]]:
    from deploycc.graph.graphs import dims_of

    by_place = {(d.guess.input, d.guess.axis): d for d in dims}
    shapes: dict[str, list[int]] = {}
    for value in graph.inputs:
        name = value.name or ""
        declared = dims_of(value)
        if value.name in graph.initializers or declared is None:
            continue
        if name in options.legalize.sample_shapes:
            shapes[name] = list(options.legalize.sample_shapes[name])
            continue
        concrete = []
        for axis, dim in enumerate(declared):
            d = by_place.get((name, axis))
            if isinstance(dim, int):
                concrete.append(dim)
            elif d is None:  # sized by the user's --shape / --shape-range: their opt
                concrete.append(_user_size(options, name, axis))
            else:
                concrete.append(sizes.get(id(d), d.size))
        shapes[name] = concrete
    return with_sums(shapes, summed_dims(graph))


def _prompt_to_decode(graph: ir.Graph, dims: list[_Dim], plan: ShapePlan) -> None:
    """A decoder with a KV cache runs at two shapes of its own: the prompt (an empty cache, n new
    tokens) and every token after it (a cache of n, one new token); a profile around the typical
    size admits neither. One profile spans both: the new tokens from 1, the cache from 0, up to what
    the original was seen to run. One, not two (prompt: cache 0, tokens 1..N; decode: cache 1..M, 1
    token): trtexec and the board's runner build and time one profile, and two would tune each phase
    apart only for a caller that switches execution contexts between them."""
    from deploycc.graph.decoder import decoder_signature

    signature = decoder_signature(graph)
    ranged = [d for d in dims if d.decision == "profile"]
    if signature is None or not ranged:
        return
    past = {(e.past, e.axis) for e in signature.cache}
    ids = (signature.input_ids, 1)
    new_names = {d.guess.name for d in ranged if (d.guess.input, d.guess.axis) == ids} - {"?"}
    past_names = {d.guess.name for d in ranged if (d.guess.input, d.guess.axis) in past} - {"?"}
    for d in ranged:
        place = (d.guess.input, d.guess.axis)
        if place in past or d.guess.name in past_names:
            d.low = 0
        elif place == ids or d.guess.name in new_names:
            d.low = 1
    plan.notes.append("a decoder with a KV cache: one profile from the prompt (an empty cache) to "
                      "single-token steps (one new token), so the engine runs both phases")


def _summed(graph: ir.Graph, dims: list[_Dim]) -> None:
    """Each dim that is the sum of others (a decoder's attention mask spans its past and its new
    tokens) sized and ranged as the sum of its terms: decided apart, they disagree."""
    by_place = {(d.guess.input, d.guess.axis): d for d in dims}
    for place, terms in summed_dims(graph).items():
        total, parts = by_place.get(place), [by_place.get(term) for term in terms]
        if total is None or any(part is None for part in parts):
            continue
        known = [part for part in parts if part is not None]
        total.size = sum(part.size for part in known)
        total.low, total.opt, total.high = (sum(getattr(part, bound) for part in known)
                                            for bound in ("low", "opt", "high"))
        total.guess = dataclasses.replace(
            total.guess, typical=total.size, fallbacks=(),
            source=f"the sum of {' and '.join(f'{n}[{a}]' for n, a in terms)}")


def _user_size(options: BuildOptions, name: str, axis: int) -> int:
    given = options.legalize.shapes.get(name)
    if given is not None and axis < len(given) and isinstance(given[axis], int):
        return int(given[axis])
    ranged = options.shape_ranges.get(name)
    if ranged is not None and axis < len(ranged[1]):
        return int(ranged[1][axis])
    return SYMBOLIC_DIM_SIZE


def _carry_out(plan: ShapePlan, dims: list[_Dim], declared: dict[str, list[int | str] | None],
               options: BuildOptions) -> BuildOptions:
    """The options that build what the plan says, and the plan's record of each input."""
    legalize = dataclasses.replace(options.legalize, shapes=dict(options.legalize.shapes),
                                   sample_shapes=dict(options.legalize.sample_shapes))
    ranges = dict(options.shape_ranges)
    by_input: dict[str, list[_Dim]] = {}
    for d in dims:
        by_input.setdefault(d.guess.input, []).append(d)
    for name, exported_dims in declared.items():
        decided = by_input.get(name)
        if not decided:
            plan.inputs.append(_as_given(name, exported_dims, options))
            continue
        exported = exported_dims or []
        places = {d.guess.axis: d for d in decided}
        fixed = [places[a].size if a in places and places[a].decision == "fixed" else
                 (dim if isinstance(dim, int) else "dynamic") for a, dim in enumerate(exported)]
        if any(d.decision == "fixed" for d in decided):
            legalize.shapes[name] = fixed
        sample = [dim if isinstance(dim, int) else (places[a].size if a in places else SYMBOLIC_DIM_SIZE)
                  for a, dim in enumerate(exported)]
        if legalize.inputs is None and name not in legalize.sample_shapes:
            legalize.sample_shapes[name] = sample
        profile = None
        if any(d.decision == "profile" for d in decided):
            bounds = [(places[a].low, places[a].opt, places[a].high) if a in places and
                      places[a].decision == "profile" else (sample[a],) * 3 for a in range(len(exported))]
            low, opt, high = ([int(b[i]) for b in bounds] for i in range(3))
            ranges[name] = (low, opt, high)
            profile = ShapeProfile(name, low, opt, high)
        plan.inputs.append(InputShapes(
            input=name, exported=list(exported), accepts=_accepts(exported, places), sample=sample,
            profile=profile, how=[_how(d) for d in decided]))
    return dataclasses.replace(options, legalize=legalize, shape_ranges=ranges)


def _as_given(name: str, exported: list[int | str] | None, options: BuildOptions) -> InputShapes:
    """An input the plan leaves alone: static as exported, or sized by the user's flags."""
    dims = list(exported or [])
    if name in options.shape_ranges:
        low, opt, high = options.shape_ranges[name]
        accepts = "x".join(str(o) if a == b else f"[{a}..{o}..{b}]"
                           for a, o, b in zip(low, opt, high, strict=False))
        profile = ShapeProfile(name, list(low), list(opt), list(high))
        return InputShapes(name, dims, accepts, list(opt), profile, ["--shape-range"])
    given = options.legalize.shapes.get(name)
    if given is not None:
        shown = [g if g != "dynamic" else (dims[a] if a < len(dims) else g) for a, g in enumerate(given)]
        sample = [int(d) if isinstance(d, int) else SYMBOLIC_DIM_SIZE for d in shown]
        return InputShapes(name, dims, "x".join(str(d) for d in shown), sample, None, ["--shape"])
    sample = [d if isinstance(d, int) else SYMBOLIC_DIM_SIZE for d in dims]
    return InputShapes(name, dims, "x".join(str(d) for d in dims) or "scalar", sample)


def _accepts(exported: list[int | str], places: dict[int, _Dim]) -> str:
    parts = []
    for axis, dim in enumerate(exported):
        d = places.get(axis)
        if d is None:
            parts.append(str(dim))
        elif d.decision == "fixed":
            parts.append(str(d.size))
        elif d.decision == "profile":
            parts.append(f"[{d.low}..{d.opt}..{d.high}]" if d.low != d.high else str(d.opt))
        else:
            parts.append("N" if d.guess.role == BATCH else "any")
    return "x".join(parts)


def _how(d: _Dim) -> str:
    where = f"{d.guess.input}[{d.guess.axis}] ({d.guess.name})"
    if d.decision == "fixed":
        return f"{where} fixed at {d.size} by {d.by}; {d.guess.source}"
    if d.decision == "profile":
        return f"{where} a profile {d.low}..{d.opt}..{d.high} by {d.by}, drawn at {d.size}; {d.guess.source}"
    return f"{where} dynamic ({d.by}), drawn at {d.size}; {d.guess.source}"
