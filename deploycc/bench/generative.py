"""A decoder's benchmark in the terms its users read (issue 52): time to first token at a prompt
length, decode tokens per second at the context that prompt makes, and the memory the KV cache
takes there. Batch 1, greedy, the cache fed back as each step's past (verify/generation.py's
loop); a prompt length past what the model takes (its positions) is reported as refused, with
the reason, and the longer ones are not tried."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import numpy as np

from deploycc.graph.decoder import DecoderSignature
from deploycc.records.bench import GenerationBench, GenerationTiming
from deploycc.verify.generation import empty_cache, last_logits, next_cache, step_feeds

PROMPT_LENGTHS = (128, 512, 2048)
DECODE_TOKENS = 32
REPEATS = 3

Run = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


def time_generation(run: Run, signature: DecoderSignature, drawn: Mapping[str, np.ndarray], *,
                    lengths: tuple[int, ...] = PROMPT_LENGTHS, decode_tokens: int = DECODE_TOKENS,
                    repeats: int = REPEATS, seed: int = 0) -> GenerationBench:
    """`drawn`: inputs the model takes (their dtypes, the cache's other dims, token ids in range)."""
    dtypes = {name: array.dtype for name, array in drawn.items()}
    vocabulary = int(np.max(drawn[signature.input_ids])) + 1
    rng = np.random.default_rng(seed)
    bench = GenerationBench(repeats=repeats)
    for length in lengths:
        prompt = rng.integers(0, vocabulary, (1, length)).astype(drawn[signature.input_ids].dtype)
        try:
            bench.timings.append(_timed(run, signature, prompt, empty_cache(signature, drawn), dtypes,
                                        decode_tokens, repeats))
        except Exception as error:  # past the model's positions, out of memory: the longer ones too
            bench.refused[str(length)] = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            break
    return bench


def _timed(run: Run, signature: DecoderSignature, prompt: np.ndarray, cache: dict[str, np.ndarray],
           dtypes: Mapping[str, np.dtype], decode_tokens: int, repeats: int) -> GenerationTiming:
    prefill, decode = [], []
    cache_bytes = 0

    def greedy(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.array([[int(np.argmax(last_logits(signature, outputs)))]], prompt.dtype)

    run(step_feeds(signature, prompt, cache, 0, dtypes))  # warm: the first run at a new size plans it
    for _ in range(repeats):
        feeds = step_feeds(signature, prompt, cache, 0, dtypes)
        tick = time.perf_counter()
        outputs = run(feeds)
        prefill.append(time.perf_counter() - tick)
        past, length = next_cache(signature, outputs), prompt.shape[1]
        token = greedy(outputs)
        spent = 0.0
        for _ in range(decode_tokens):
            feeds = step_feeds(signature, token, past, length, dtypes)
            tick = time.perf_counter()
            outputs = run(feeds)
            spent += time.perf_counter() - tick
            past, length = next_cache(signature, outputs), length + 1
            token = greedy(outputs)
        decode.append(spent)
        cache_bytes = sum(array.nbytes for array in past.values())
    per_token = statistics.median(decode) / decode_tokens
    return GenerationTiming(prompt_tokens=int(prompt.shape[1]),
                            ttft_ms=round(statistics.median(prefill) * 1e3, 3),
                            decode_tokens=decode_tokens, decode_tokens_per_s=round(1.0 / per_token, 2),
                            decode_ms_per_token=round(per_token * 1e3, 3), cache_bytes=int(cache_bytes))
