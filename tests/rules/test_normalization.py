"""Normalisation rules against LayerNormalization, GroupNormalization, RMSNormalization and
InstanceNormalization as ORT (or the onnx reference) runs them."""

from __future__ import annotations

import pytest

from tests.rules.helpers import declines, rewrite_and_compare


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(axis: int) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,4,8] x, float[8] s, float[8] b) => (float[2,4,8] y) {{
            y = LayerNormalization<axis={axis}, epsilon=1e-5>(x, s, b)
        }}
    """ if axis == -1 else """
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,4,8] x, float[4,8] s) => (float[2,4,8] y) {
            y = LayerNormalization<axis=1>(x, s)
        }
    """, "LayerNormalization", "layer-normalization")


def test_layer_normalization_statistics_outputs() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[3,6] x, float[6] s, float[6] b) => (float[3,6] y, float[3,1] mean, float[3,1] inv) {
            y, mean, inv = LayerNormalization(x, s, b)
        }
    """, "LayerNormalization", "layer-normalization")


def test_layer_normalization_float16_computes_in_float32() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float16[2,16] x, float16[16] s, float16[16] b) => (float16[2,16] y) {
            y = LayerNormalization(x, s, b)
        }
    """, "LayerNormalization", "layer-normalization", atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(opset: int) -> None:
    params = "float[2] s, float[2] b" if opset == 18 else "float[4] s, float[4] b"
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : {opset}]>
        g (float[2,4,3,3] x, {params}) => (float[2,4,3,3] y) {{
            y = GroupNormalization<num_groups=2, epsilon=1e-5>(x, s, b)
        }}
    """, "GroupNormalization", "group-normalization")


def test_rms_normalization() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 23]>
        g (float[2,3,8] x, float[8] s) => (float[2,3,8] y) { y = RMSNormalization<epsilon=1e-6>(x, s) }
    """, "RMSNormalization", "rms-normalization")


def test_instance_normalization() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[2,3,4,5] x, float[3] s, float[3] b) => (float[2,3,4,5] y) {
            y = InstanceNormalization<epsilon=1e-5>(x, s, b)
        }
    """, "InstanceNormalization", "instance-normalization")


def test_instance_normalization_needs_spatial_axes() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[2,3] x, float[3] s, float[3] b) => (float[2,3] y) {
            y = InstanceNormalization(x, s, b)
        }
    """, "InstanceNormalization", "rank 2")
