"""com.microsoft contrib ops into standard ONNX, checked against ORT's contrib kernels."""

from __future__ import annotations

import pytest

from tests.rules.helpers import declines, rewrite_and_compare

HEADER = '<ir_version: 10, opset_import: ["" : 17, "com.microsoft" : 1]>'


@pytest.mark.parametrize(("call", "inputs", "rule"), [
    ("Gelu", "x", "ms-gelu"),
    ("BiasGelu", "x, b", "ms-bias-gelu"),
    ("FastGelu", "x, b", "ms-fast-gelu"),
    ("FastGelu", "x", "ms-fast-gelu"),
    ("QuickGelu<alpha=1.5>", "x", "ms-quick-gelu"),
])
def test_gelu_family(call: str, inputs: str, rule: str) -> None:
    op = call.split("<")[0]
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[8] b) => (float[2,3,8] y) {{ y = com.microsoft.{call}({inputs}) }}
    """, op, rule, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("attributes", [
    'activation="Relu"', 'activation="LeakyRelu", activation_params=[0.1]',
    'activation="Sigmoid"', 'activation="Tanh"',
])
def test_fused_conv(attributes: str) -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[1,2,5,5] x, float[3,2,3,3] w, float[3] b, float[1,3,3,3] z) => (float[1,3,3,3] y) {{
            y = com.microsoft.FusedConv<{attributes}>(x, w, b, z)
        }}
    """, "FusedConv", "ms-fused-conv", atol=1e-4, rtol=1e-3)


def test_skip_layer_normalization_with_sum_output() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[2,3,8] skip, float[8] gamma, float[8] beta, float[8] bias)
          => (float[2,3,8] y, float[2,3,8] total) {{
            y, m, v, total = com.microsoft.SkipLayerNormalization<epsilon=1e-5>(x, skip, gamma, beta, bias)
        }}
    """, "SkipLayerNormalization", "ms-skip-layer-normalization", atol=1e-4, rtol=1e-3)


def test_skip_simplified_layer_normalization() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[2,3,8] skip, float[8] gamma) => (float[2,3,8] y) {{
            y = com.microsoft.SkipSimplifiedLayerNormalization<epsilon=1e-5>(x, skip, gamma)
        }}
    """, "SkipSimplifiedLayerNormalization", "ms-skip-simplified-layer-normalization", atol=1e-4, rtol=1e-3)


def test_unknown_fused_activation_is_declined() -> None:
    declines(f"""
        {HEADER}
        g (float[1,2,5,5] x, float[3,2,3,3] w) => (float[1,3,3,3] y) {{
            y = com.microsoft.FusedConv<activation="Swish">(x, w)
        }}
    """, "FusedConv", "Swish")


def test_simplified_layer_normalization() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,3,8] x, float[8] gamma) => (float[2,3,8] y) {
            y = SimplifiedLayerNormalization<epsilon=1e-5, axis=-1>(x, gamma)
        }
    """, "SimplifiedLayerNormalization", "ms-simplified-layer-normalization", atol=1e-4, rtol=1e-3)
