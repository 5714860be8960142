"""Mod with Python's sign rule, CumProd unrolled, Det by cofactors: each against ORT's own kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import declines, rewrite_and_compare

INF = np.inf


@pytest.mark.parametrize("dtype", ["float", "double", "float16"])
def test_python_mod_on_floats(dtype: str) -> None:
    np_dtype = {"float": np.float32, "double": np.float64, "float16": np.float16}[dtype]
    x = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, -3.0, 3.0, -1.0, 1.0, 0.0, -0.0, 2.5, -2.5], dtype=np_dtype)
    y = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, INF, INF, -INF, -INF, 3.0, -3.0, 0.5, 0.5], dtype=np_dtype)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 21]>
        g ({dtype}[14] x, {dtype}[14] y) => ({dtype}[14] z) {{ z = Mod <fmod=0> (x, y) }}
    """, "Mod", "python-mod", feeds={"x": x, "y": y}, seeds=(1,), atol=1e-3 if dtype == "float16" else 1e-5)


def test_integer_mod_is_left_to_its_own_rule() -> None:
    x, y = np.array([9, -9, 5, 0], np.int32), np.array([4, 4, -2, 3], np.int32)
    decision = rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (int32[4] x, int32[4] y) => (int32[4] z) { z = Mod (x, y) }
    """, "Mod", "integer-mod", feeds={"x": x, "y": y})
    assert ("python-mod", "integer Mod needs no rewrite") in decision.declined


@pytest.mark.parametrize("attributes", ["", "<exclusive=1>", "<reverse=1>", "<exclusive=1, reverse=1>"])
def test_cumprod_constant_axis(attributes: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 26]>
        g (double[3,5] x) => (double[3,5] y) {{
            axis = Constant <value = int64 {{-1}}> ()
            y = CumProd {attributes} (x, axis)
        }}
    """, "CumProd", "cumprod", atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_cumprod_axis_given_at_run_time(axis: int) -> None:
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 26]>
        g (int32[2,3] x, int32 axis) => (int32[2,3] y) { y = CumProd <exclusive=1> (x, axis) }
    """, "CumProd", "cumprod", feeds={"x": x, "axis": np.array(axis, dtype=np.int32)}, seeds=(1,))


def test_cumprod_declines_a_long_axis() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 26]>
        g (float[2,500] x) => (float[2,500] y) {
            axis = Constant <value = int64 {1}> ()
            y = CumProd (x, axis)
        }
    """, "CumProd", "too many nodes to unroll")


@pytest.mark.parametrize("shape", ["[2,2]", "[4,2,2]", "[3,3]", "[2,5,3,3]"])
def test_determinant(shape: str) -> None:
    out = "[]" if shape in ("[2,2]", "[3,3]") else shape.rsplit(",", 2)[0] + "]"
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float{shape} x) => (float{out if out != "[]" else ""} y) {{ y = Det (x) }}
    """, "Det", "determinant", atol=1e-4, rtol=1e-4)


def test_determinant_declines_larger_matrices() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[4,4] x) => (float y) { y = Det (x) }
    """, "Det", "only static 2x2 and 3x3")


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32"])
def test_signed_bitshift(direction: str, dtype: str) -> None:
    """Arithmetic right shifts, wrapping left shifts, and out-of-range shift amounts (opset 28)."""
    np_dtype = np.dtype(dtype)
    width = np_dtype.itemsize * 8
    low, high = np.iinfo(np_dtype).min, np.iinfo(np_dtype).max
    x = np.array([-8, -1, low, high, 64, 1, -64, 5, 0, -3, 7, -128 % high], dtype=np_dtype)
    y = np.array([1, 1, 1, 1, 1, width - 1, 1, width, width + 3, -1, 2, 3], dtype=np_dtype)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 28]>
        g ({dtype}[12] x, {dtype}[12] y) => ({dtype}[12] z) {{
            z = BitShift <direction="{direction}"> (x, y)
        }}
    """, "BitShift", "signed-bitshift", feeds={"x": x, "y": y}, seeds=(1,), atol=0, rtol=0)


def test_unsigned_bitshift_is_left_alone() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 28]>
        g (uint8[3] x, uint8[3] y) => (uint8[3] z) { z = BitShift <direction="LEFT"> (x, y) }
    """, "BitShift", "unsigned ones are plain shifts")


