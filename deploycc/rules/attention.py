"""Attention (opset 23) and RotaryEmbedding (opset 23) into MatMul / Softmax / Slice / Concat.

Attention: Y = softmax(softcap(Q K^T * scale) + bias) V, with Q, K, V as (B, H, S, D), or
(B, S, H*D) reshaped by q_num_heads / kv_num_heads; bias from attn_mask (bool: 0 where True,
-inf where False; float: added as is) and is_causal (key j visible to query i iff j <= i).
A query row whose bias is all -inf gives zeros, as the spec says, not NaN.
Declined: past_key/past_value (KV cache), nonpad_kv_seqlen, grouped-query heads, a mask
narrower than the key sequence, the qk_matmul_output output, and is_causal with dynamic
sequence lengths.

RotaryEmbedding: x viewed as (B, S, H, D); the first rotary_embedding_dim features split into
halves (or even/odd features when interleaved) x1, x2 and rotated by the cached angles
(cos, sin) at each position: (x1 cos - x2 sin, x1 sin + x2 cos); the rest passes through.

TensorScatter (opset 24, the KV-cache write): ScatterElements along the sequence axis at
write_indices[b] + s (modulo the cache length when circular).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


def _heads_first(b: Builder, x: ir.Value, heads: int) -> ir.Value:
    """(B, S, H*D) -> (B, H, S, D)"""
    return b.op("Transpose", b.op("Reshape", x, b.ints([0, 0, heads, -1])), perm=[0, 2, 1, 3])


@register
class AttentionRule(Rule):
    """Attention (opset 23/24): softmax(Q K^T * scale + mask) V without KV cache."""

    name = "attention"
    family = "attention"
    op_type = "Attention"
    since = 23
    until = 24

    def check(self, site: Site) -> str | None:
        if any(site.has_input(i) for i in (4, 5, 6)):
            return "past_key/past_value/nonpad_kv_seqlen (KV cache) are not rewritten"
        if site.output_used(3) or site.attr("qk_matmul_output_mode", 0):
            return "the qk_matmul_output output is not rewritten"
        rank = site.rank(0)
        if rank not in (3, 4):
            return "Q's rank is unknown" if rank is None else f"Q has rank {rank}, not 3 or 4"
        if rank == 3:
            q_heads, kv_heads = site.attr("q_num_heads"), site.attr("kv_num_heads")
            if not q_heads or not kv_heads:
                return "3-D inputs need q_num_heads and kv_num_heads"
        else:
            q_heads, kv_heads = (site.shape(0) or [None] * 4)[1], (site.shape(1) or [None] * 4)[1]
            if q_heads is None or kv_heads is None:
                return "head counts of Q and K are dynamic"
        if q_heads != kv_heads:
            return f"grouped-query attention ({q_heads} query heads, {kv_heads} KV heads) is not rewritten"
        if site.attr("scale") is None and self._head_size(site) is None:
            return "no scale attribute and the head size is dynamic"
        if site.has_input(3):
            mask_shape, k_shape = site.shape(3), site.shape(1)
            kv_len = None if k_shape is None else k_shape[2 if rank == 4 else 1]
            if mask_shape is None or kv_len is None or mask_shape[-1] != kv_len:
                return "attn_mask must be as wide as the key sequence (static shapes)"
        if site.attr("is_causal", 0) and self._lengths(site) is None:
            return "is_causal needs static query and key sequence lengths"
        return None

    @staticmethod
    def _head_size(site: Site) -> int | None:
        shape = site.shape(0)
        if shape is None or shape[-1] is None:
            return None
        if len(shape) == 3:
            heads = site.attr("q_num_heads")
            return shape[-1] // heads if heads else None
        return shape[-1]

    @staticmethod
    def _lengths(site: Site) -> tuple[int, int] | None:
        q, k = site.shape(0), site.shape(1)
        if q is None or k is None:
            return None
        axis = 2 if len(q) == 4 else 1
        if q[axis] is None or k[axis] is None:
            return None
        return q[axis], k[axis]  # type: ignore[return-value]

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        q, k, v = site.inputs[0], site.inputs[1], site.inputs[2]
        assert q is not None and k is not None and v is not None
        dtype = site.dtype(0)
        three_d = site.rank(0) == 3
        if three_d:
            q = _heads_first(b, q, site.attr("q_num_heads"))
            k = _heads_first(b, k, site.attr("kv_num_heads"))
            v = _heads_first(b, v, site.attr("kv_num_heads"))
        scale = site.attr("scale")
        if scale is None:
            scale = 1 / math.sqrt(self._head_size(site))  # type: ignore[arg-type]
        scores = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = b.op("Mul", scores, b.scalar_like(scale, dtype))
        softcap = site.attr("softcap", 0.0)
        if softcap and softcap > 0:
            scores = b.op("Mul", b.op("Tanh", b.op("Div", scores, b.scalar_like(softcap, dtype))),
                          b.scalar_like(softcap, dtype))
        bias, visible = self._bias(site, b, dtype)
        if bias is not None:
            scores = b.op("Add", scores, bias)
        probs = b.softmax(scores, -1)
        if visible is not None:  # rows with no visible key are zeros, not NaN
            probs = b.op("Where", visible, probs, b.scalar_like(0.0, dtype))
        y = b.op("MatMul", probs, v)
        if three_d:
            y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints([0, 0, -1]))
        outputs = [y]
        if site.output_count > 1:
            if site.output_used(1) or site.output_used(2):
                raise Decline("present_key/present_value outputs are used")
        return outputs

    def _bias(self, site: Site, b: Builder, dtype: ir.DataType | None
              ) -> tuple[ir.Value | None, ir.Value | None]:
        """The additive bias and, when rows can be fully masked, which (query) rows see a key."""
        np_dtype = dtype.numpy() if dtype is not None else np.float32
        bias: ir.Value | None = None
        allowed: ir.Value | None = None
        if site.attr("is_causal", 0):
            lengths = self._lengths(site)
            assert lengths is not None
            q_len, kv_len = lengths
            allowed_causal = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None]
            allowed = b.const(allowed_causal)
        mask = site.input(3)
        if mask is not None:
            if mask.dtype is not None and mask.dtype.name == "BOOL":
                allowed = mask if allowed is None else b.op("And", allowed, mask)
            else:
                bias = mask
        if allowed is not None:
            masked = b.op("Where", allowed, b.const(np.array(0, np_dtype)),
                          b.const(np.array(-np.inf, np_dtype)))
            bias = masked if bias is None else b.op("Add", bias, masked)
            any_visible = b.reduce("ReduceMax", b.op("Cast", allowed, to=6), [-1])  # int32
            return bias, b.op("Greater", any_visible, b.const(np.array(0, np.int32)))
        return bias, None


@register
class RotaryEmbeddingRule(Rule):
    """RotaryEmbedding (opset 23): rotate feature pairs of x by the cached angle of each position."""

    name = "rotary-embedding"
    family = "attention"
    op_type = "RotaryEmbedding"
    since = 23

    def check(self, site: Site) -> str | None:
        rank = site.rank(0)
        if rank not in (3, 4):
            return "the input's rank is unknown" if rank is None else f"input has rank {rank}"
        if rank == 3 and not site.attr("num_heads"):
            return "a 3-D input needs num_heads"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, cos, sin = site.inputs[0], site.inputs[1], site.inputs[2]
        assert x is not None and cos is not None and sin is not None
        four_d = site.rank(0) == 4
        x = (b.op("Transpose", x, perm=[0, 2, 1, 3]) if four_d  # -> (B, S, H, D)
             else b.op("Reshape", x, b.ints([0, 0, site.attr("num_heads"), -1])))
        if site.has_input(3):
            cos = b.op("Gather", cos, site.inputs[3], axis=0)
            sin = b.op("Gather", sin, site.inputs[3], axis=0)
        cos, sin = b.unsqueeze(cos, [2]), b.unsqueeze(sin, [2])  # (B, S, 1, rot/2)
        rot_dim = site.attr("rotary_embedding_dim", 0)
        rotated_part = x if not rot_dim else self._slice(b, x, 0, rot_dim)
        if site.attr("interleaved", 0):
            x1 = self._slice(b, rotated_part, 0, None, step=2)
            x2 = self._slice(b, rotated_part, 1, None, step=2)
        else:
            x1, x2 = b.ops("Split", rotated_part, outputs=2, axis=-1, num_outputs=2)
        real = b.op("Sub", b.op("Mul", cos, x1), b.op("Mul", sin, x2))
        imag = b.op("Add", b.op("Mul", sin, x1), b.op("Mul", cos, x2))
        if site.attr("interleaved", 0):
            pairs = b.op("Concat", b.unsqueeze(real, [-1]), b.unsqueeze(imag, [-1]), axis=-1)
            y = b.op("Reshape", pairs, b.ints([0, 0, 0, -1]))
        else:
            y = b.op("Concat", real, imag, axis=-1)
        if rot_dim:
            y = b.op("Concat", y, self._slice(b, x, rot_dim, None), axis=-1)
        if four_d:
            return [b.op("Transpose", y, perm=[0, 2, 1, 3])]
        return [b.op("Reshape", y, b.ints([0, 0, -1]))]

    @staticmethod
    def _slice(b: Builder, x: ir.Value, start: int, end: int | None, step: int = 1) -> ir.Value:
        stop = end if end is not None else np.iinfo(np.int64).max
        return b.op("Slice", x, b.ints([start]), b.ints([stop]), b.ints([-1]), b.ints([step]))


@register
class TensorScatterRule(Rule):
    """TensorScatter(past, update, w) = ScatterElements(past, i, update, axis): i[b, .., s, ..] = w[b] + s
    (mod the cache length when mode=circular), i broadcast to update's shape."""

    name = "tensor-scatter"
    family = "attention"
    op_type = "TensorScatter"
    since = 24

    def check(self, site: Site) -> str | None:
        past, update = site.shape(0), site.shape(1)
        if past is None or update is None or len(past) != len(update):
            return "the cache and update ranks are unknown"
        axis = int(site.attr("axis", -2)) % len(past)
        if update[axis] is None or (site.attr("mode", "linear") == "circular" and past[axis] is None):
            return "the sequence lengths are not static"
        if axis == 0:
            return "the sequence axis is the batch axis"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        past, update = site.shape(0), site.shape(1)
        assert past is not None and update is not None
        rank = len(past)
        axis = int(site.attr("axis", -2)) % rank
        along = [1] * rank
        along[axis] = int(update[axis])  # type: ignore[arg-type]
        steps = b.const(np.arange(along[axis], dtype=np.int64).reshape(along))
        per_batch = [-1] + [1] * (rank - 1)
        if site.has_input(2):
            starts = b.op("Reshape", b.op("Cast", site.input(2), to=7), b.ints(per_batch))
            index = b.op("Add", starts, steps)
        else:
            index = steps
        if site.attr("mode", "linear") == "circular":
            index = b.op("Mod", index, b.ints([int(past[axis])]))  # type: ignore[arg-type]
        index = b.op("Expand", index, b.op("Shape", site.input(1)))
        return [b.op("ScatterElements", site.input(0), index, site.input(1), axis=axis)]
