"""What the clean-up reads inside If branches and through Resize: a branch that asks for a rank
shape inference knows, the reads a folded If's dropped branch leaves behind, and the shape
arithmetic of an upsampled feature map with dynamic height and width. Each is run before and
after on ONNX Runtime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import sympy
from onnx import TensorProto, helper, numpy_helper

from deploycc.passes.shape_values import _SympyWithQuickSimplify
from tests.passes.test_tidy import _clean, _model, _same

FLOAT = TensorProto.FLOAT


def _ops_everywhere(graph: onnx.GraphProto) -> Counter:
    ops = Counter(node.op_type for node in graph.node)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops += _ops_everywhere(attribute.g)
    return ops


def _mean(name: str, source: str, axes: list[int]) -> onnx.NodeProto:
    return helper.make_node("ReduceMean", [source], [name], axes=axes, keepdims=0)


def test_a_branch_that_asks_its_own_rank_is_inlined_and_what_only_the_dropped_branch_read_goes(
        tmp_path: Path) -> None:
    """silero-vad: inside the sample-rate If, `if spect.dim() == 2` on a spectrogram of rank 3.
    The rank is known there, so the inner If folds; the Transpose only its dropped branch read
    must go with it (it was written out dead: the dropped branch still counted as its reader)."""
    inner_then = helper.make_graph([_mean("from_dead", "turned", [1, 2])], "rank_two", [],
                                   [helper.make_tensor_value_info("from_dead", FLOAT, ["N"])])
    inner_else = helper.make_graph([_mean("from_t", "t", [1, 2])], "rank_three", [],
                                   [helper.make_tensor_value_info("from_t", FLOAT, ["N"])])
    outer_then = helper.make_graph([
        helper.make_node("Unsqueeze", ["x"], ["t"], axes=[1]),  # opset 11: axes known inside
        helper.make_node("Transpose", ["t"], ["turned"], perm=[0, 2, 1]),
        helper.make_node("Shape", ["t"], ["t_shape"]),
        helper.make_node("Shape", ["t_shape"], ["t_rank1"]),
        helper.make_node("Squeeze", ["t_rank1"], ["t_rank"], axes=[0]),
        helper.make_node("Equal", ["t_rank", "two"], ["is_matrix"]),
        helper.make_node("If", ["is_matrix"], ["chosen"], then_branch=inner_then, else_branch=inner_else),
    ], "spectrogram", [], [helper.make_tensor_value_info("chosen", FLOAT, ["N"])])
    outer_else = helper.make_graph([_mean("plain", "x", [1])], "plain", [],
                                   [helper.make_tensor_value_info("plain", FLOAT, ["N"])])
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two")]
    model = _model(tmp_path, [helper.make_node("If", ["flag"], ["y"], then_branch=outer_then,
                                               else_branch=outer_else)],
                   [helper.make_tensor_value_info("x", FLOAT, ["N", 4]),
                    helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N"])], inits, opset=11)
    cleaned, _ = _clean(tmp_path, model)
    ops = _ops_everywhere(onnx.load(cleaned).graph)
    assert ops["If"] == 1 and ops["Transpose"] == 0 and ops["Shape"] == 0, ops
    first = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    second = ort.InferenceSession(str(cleaned), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        np.testing.assert_allclose(second.run(None, feeds)[0], first.run(None, feeds)[0], rtol=1e-6)


def test_a_reshape_of_an_upsampled_map_to_its_own_shape_goes_with_dynamic_height_and_width(
        tmp_path: Path) -> None:
    """A YOLO neck: Conv with stride 2, then Resize x2, then a Reshape to [N, C, 2h, 2w] computed
    from the Conv's shape. Symbolic inference must see the Resize's dims as 2h and 2w (written
    without sympy.simplify, which took seconds per Resize on YOLOv8) for the Reshape to go."""
    weight = np.random.default_rng(1).standard_normal((2, 3, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "lead"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "spatial"),
             numpy_helper.from_array(np.array([2], np.int64), "twice")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Shape", ["c"], ["c_shape"]),
             helper.make_node("Gather", ["c_shape", "lead"], ["n_c"], axis=0),
             helper.make_node("Gather", ["c_shape", "spatial"], ["h_w"], axis=0),
             helper.make_node("Mul", ["h_w", "twice"], ["h2_w2"]),
             helper.make_node("Concat", ["n_c", "h2_w2"], ["target"], axis=0),
             helper.make_node("Reshape", ["up", "target"], ["reshaped"]),
             helper.make_node("Relu", ["reshaped"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, "H", "W"])],
                   [helper.make_tensor_value_info("y", FLOAT, None)], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Reshape"] == 0 and ops["Resize"] == 1, ops
    _same(model, cleaned, [{"x": (1, 3, 9, 14)}, {"x": (2, 3, 16, 7)}])


def test_the_quick_simplify_keeps_the_value_and_writes_whole_scales_as_integers() -> None:
    h = sympy.Symbol("h", integer=True, nonnegative=True)
    conv = sympy.floor(h / 2 - sympy.Rational(1, 2)) + 1
    doubled = _SympyWithQuickSimplify.simplify(sympy.floor(conv * 2.0))
    # sympy.simplify leaves floor(2.0*floor(...)) + 2, which never equals the 2*floor(...) + 2 that
    # a Mul of the same dim gives; written with whole numbers the two are one expression.
    assert doubled == 2 * conv and not doubled.atoms(sympy.Float)
    for expression in (sympy.floor(conv * 2.0), sympy.floor(conv * 1.0), sympy.floor(conv * 0.5),
                       (conv - 1 + 2 - 1) // 1, (conv + 3) // 2, sympy.Integer(7)):
        quick = _SympyWithQuickSimplify.simplify(expression)
        for size in range(40):
            assert quick.subs(h, size) == expression.subs(h, size), (expression, size)
