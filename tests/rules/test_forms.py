"""Old forms, Pad/Resize modes, elementary ops and type rules."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import declines, rewrite_and_compare


def test_clip_with_attributes() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 10]>
        g (float[2,8] x) => (float[2,8] y) { y = Clip<min=-0.5, max=2.0>(x) }
    """, "Clip", "clip-attributes")


def test_pad_wrap() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 19]>
        g (float[1,2,4,5] x) => (float[1,2,7,7] y) <int64[8] pads = {0,0,1,2,0,0,2,0}> {
            y = Pad<mode="wrap">(x, pads)
        }
    """, "Pad", "pad-wrap")


def test_pad_reflect_is_declined_with_its_mode() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 19]>
        g (float[1,2,4,5] x) => (float[1,2,6,5] y) <int64[8] pads = {0,0,1,0,0,0,1,0}> {
            y = Pad<mode="reflect">(x, pads)
        }
    """, "Pad", "'reflect'")


def test_resize_nearest_integer_scales() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[1,2,3,4] x) => (float[1,2,6,12] y) <float[4] scales = {1.0, 1.0, 2.0, 3.0}> {
            y = Resize<mode="nearest", coordinate_transformation_mode="asymmetric",
                       nearest_mode="floor">(x, , scales)
        }
    """, "Resize", "resize-nearest-integer")


def test_resize_cubic_falls_to_the_separable_form() -> None:
    decision = rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[1,2,3,4] x) => (float[1,2,6,8] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
            y = Resize<mode="cubic">(x, , scales)
        }
    """, "Resize", "resize-separable", atol=1e-4, rtol=1e-4)
    assert any("'cubic'" in why for rule, why in decision.declined if rule == "resize-nearest-integer")


@pytest.mark.parametrize(("call", "rule"), [("Reciprocal(x)", "reciprocal"), ("Sum(x, x, x)", "sum"),
                                            ("Mean(x, x)", "mean")])
def test_elementary(call: str, rule: str) -> None:
    x = np.array([[0.5, -2.0, 3.0, 100.0]], dtype=np.float32)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[1,4] x) => (float[1,4] y) {{ y = {call} }}
    """, call.split("(")[0], rule, feeds={"x": x})


def test_a_rule_on_a_scalar_input_is_proven() -> None:
    """torchvision's detectors take Reciprocal of a scalar scale; drawing edge values into a
    scalar input failed the proof ("'numpy.float64' object does not support item assignment")."""
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float x) => (float y) { y = Reciprocal(x) }
    """, "Reciprocal", "reciprocal")


def test_xor_as_and_or_not() -> None:
    a = np.array([[True, True, False, False]])
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (bool[1,4] a, bool[2,1] b) => (bool[2,4] y) { y = Xor(a, b) }
    """, "Xor", "xor", feeds={"a": a, "b": np.array([[True], [False]])})


def test_slice_bounds_clamped_to_int32() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[3,6] x) => (float[3,5] y)
          <int64[1] starts = {1}, int64[1] ends = {9223372036854775807}, int64[1] axes = {1}> {
            y = Slice(x, starts, ends, axes)
        }
    """, "Slice", "slice-bounds-int32")


def test_slice_bounds_that_fit_are_left_alone() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[3,6] x) => (float[3,4] y) <int64[1] starts = {1}, int64[1] ends = {5}, int64[1] axes = {1}> {
            y = Slice(x, starts, ends, axes)
        }
    """, "Slice", "already fit")


def test_upsample_becomes_resize() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 10]>
        g (float[1,2,3,4] x) => (float[1,2,6,8] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
            y = Upsample<mode="nearest">(x, scales)
        }
    """, "Upsample", "upsample-to-resize")


