"""Attention-23 and RotaryEmbedding-23 rewrites against ORT's (or the reference's) kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import rewrite_and_compare


@pytest.mark.parametrize("attributes", ["", "<is_causal=1>", "<scale=0.5>", "<softcap=2.0>"])
def test_attention_4d(attributes: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,3,4,8] q, float[2,3,4,8] k, float[2,3,4,6] v) => (float[2,3,4,6] y) {{
            y = Attention{attributes}(q, k, v)
        }}
    """, "Attention", "attention", atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("mask", ["bool[4,5] m", "float[2,1,4,5] m"])
def test_attention_with_mask(mask: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,3,4,8] q, float[2,3,5,8] k, float[2,3,5,8] v, {mask}) => (float[2,3,4,8] y) {{
            y = Attention(q, k, v, m)
        }}
    """, "Attention", "attention", atol=1e-4, rtol=1e-3)


def test_attention_3d_with_head_counts() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,4,12] q, float[2,5,12] k, float[2,5,12] v) => (float[2,4,12] y) {
            y = Attention<q_num_heads=3, kv_num_heads=3>(q, k, v)
        }
    """, "Attention", "attention", atol=1e-4, rtol=1e-3)


def test_grouped_query_attention_falls_to_the_onnx_body() -> None:
    """The attention rule declines grouped-query heads; the spec's own body takes them."""
    decision = rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[1,4,3,8] q, float[1,2,3,8] k, float[1,2,3,8] v) => (float[1,4,3,8] y) {
            y = Attention(q, k, v)
        }
    """, "Attention", "function-body", atol=1e-4, rtol=1e-3)
    assert any(rule == "attention" and "grouped-query" in why for rule, why in decision.declined)


def test_kv_cache_falls_to_the_onnx_body() -> None:
    decision = rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[1,2,3,8] q, float[1,2,3,8] k, float[1,2,3,8] v, float[1,2,5,8] pk, float[1,2,5,8] pv)
          => (float[1,2,3,8] y) {
            y = Attention(q, k, v, , pk, pv)
        }
    """, "Attention", "function-body", atol=1e-4, rtol=1e-3)
    assert any(rule == "attention" and "KV cache" in why for rule, why in decision.declined)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_4d(interleaved: int) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,3,4,8] x, float[2,4,4] cos, float[2,4,4] sin) => (float[2,3,4,8] y) {{
            y = RotaryEmbedding<interleaved={interleaved}>(x, cos, sin)
        }}
    """, "RotaryEmbedding", "rotary-embedding")


def test_rotary_embedding_3d_partial_with_position_ids() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,4,16] x, float[16,2] cos, float[16,2] sin, int64[2,4] position_ids) => (float[2,4,16] y) {
            y = RotaryEmbedding<num_heads=2, rotary_embedding_dim=4>(x, cos, sin, position_ids)
        }
    """, "RotaryEmbedding", "rotary-embedding", int_high=16)


@pytest.mark.parametrize(("mode", "update_len", "starts"), [("linear", 1, [3, 0]), ("linear", 2, [1, 2]),
                                                           ("circular", 3, [2, 3])])
def test_tensor_scatter_writes_the_cache(mode: str, update_len: int, starts: list[int]) -> None:
    rng = np.random.default_rng(0)
    feeds = {"past": rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
             "update": rng.standard_normal((2, 3, update_len, 4)).astype(np.float32),
             "w": np.array(starts, dtype=np.int64)}
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 24]>
        g (float[2,3,5,4] past, float[2,3,{update_len},4] update, int64[2] w) => (float[2,3,5,4] present) {{
            present = TensorScatter <mode="{mode}"> (past, update, w)
        }}
    """, "TensorScatter", "tensor-scatter", feeds=feeds, seeds=(1,), atol=0, rtol=0)