@pytest.mark.parametrize(("axes", "out"), [([0], "[1,3,4,5]"), ([-1], "[3,4,5,1]"), ([2], "[3,4,1,5]")])
def test_unsqueeze_with_axes_at_run_time(axes: list[int], out: str) -> None:
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[3,4,5] x, int64[{len(axes)}] axes) => (float{out} y) {{ y = Unsqueeze (x, axes) }}
    """, "Unsqueeze", "unsqueeze-runtime-axes", feeds={"x": x, "axes": np.array(axes, np.int64)}, seeds=(1,))


@pytest.mark.parametrize(("axes", "out"), [([1, 4], "[3,1,4,5,1]"), ([5, 2, 4], "[3,4,1,5,1,1]"),
                                           ([-1, 0], "[1,3,4,5,1]")])
def test_unsqueeze_with_several_axes_at_run_time(axes: list[int], out: str) -> None:
    """The proof draws distinct axes (the rule's proof_values): random ones would repeat."""
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[3,4,5] x, int64[{len(axes)}] axes) => (float{out} y) {{ y = Unsqueeze (x, axes) }}
    """, "Unsqueeze", "unsqueeze-runtime-axes", seeds=(1,),
        feeds={"x": np.arange(60, dtype=np.float32).reshape(3, 4, 5), "axes": np.array(axes, np.int64)})


@pytest.mark.parametrize(("op", "rule"), [
    ("ReduceSum", "reduce-sum-runtime-axes"), ("ReduceMean", "reduce-mean-runtime-axes"),
    ("ReduceMax", "reduce-max-runtime-axes"), ("ReduceMin", "reduce-min-runtime-axes"),
    ("ReduceProd", "reduce-prod-runtime-axes"), ("ReduceL1", "reduce-l1-runtime-axes"),
    ("ReduceL2", "reduce-l2-runtime-axes"), ("ReduceLogSum", "reduce-logsum-runtime-axes"),
    ("ReduceLogSumExp", "reduce-logsumexp-runtime-axes"),
    ("ReduceSumSquare", "reduce-sumsquare-runtime-axes"),
])
@pytest.mark.parametrize("axes", [[2, 0], [-1], [1, -1]])
def test_reduction_with_axes_at_run_time(op: str, rule: str, axes: list[int]) -> None:
    """keepdims=0 with run-time axes: the rank is known, the kept dims come out in order."""
    rank_left = 3 - len(axes)
    out = {2: "[4]", 1: "[3]"}[rank_left] if axes != [-1] else "[3,4]"
    x = np.abs(np.random.default_rng(1).standard_normal((3, 4, 5))).astype(np.float32) + 0.5
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[3,4,5] x, int64[{len(axes)}] axes) => (float{out} y) {{ y = {op} <keepdims=0> (x, axes) }}
    """, op, rule, feeds={"x": x, "axes": np.array(axes, np.int64)}, seeds=(1,), atol=1e-4, rtol=1e-4)


def test_reduction_keeping_dims_is_left_alone() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[3,4,5] x, int64[1] axes) => (float[3,4,1] y) { y = ReduceSum <keepdims=1> (x, axes) }
    """, "ReduceSum", "keepdims=1 keeps the rank static")


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod(fmod: int) -> None:
    x = np.array([[7, -7, 7, -7, 0, 13]], dtype=np.int64)
    y = np.array([[3, 3, -3, -3, 5, 4]], dtype=np.int64)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (int64[1,6] x, int64[1,6] y) => (int64[1,6] r) {{ r = Mod<fmod={fmod}>(x, y) }}
    """, "Mod", "integer-mod", feeds={"x": x, "y": y})


@pytest.mark.parametrize(("opset", "call", "out"), [
    (13, "ReduceProd <keepdims=0> (x)", "int64 y"),
    (13, "ReduceProd <axes=[0]> (x)", "int64[1] y"),
    (18, "ReduceProd <keepdims=0> (x, axes)", "int64 y"),
])
def test_reduce_prod_of_dims_unrolled(opset: int, call: str, out: str) -> None:
    """An exporter's element count: the product of selected dims (int64, which ORT's CUDA EP does
    not reduce), as Muls; dims as large as tensors have."""
    axes = "axes = Constant <value = int64[1] {0}> ()" if opset >= 18 else ""
    for x in (np.array([2, 3, 7], np.int64), np.array([2**20, 2**30, 3], np.int64)):
        rewrite_and_compare(f"""
            <ir_version: 10, opset_import: ["" : {opset}]>
            g (int64[3] x) => ({out}) {{ {axes}
                y = {call} }}
        """, "ReduceProd", "reduce-prod-unrolled", feeds={"x": x}, seeds=(1,))