@pytest.mark.parametrize(("attributes", "scales", "out"), [
    ('<mode="linear", antialias=1>', "1, 1, 0.6, 0.6", "[1,2,3,3]"),
    ('<mode="cubic", exclude_outside=1>', "1, 1, 0.8, 2", "[1,2,4,10]"),
    ('<mode="linear", coordinate_transformation_mode="half_pixel_symmetric">', "1, 1, 0.6, 1.7", "[1,2,3,8]"),
    ('<mode="nearest", nearest_mode="ceil">', "1, 1, 0.7, 2.5", "[1,2,3,12]"),
    ('<mode="linear">', "1, 1.5, 1, 1", "[1,3,5,5]"),  # an axis that is not one of the last two
])
def test_resize_separable(attributes: str, scales: str, out: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 19]>
        g (float[1,2,5,5] x) => (float{out} y) {{
            s = Constant <value = float[4] {{{scales}}}> ()
            y = Resize {attributes} (x, , s)
        }}
    """, "Resize", "resize-separable", atol=1e-4, rtol=1e-4)


def test_resize_separable_keeps_a_dynamic_batch_at_scale_one() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[N,2,6,6] x) => (float[N,2,4,4] y) <float[4] scales = {1.0, 1.0, 0.7, 0.7}> {
            y = Resize<mode="cubic">(x, , scales)
        }
    """, "Resize", "resize-separable", atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("opset", "read"), [
    (13, "shape = Shape(x)\n lead = Slice(shape, zero, two, zero)"),  # TorchScript
    (18, "lead = Shape<start=0, end=2>(x)"),  # dynamo
])
def test_resize_separable_takes_sizes_that_read_the_inputs_own_batch_and_channels(
        opset: int, read: str) -> None:
    """F.interpolate(x, size=(7, 7), mode="bicubic") with a dynamic batch (timm's CrossViT):
    sizes = Concat(Shape(x)[0:2], [7, 7]), not a constant, its first two entries the input's
    own lengths."""
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : {opset}]>
        g (float[N,3,10,10] x) => (float[N,3,7,7] y)
          <int64[1] zero = {{0}}, int64[1] two = {{2}}, int64[2] spatial = {{7, 7}}> {{
            {read}
            sizes = Concat<axis=0>(lead, spatial)
            y = Resize<mode="cubic", coordinate_transformation_mode="half_pixel">(x, , , sizes)
        }}
    """, "Resize", "resize-separable", atol=1e-4, rtol=1e-4)


def test_resize_separable_declines_sizes_that_read_dims_onto_other_axes() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[N,3,10,10] x) => (float[3,N,7,7] y)
          <int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[2] spatial = {7, 7}> {
            shape = Shape(x)
            channels = Slice(shape, one, two, zero)
            batch = Slice(shape, zero, one, zero)
            sizes = Concat<axis=0>(channels, batch, spatial)
            y = Resize<mode="cubic">(x, , , sizes)
        }
    """, "Resize", "a resized axis is dynamic")


def test_resize_separable_declines_runtime_scales() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 19]>
        g (float[1,1,4,4] x, float[4] s) => (float[1,1,2,2] y) { y = Resize <mode="linear"> (x, , s) }
    """, "Resize", "scales and sizes are not constant")


def test_shape_start_end_as_slice() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,3,4,5] x) => (int64[2] y) { y = Shape<start=1, end=-1>(x) }
    """, "Shape", "shape-start-end")


def test_reshape_allowzero_with_a_computed_shape() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,3,4] x) => (float[2,12] y) <int64[1] minus_one = {-1}, int64[1] zero = {0}> {
            s = Shape(x)
            n = Gather<axis=0>(s, zero)
            target = Concat<axis=0>(n, minus_one)
            y = Reshape<allowzero=1>(x, target)
        }
    """, "Reshape", "reshape-allowzero")


def test_reshape_allowzero_with_a_shape_computed_by_arithmetic_on_dims() -> None:
    """wav2vec2's dynamo export: view(batch, (length // 10) - 1, ...), computed at run time."""
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,6,4] x) => (float[2,12,2] y) <int64[1] two = {2}, int64[1] minus_one = {-1}> {
            n = Shape<start=0, end=1>(x)
            length = Shape<start=1, end=2>(x)
            doubled = Mul(length, two)
            target = Concat<axis=0>(n, doubled, minus_one)
            y = Reshape<allowzero=1>(x, target)
        }
    """, "Reshape", "reshape-allowzero")


def test_reshape_allowzero_declines_a_constant_zero() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[N,3] x) => (float[0,3] y) <int64[1] zero = {0}, int64[1] three = {3}> {
            shape = Concat<axis=0>(zero, three)
            y = Reshape<allowzero=1>(x, shape)
        }
    """, "Reshape", "constant 0")


