"""A decoder's check beyond one forward: a short greedy generation with the KV cache, the
candidate against the original.

One forward at a drawn past length proves each step's arithmetic; what a user runs is the loop:
a prompt with an empty cache (past length 0), then one token at a time, each step reading the
cache the step before returned. A rewrite that keeps one forward right can still break the loop
(a cache returned in another layout, a mask or a position that drifts with the past length, an
empty past the engine refuses). So the original generates greedily from a prompt, and the
candidate runs the same tokens with its own cache: at every position its greedy choice must be the
original's (on a share the precision's budget sets), and its logits within the precision's
tolerances. Teacher-forced: one early difference does not make every later position differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from deploycc.graph.decoder import DecoderSignature
from deploycc.records.verification import GenerationCheck
from deploycc.taxonomy import Precision
from deploycc.verify.compare import MISMATCH_SHARE, TOLERANCES, compare, judged_as

PROMPT_TOKENS = 8
NEW_TOKENS = 16
# The share of positions whose greedy token must be the original's: all in fp32, 90% in the
# narrower precisions (issue 52's bar for weight-only int4: a near-tie may flip under rounding).
MIN_AGREEMENT: dict[Precision, float] = {Precision.FP32: 1.0}
DEFAULT_AGREEMENT = 0.9
# The share of the logits that may lie past the tolerance in the narrower precisions (fp32: none):
# a vocabulary of 152 k words over 16 steps is 2.4 M logits, and Qwen2.5-0.5B's bf16 engine put 1 of
# them past bf16's 0.05 while every token matched and the cosine was 0.99982. Cosine still holds.
NARROW_LOGIT_SHARE = 1e-4

Run = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


def min_agreement(precision: Precision) -> float:
    return MIN_AGREEMENT.get(precision, DEFAULT_AGREEMENT)


def empty_cache(signature: DecoderSignature, drawn: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each past input at batch 1 and length 0, in the dtype and the other dims it was drawn at for
    the forward verification (heads and head size: what the graph takes)."""
    cache = {}
    for entry in signature.cache:
        shape = list(drawn[entry.past].shape)
        shape[0], shape[entry.axis] = 1, 0
        cache[entry.past] = np.zeros(shape, drawn[entry.past].dtype)
    return cache


def prompt_from(signature: DecoderSignature, drawn: Mapping[str, np.ndarray], length: int = PROMPT_TOKENS
                ) -> np.ndarray:
    """A prompt of token ids the model takes: the first row of the drawn ids (drawn in the range
    the model's embedding reads)."""
    return np.ascontiguousarray(drawn[signature.input_ids][:1, :length])