def test_reduce_prod_declines_a_dynamic_length() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (int64[N] x) => (int64 y) { y = ReduceProd <keepdims=0> (x) }
    """, "ReduceProd", "not 1-D of static length")


@pytest.mark.parametrize("dtype", ["float", "int64"])
def test_equal_by_order(dtype: str) -> None:
    """NaN equals nothing, itself included; -0 equals +0; broadcasting kept."""
    np_dtype = np.float32 if dtype == "float" else np.int64
    a = np.array([[1, 2, 0, 5], [3, 3, -7, 0]], np_dtype)
    b = np.array([1, 3, 0, 5], np_dtype)
    if dtype == "float":
        a[0, 3], b[3], a[1, 3] = np.nan, np.nan, -0.0
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 19]>
        g ({dtype}[2,4] a, {dtype}[4] b) => (bool[2,4] y) {{ y = Equal (a, b) }}
    """, "Equal", "equal-by-order", feeds={"a": a, "b": b}, seeds=(1,))


def test_equal_on_strings_is_left_alone() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 19]>
        g (string[3] a, string[3] b) => (bool[3] y) { y = Equal (a, b) }
    """, "Equal", "no order")


SCALE_3X3 = "1.17, 1.47, 2.6, 2.16, 1.19, 1.87, 1.96, 1.32, 2.47"
WEIGHTS_2X2X3X3 = ("3.32, 0.23, -0.35, -0.28, -0.67, -1.06, -0.39, 0.48, -0.24, 0.96, -0.2, 0.02, "
                   "1.55, 0.55, -0.51, -0.18, 0.54, 1.94, -0.27, -0.24, 1.0, -0.89, -0.29, 0.88, "
                   "0.58, 0.09, 0.67, -2.83, 1.02, -0.96, -1.67, 0.28, 0.7, -0.44, -1.08, 0.03")


def spatial_scale_model(op: str, scale_shape: str = "3,3", scale: str = SCALE_3X3,
                        reader: str = "conv") -> str:
    """x (N x 2 x 3 x 3) scaled per position by a constant, then read by a 3 x 3 Conv (CSATv2's
    average of a 7 x 7 map over its valid taps) or by something else."""
    conv = "y = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (s, w)"
    read = conv if reader == "conv" else "y = Relu (s)"
    return f"""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[N,2,3,3] x) => (float[N,2,3,3] y) {{
            c = Constant <value = float[{scale_shape}] {{{scale}}}> ()
            w = Constant <value = float[2,2,3,3] {{{WEIGHTS_2X2X3X3}}}> ()
            s = {op} (x, c)
            {read}
        }}
    """


@pytest.mark.parametrize(("op", "rule", "shape"), [("Div", "spatial-scale-div", "3,3"),
                                                  ("Mul", "spatial-scale-mul", "1,1,3,3")])
def test_a_per_position_scale_before_a_conv_is_done_on_the_positions_flattened(op: str, rule: str,
                                                                                shape: str) -> None:
    rewrite_and_compare(spatial_scale_model(op, shape), op, rule)


def test_a_per_position_and_per_channel_scale_before_a_conv_widens_like_the_original() -> None:
    """A [2, 3, 3] scale on x whose channel count is not known: the product's shape is x's widened."""
    per_channel = ", ".join([SCALE_3X3, SCALE_3X3.replace("1.", "0.")])
    rewrite_and_compare(spatial_scale_model("Mul", "2,3,3", per_channel).replace("float[N,2,3,3] x",
                                                                               "float[N,C,3,3] x"),
                        "Mul", "spatial-scale-mul")


def test_a_per_position_scale_read_by_anything_but_a_conv_is_left_alone() -> None:
    declines(spatial_scale_model("Div", reader="relu"), "Div",
             "not a per-position constant scale read by a Conv alone")


def test_a_per_channel_scale_before_a_conv_is_left_alone() -> None:
    declines(spatial_scale_model("Mul", "2,1,1", "0.5, 2.0"), "Mul",
             "not a per-position constant scale read by a Conv alone")