def test_split_num_outputs_as_sizes() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2,7] x) => (float[2,3] a, float[2,3] b, float[2,1] c) {
            a, b, c = Split<axis=1, num_outputs=3>(x)
        }
    """, "Split", "split-num-outputs")


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_with_a_run_time_k_bounded_by_min(largest: int) -> None:
    """torchvision's detectors: K = min(candidates, number of boxes left after the score filter)."""
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[2,7] x, int64[1] n) => (float[2,?] v, int64[2,?] i) <int64[1] candidates = {{5}}> {{
            k = Min(candidates, n)
            v, i = TopK<axis=1, largest={largest}>(x, k)
        }}
    """, "TopK", "topk-bounded", feeds={"x": np.random.default_rng(4).standard_normal((2, 7), np.float32),
                                        "n": np.array([3], np.int64)})


def test_topk_with_k_from_reduce_min_of_a_concat() -> None:
    """torchvision's Faster R-CNN RPN: K = ReduceMin(Concat(pre_nms_top_n, n))."""
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[1,9] x, int64[1] n) => (float[1,?] v, int64[1,?] i)
            <int64[1] top = {4}, int64[1] one = {1}> {
            both = Concat<axis=0>(top, n)
            smallest = ReduceMin<keepdims=0>(both)
            k = Reshape(smallest, one)
            v, i = TopK<axis=1>(x, k)
        }
    """, "TopK", "topk-bounded", feeds={"x": np.random.default_rng(5).standard_normal((1, 9), np.float32),
                                        "n": np.array([6], np.int64)})


def test_topk_bounded_on_x_of_unknown_rank() -> None:
    """Faster R-CNN's per-level RPN scores reach TopK with no known rank (axis 1)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Min", ["candidates", "n"], ["k"]),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                     helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array([4], np.int64), "candidates")])
    from deploycc.verify.runner import run_ort, serialize
    from tests.rules.helpers import load, rewritten_by

    model = load(onnx.printer.to_text(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))
    before = serialize(model)
    # no proof without a shape to draw inputs at: the whole-model verification covers such a node
    rewritten_by(model, "TopK", "topk-bounded", proof="unproven")
    feeds = {"x": np.random.default_rng(9).standard_normal((2, 7, 3), np.float32),
             "n": np.array([5], np.int64)}
    expected, actual = run_ort(before, feeds), run_ort(serialize(model), feeds)
    for name in ("v", "i"):
        np.testing.assert_array_equal(actual[name], expected[name])


@pytest.mark.parametrize(("op", "attributes", "rule"), [
    ("MaxPool", "kernel_shape=[3], strides=[2], pads=[1, 1]", "maxpool-1d-as-2d"),
    ("MaxPool", "kernel_shape=[2], dilations=[2], ceil_mode=1", "maxpool-1d-as-2d"),
    ("AveragePool", "kernel_shape=[4], strides=[4]", "averagepool-1d-as-2d"),
    ("AveragePool", "kernel_shape=[3], pads=[1, 2], count_include_pad=1", "averagepool-1d-as-2d"),
])
def test_one_dimensional_pooling_as_two_dimensional(op: str, attributes: str, rule: str) -> None:
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,3,16] x) => (float[2,3,?] y) {{ y = {op}<{attributes}>(x) }}
    """, op, rule)