def generate(run: Run, signature: DecoderSignature, prompt: np.ndarray, cache: Mapping[str, np.ndarray],
             steps: int, dtypes: Mapping[str, np.dtype], forced: list[int] | None = None
             ) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding for `steps` tokens: (the token chosen at each step, that step's logits at
    the last position). With `forced`, step i + 1 is fed forced[i] instead of its own choice.
    `dtypes`: the dtype each input is fed in (the model's integer width)."""
    past = dict(cache)
    past_length, current = 0, prompt
    chosen: list[int] = []
    rows: list[np.ndarray] = []
    for step in range(steps):
        outputs = run(step_feeds(signature, current, past, past_length, dtypes))
        row = last_logits(signature, outputs)
        chosen.append(int(np.argmax(row)))
        rows.append(row)
        past, past_length = next_cache(signature, outputs), past_length + current.shape[1]
        token = forced[step] if forced is not None else chosen[-1]
        current = np.array([[token]], prompt.dtype)
    return chosen, rows


def step_feeds(signature: DecoderSignature, tokens: np.ndarray, past: Mapping[str, np.ndarray],
               past_length: int, dtypes: Mapping[str, np.dtype]) -> dict[str, np.ndarray]:
    """One step's inputs: the new tokens [1, n] after `past_length` cached ones, the mask over all
    of them, their positions, and the cache; each in the dtype `dtypes` gives it."""
    length = tokens.shape[1]
    feeds = {signature.input_ids: tokens, **past}
    if signature.attention_mask is not None:
        feeds[signature.attention_mask] = np.ones((1, past_length + length), np.int64)
    if signature.position_ids is not None:
        feeds[signature.position_ids] = np.arange(past_length, past_length + length, dtype=np.int64)[None]
    return {name: np.asarray(array, dtypes.get(name, array.dtype)) for name, array in feeds.items()}


def decode_step(signature: DecoderSignature, drawn: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One token after a cache as long as the drawn one, in a batch of 1: what each token of a
    generation costs (the drawn forward is a prompt's), from the drawn inputs' first row."""
    past = {entry.past: np.ascontiguousarray(drawn[entry.past][:1]) for entry in signature.cache}
    length = next((int(drawn[entry.past].shape[entry.axis]) for entry in signature.cache), 0)
    tokens = np.ascontiguousarray(drawn[signature.input_ids][:1, :1])
    return step_feeds(signature, tokens, past, length, {name: array.dtype for name, array in drawn.items()})


def last_logits(signature: DecoderSignature, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """A step's logits at its last position (what its greedy token is chosen from), as float32."""
    return np.asarray(outputs[signature.logits])[0, -1].astype(np.float32)


def next_cache(signature: DecoderSignature, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The next step's past: this step's present outputs."""
    return {entry.past: np.asarray(outputs[entry.present]) for entry in signature.cache}


@dataclass
class Reference:
    """The original's greedy generation: the prompt, the token it chose at each step, and that
    step's logits."""

    prompt: np.ndarray
    tokens: list[int]
    logits: list[np.ndarray]


def reference_generation(original: Run, signature: DecoderSignature, original_feeds: Mapping[str, np.ndarray],
                         new_tokens: int = NEW_TOKENS) -> Reference:
    """The original's greedy generation from a prompt of the drawn ids and an empty cache.
    `original_feeds`: the inputs it took in the forward verification (dtypes, the cache's dims)."""
    prompt = prompt_from(signature, original_feeds)
    types = {name: array.dtype for name, array in original_feeds.items()}
    tokens, logits = generate(original, signature, prompt, empty_cache(signature, original_feeds),
                              new_tokens, types)
    return Reference(prompt, tokens, logits)


def check_generation(original: Run | Reference, candidate: Run, signature: DecoderSignature, *,
                     original_feeds: Mapping[str, np.ndarray], candidate_feeds: Mapping[str, np.ndarray],
                     precision: Precision, ran_on: str, new_tokens: int = NEW_TOKENS,
                     by_tokens: bool = False) -> GenerationCheck:
    """The candidate's greedy generation against the original's (its run, or its generation done
    before: a large model's two sessions need not be held at once). `*_feeds`: the inputs each took
    in the forward verification (their dtypes and cache dims are what each is fed here). `by_tokens`:
    the logits judged by their cosine only, not element by element (a quantized decoder: a trained
    byte-level Llama's int4 moved 25% of its logits past int8's 0.1 while 93-96% of its greedy tokens
    and its perplexity, within 0.5%, held)."""
    reference = original if isinstance(original, Reference) else \
        reference_generation(original, signature, original_feeds, new_tokens)
    prompt, tokens, expected = reference.prompt, reference.tokens, reference.logits
    new_tokens = len(tokens)
    candidate_types = {name: array.dtype for name, array in candidate_feeds.items()}
    chosen, actual = generate(candidate, signature, prompt, empty_cache(signature, candidate_feeds),
                              new_tokens, candidate_types, forced=tokens)
    judged = judged_as(precision.value)
    atol, rtol, cosine = TOLERANCES[judged]
    share = MISMATCH_SHARE.get(judged, 0.0 if judged == Precision.FP32 else NARROW_LOGIT_SHARE)
    logits = compare("logits at each generated position", np.stack(expected), np.stack(actual), atol=atol,
                     rtol=rtol, min_cosine=cosine, mismatch_share=share)
    # a near-tie is not a difference: the candidate's token scores within tolerance of the original's
    equal = [mine == theirs or bool(row[mine] >= row[theirs] - (atol + rtol * abs(row[theirs])))
             for mine, theirs, row in zip(chosen, tokens, expected, strict=True)]
    agreed = sum(equal)
    first = next((index for index, same in enumerate(equal) if not same), None)
    needed = min_agreement(judged)
    problem = ""
    if agreed < needed * new_tokens:
        problem = (f"greedy generation: {agreed} of {new_tokens} tokens equal to the original's (the "
                   f"budget asks {needed:.0%}), first different at position {first}")
    elif by_tokens and logits.cosine_similarity < cosine:
        problem = f"greedy generation: the logits' cosine {logits.cosine_similarity:.6f} below {cosine}"
    elif not by_tokens and not logits.passed:
        problem = f"greedy generation: logits {logits.problem}"
    return GenerationCheck(prompt_tokens=int(prompt.shape[1]), new_tokens=new_tokens, tokens_equal=agreed,
                           min_agreement=needed, logits=logits, ran_on=ran_on, passed=not problem,
                           first_difference=first, problem=problem)
