"""A decoder that generates with a KV cache, recognised from its signature: token ids in, logits
out, and for each layer a past key and value read beside the new tokens and returned grown by
them (the present). Optimum, onnxruntime-genai's model builder and transformers' exports all
write it so:

    input_ids       [batch_size, sequence_length]            int64
    attention_mask  [batch_size, past_sequence_length + sequence_length]
    position_ids    [batch_size, sequence_length]            (optional)
    past_key_values.N.key / .value   [batch_size, kv_heads, past_sequence_length, head_dim]
    -> logits [batch_size, sequence_length, vocab], present.N.key / .value (past grown by the new)

The dims' roles follow: the past length (the cache's axis that grows), the new tokens' length, and
their sum, which the mask spans. Verification draws the sum where the mask is (graph/dim_roles.py),
and generation feeds each step's present back as the next step's past (verify/generation.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploycc.graph.graphs import dims_of

if TYPE_CHECKING:
    import onnx_ir as ir

KEY, VALUE = "key", "value"
_PART = re.compile(r"(?:^|[._])(key|value|k|v)(?:$|[._\d])")
_LAYER = re.compile(r"(\d+)")


@dataclass(frozen=True)
class CacheEntry:
    """One layer's key or value cache: the input read as the past, the output returned as the
    present, and the axis that grows by the new tokens."""

    layer: int
    part: str  # KEY or VALUE
    past: str
    present: str
    axis: int


@dataclass(frozen=True)
class DecoderSignature:
    """The inputs and outputs a greedy generation loop feeds and reads."""

    input_ids: str
    logits: str
    cache: tuple[CacheEntry, ...]
    attention_mask: str | None = None
    position_ids: str | None = None

    @property
    def layers(self) -> int:
        return len({entry.layer for entry in self.cache})

    def describe(self) -> str:
        return (f"a decoder with a KV cache ({self.layers} layers, {len(self.cache)} cache tensors; "
                f"tokens '{self.input_ids}', logits '{self.logits}')")


def _cache_key(name: str, word: str) -> tuple[int, str] | None:
    """(layer, part) of a cache tensor's name holding `word` ('past' or 'present'), else None."""
    lowered = name.lower()
    if word not in lowered:
        return None
    rest = lowered.replace(word, "", 1).replace("key_values", "")  # Optimum's past_key_values.N.key
    layer, parts = _LAYER.search(rest), _PART.findall(rest)
    if layer is None or not parts:
        return None
    return int(layer.group(1)), KEY if parts[-1] in ("key", "k") else VALUE


def _growing_axis(past: ir.Value, present: ir.Value) -> int | None:
    """The cache axis that grows: where the present's dim is named apart from the past's; else
    the past's one dynamic dim beyond the batch (its length)."""
    past_dims, present_dims = dims_of(past), dims_of(present)
    if past_dims is None:
        return None
    if present_dims is not None and len(present_dims) == len(past_dims):
        differing = [axis for axis, (a, b) in enumerate(zip(past_dims, present_dims, strict=True))
                     if axis > 0 and a != b and not isinstance(a, int)]
        if len(differing) == 1:
            return differing[0]
    dynamic = [axis for axis, dim in enumerate(past_dims) if axis > 0 and not isinstance(dim, int)]
    return dynamic[-1] if len(dynamic) == 1 or (dynamic and len(past_dims) == 4) else None


def _named(values: list[ir.Value], *words: str) -> ir.Value | None:
    return next((v for word in words for v in values if word in (v.name or "").lower()), None)


def decoder_signature(graph: ir.Graph) -> DecoderSignature | None:
    """The graph's decoder signature, or None where it is not a decoder with a KV cache: at least
    one past input paired with its present output, integer token ids and a logits output."""
    inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    pasts = {key: v for v in inputs if (key := _cache_key(v.name or "", "past")) is not None}
    presents = {key: v for v in graph.outputs if (key := _cache_key(v.name or "", "present")) is not None}
    cache = []
    for key in sorted(pasts.keys() & presents.keys()):
        axis = _growing_axis(pasts[key], presents[key])
        if axis is None:
            return None
        cache.append(CacheEntry(key[0], key[1], pasts[key].name or "", presents[key].name or "", axis))
    if not cache or len(cache) != len(pasts):
        return None
    integer = [v for v in inputs
               if v.dtype is not None and v.dtype.is_integer() and len(dims_of(v) or []) == 2]
    ids = _named(integer, "input_ids", "ids", "token")
    if ids is None:
        return None
    rest = [v for v in graph.outputs if _cache_key(v.name or "", "present") is None]
    logits = _named(rest, "logits") or (rest[0] if len(rest) == 1 else None)
    if logits is None:
        return None
    mask, positions = _named(integer, "attention_mask", "mask"), _named(integer, "position_ids", "position")
    return DecoderSignature(ids.name or "", logits.name or "", tuple(cache),
                            mask.name if mask is not None else None,
                            positions.name if positions is not None else None)
