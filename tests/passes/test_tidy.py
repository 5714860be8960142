"""Target-neutral clean-up (tidy, prune): one small graph per simplification, each run before and
after on ONNX Runtime at several sizes of its dynamic dims, including where it must decline."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.options import LegalizeOptions

FLOAT = TensorProto.FLOAT


def _model(tmp_path: Path, nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def _const_node(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.array(values, dtype), name)
    return helper.make_node("Constant", [], [name], value=tensor)


def _clean(tmp_path: Path, model: Path, target: str = "ort-cpu") -> tuple[Path, Counter]:
    out = tmp_path / "clean.onnx"
    report = api.legalize(model, target, out, LegalizeOptions(verify=False), force=True)
    assert report.success, report.summary
    return out, Counter(node.op_type for node in onnx.load(out).graph.node)


def _same(original: Path, cleaned: Path, shapes: list[dict[str, tuple[int, ...]]]) -> None:
    first = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    second = ort.InferenceSession(str(cleaned), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for sizes in shapes:
        feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in sizes.items()}
        for expected, actual in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_constant_nodes_become_initializers(tmp_path: Path) -> None:
    nodes = [_const_node("c", [[2.0, 3.0]], np.float32), helper.make_node("Mul", ["x", "c"], ["y"])]
    model = _model(tmp_path, nodes,
                   [helper.make_tensor_value_info("x", FLOAT, ["N", 2])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 2])])
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Mul": 1})
    _same(model, cleaned, [{"x": (1, 2)}, {"x": (5, 2)}])


def test_constant_nodes_stay_in_an_ir3_model(tmp_path: Path) -> None:
    nodes = [_const_node("c", [[2.0, 3.0]], np.float32), helper.make_node("Mul", ["x", "c"], ["y"])]
    model = _model(tmp_path, nodes,
                   [helper.make_tensor_value_info("x", FLOAT, [4, 2])],
                   [helper.make_tensor_value_info("y", FLOAT, [4, 2])], opset=8, ir_version=3)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Constant"] == 1  # an IR-3 initializer must also be a graph input
    _same(model, cleaned, [{"x": (4, 2)}])


def _shape_chain(prefix: str) -> list[onnx.NodeProto]:
    """The TorchScript pattern: Shape(x)[0] unsqueezed, once per use."""
    return [helper.make_node("Shape", ["x"], [f"{prefix}s"]),
            _const_node(f"{prefix}i", 0),
            helper.make_node("Gather", [f"{prefix}s", f"{prefix}i"], [f"{prefix}g"], axis=0),
            _const_node(f"{prefix}a", [0]),
            helper.make_node("Unsqueeze", [f"{prefix}g", f"{prefix}a"], [f"{prefix}u"])]


def test_repeated_shape_chains_are_merged(tmp_path: Path) -> None:
    nodes = _shape_chain("p") + _shape_chain("q") + [
        _const_node("minus", [-1]),
        helper.make_node("Concat", ["pu", "minus"], ["s1"], axis=0),
        helper.make_node("Concat", ["qu", "minus"], ["s2"], axis=0),
        helper.make_node("Reshape", ["x", "s1"], ["r1"]),
        helper.make_node("Reshape", ["x", "s2"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 12])])
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Shape"] == 1 and ops["Gather"] == 1 and ops["Concat"] == 1 and ops["Reshape"] == 1, ops
    _same(model, cleaned, [{"x": (1, 3, 4)}, {"x": (6, 3, 4)}])


def test_a_zero_bias_is_dropped_when_it_cannot_broadcast_the_input_larger(tmp_path: Path) -> None:
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "zeros"),
             numpy_helper.from_array(np.ones((1, 4), np.float32), "ones")]
    nodes = [helper.make_node("Add", ["x", "zeros"], ["a"]), helper.make_node("Mul", ["ones", "a"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 4])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert not ops - Counter({"Identity": 1}), ops
    _same(model, cleaned, [{"x": (1, 4)}, {"x": (3, 4)}])


def test_a_zero_bias_that_broadcasts_a_dynamic_dim_stays(tmp_path: Path) -> None:
    # x's last dim is dynamic: with M = 1 the Add broadcasts x to [N, 4], so it is not a no-op.
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "zeros")]
    model = _model(tmp_path, [helper.make_node("Add", ["x", "zeros"], ["y"])],
                   [helper.make_tensor_value_info("x", FLOAT, ["N", "M"])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 4])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Add"] == 1
    _same(model, cleaned, [{"x": (2, 1)}, {"x": (2, 4)}])


def test_a_reshape_that_copies_dynamic_dims_is_dropped_and_one_that_moves_them_stays(tmp_path: Path) -> None:
    inits = [numpy_helper.from_array(np.array([0, 0, 4], np.int64), "same"),
             numpy_helper.from_array(np.array([0, -1, 2], np.int64), "other")]
    nodes = [helper.make_node("Reshape", ["x", "same"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "other"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", "T", 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", None, 2])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Reshape"] == 1
    _same(model, cleaned, [{"x": (1, 5, 4)}, {"x": (2, 3, 4)}])


def test_transpose_pairs_that_cancel_go(tmp_path: Path) -> None:
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t"], ["u"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["u"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 5])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 3, 5])])
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Relu": 1})
    _same(model, cleaned, [{"x": (2, 3, 5)}])


def _reshape_by(source: str, data: str, index: int, out: str) -> list[onnx.NodeProto]:
    """data reshaped to [Shape(source)[index], 2, -1] (not the shape it has: no Reshape to pass by)."""
    return [helper.make_node("Shape", [source], [f"{out}_s"]),
            helper.make_node("Gather", [f"{out}_s", f"idx{index}"], [f"{out}_g"], axis=0),
            helper.make_node("Unsqueeze", [f"{out}_g", "axis0"], [f"{out}_u"]),
            helper.make_node("Concat", [f"{out}_u", "minus"], [f"{out}_shape"], axis=0),
            helper.make_node("Reshape", [data, f"{out}_shape"], [out])]


def test_shape_values_known_equal_are_merged_and_static_ones_become_constants(tmp_path: Path) -> None:
    inits = [numpy_helper.from_array(np.array(i, np.int64), f"idx{i}") for i in (0, 1)] + [
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([2, -1], np.int64), "minus")]
    # Shape(x)[0] and Shape(relu(x))[0] are both N; Shape(z)[0] is M, another dim; Shape(x)[1] is 4.
    nodes = [helper.make_node("Relu", ["x"], ["r"]), *_reshape_by("x", "x", 0, "a"),
             *_reshape_by("r", "r", 0, "b"), *_reshape_by("z", "z", 0, "c"), *_reshape_by("x", "x", 1, "d"),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 4]),
                                     helper.make_tensor_value_info("z", FLOAT, ["M", 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 2, None]),
                    helper.make_tensor_value_info("c", FLOAT, ["M", 2, None]),
                    helper.make_tensor_value_info("d", FLOAT, [4, 2, None])], inits)
    cleaned, ops = _clean(tmp_path, model)
    # a and b share one Shape chain; c keeps its own (M is not N); d's shape [4, 2, -1] is a constant.
    assert ops["Shape"] == 2 and ops["Gather"] == 2 and ops["Concat"] == 2, ops
    _same(model, cleaned, [{"x": (2, 4), "z": (3, 4)}, {"x": (6, 4), "z": (2, 4)}])


def test_shape_values_read_from_an_if_are_not_trusted(tmp_path: Path) -> None:
    """Silero's squeeze(0) on the batch: an If whose branches differ in rank. ONNX Runtime's
    symbolic inference gives the If one branch's shape; a dim read from it is not a constant."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    squeeze = helper.make_graph([helper.make_node("Squeeze", ["x", "axis0"], ["sq"])], "then", [],
                                [helper.make_tensor_value_info("sq", FLOAT, [4])])
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["kept"])], "else", [],
                             [helper.make_tensor_value_info("kept", FLOAT, ["N", 4])])
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "zero"], ["batch"], axis=0),
             helper.make_node("Equal", ["batch", "one"], ["single"]),
             helper.make_node("If", ["single"], ["y"], then_branch=squeeze, else_branch=keep),
             helper.make_node("Shape", ["y"], ["ys"]),
             helper.make_node("Gather", ["ys", "zero"], ["first"], axis=0),
             helper.make_node("Unsqueeze", ["first", "axis0"], ["first1"]),
             helper.make_node("Concat", ["first1", "minus"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["out"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("out", FLOAT, [None, None])], inits)
    cleaned, _ = _clean(tmp_path, model)
    _same(model, cleaned, [{"x": (1, 4)}, {"x": (3, 4)}])


def test_torch_pad_pads_reversed_through_a_2d_slice_stay_right(tmp_path: Path) -> None:
    """torch's F.pad exports its pads reversed pairwise: Reshape to [-1, 2], Slice with step -1,
    Transpose, Reshape back. ONNX Runtime's symbolic inference reverses that 2-D Slice as if it
    were flat (Silero VAD's STFT padding came out [0, 64, 0, 0] instead of [0, 0, 0, 64])."""
    inits = [numpy_helper.from_array(np.array([0, 3], np.int64), "front"),
             numpy_helper.from_array(np.array([0, 0], np.int64), "back"),
             numpy_helper.from_array(np.array([-1, 2], np.int64), "pairs"),
             numpy_helper.from_array(np.array([-1], np.int64), "start"),
             numpy_helper.from_array(np.array([-(2**62)], np.int64), "end"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([-1], np.int64), "step"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    nodes = [helper.make_node("Concat", ["front", "back"], ["p4"], axis=0),
             helper.make_node("Reshape", ["p4", "pairs"], ["p22"]),
             helper.make_node("Slice", ["p22", "start", "end", "axis0", "step"], ["rev"]),
             helper.make_node("Transpose", ["rev"], ["t"], perm=[1, 0]),
             helper.make_node("Reshape", ["t", "flat"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["padded"]),
             helper.make_node("Shape", ["padded"], ["s"]),
             helper.make_node("Reshape", ["padded", "s"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 5])],
                   [helper.make_tensor_value_info("y", FLOAT, [None, None])], inits)
    cleaned, _ = _clean(tmp_path, model)
    _same(model, cleaned, [{"x": (1, 5)}, {"x": (2, 5)}])


def test_a_flatten_of_a_matrix_goes_and_one_of_a_tensor_stays(tmp_path: Path) -> None:
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Flatten", ["z"], ["g"], axis=1), helper.make_node("Relu", ["g"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 6]),
                                     helper.make_tensor_value_info("z", FLOAT, ["N", 2, 3])],
                   [helper.make_tensor_value_info("r", FLOAT, ["N", 6]),
                    helper.make_tensor_value_info("y", FLOAT, ["N", 6])])
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Flatten"] == 1
    _same(model, cleaned, [{"x": (2, 6), "z": (2, 2, 3)}])


def test_a_per_channel_add_after_conv_joins_its_bias_and_a_wider_one_stays(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "per_channel"),
             numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2"),
             numpy_helper.from_array(rng.standard_normal((1, 4, 6, 6)).astype(np.float32), "per_pixel")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),  # PaddlePaddle's form
             helper.make_node("Add", ["c", "per_channel"], ["y"]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["d", "per_pixel"], ["z"])]  # not per channel: stays
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 6, 6])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 4, 6, 6]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", 4, 6, 6])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Conv": 2, "Add": 1}), ops
    _same(model, cleaned, [{"x": (2, 3, 6, 6)}])


def test_a_reshape_made_static_at_opset_11_carries_no_allowzero(tmp_path: Path) -> None:
    """ShuffleNet's channel shuffle at opset 11: the Reshape whose target tidy makes constant must
    not carry allowzero, which Reshape has only from opset 14 (ONNX Runtime refuses the model)."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([2, 2, 6], np.int64), "rest")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
             helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Relu", ["t"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 4, 6])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 2, 2, 6])], inits, opset=11)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Shape"] == 0, ops  # the target became the constant [-1, 2, 2, 6]
    onnx.checker.check_model(onnx.load(cleaned), full_check=True)
    assert not [a for n in onnx.load(cleaned).graph.node for a in n.attribute if a.name == "allowzero"]
    _same(model, cleaned, [{"x": (1, 4, 6)}, {"x": (3, 4, 6)}])


def test_a_slice_of_a_slice_on_another_axis_is_one_slice_and_on_the_same_axis_stays_two(
        tmp_path: Path) -> None:
    def bounds(prefix: str, start: int, end: int, axis: int, step: int) -> list[onnx.TensorProto]:
        return [numpy_helper.from_array(np.array([v], np.int64), f"{prefix}_{k}")
                for k, v in (("s", start), ("e", end), ("a", axis), ("t", step))]

    inits = bounds("p", 0, 5, 1, 1) + bounds("q", 1, 2**62, 2, 2) + bounds("r", 1, 4, 1, 1)
    names = [[f"{p}_{k}" for k in "seat"] for p in "pqr"]
    nodes = [helper.make_node("Slice", ["x", *names[0]], ["a"]),
             helper.make_node("Slice", ["a", *names[1]], ["y"]),   # other axis: one Slice
             helper.make_node("Slice", ["a", *names[2]], ["z"])]   # same axis: stays
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 8, 9])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 5, 4]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", 3, 9])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Slice"] == 3, ops  # `a` feeds both, so the inner Slice stays for z
    _same(model, cleaned, [{"x": (2, 8, 9)}])
    nodes = nodes[:2]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 8, 9])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 5, 4])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Slice"] == 1, ops
    _same(model, cleaned, [{"x": (2, 8, 9)}])


def test_a_transpose_that_moves_only_unit_dims_into_a_reshape_goes(tmp_path: Path) -> None:
    """ConvNeXt's head: [N, 1, 1, C] permuted back to [N, C, 1, 1], then flattened. Data order
    is the same; a permute of real dims before a reshape is not, and stays."""
    inits = [numpy_helper.from_array(np.array([-1, 6], np.int64), "flat")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Reshape", ["t", "flat"], ["y"]),
             helper.make_node("Transpose", ["z"], ["u"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["u", "flat"], ["w"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 1, 1, 6]),
                                     helper.make_tensor_value_info("z", FLOAT, ["N", 2, 3])],
                   [helper.make_tensor_value_info("y", FLOAT, [None, 6]),
                    helper.make_tensor_value_info("w", FLOAT, [None, 6])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Reshape": 2, "Transpose": 1}), ops
    _same(model, cleaned, [{"x": (3, 1, 1, 6), "z": (3, 2, 3)}])



def _init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def test_conv_mul_add_affine_joins_the_conv_and_a_scale_per_pixel_stays(tmp_path: Path) -> None:
    """PP-LCNet's learnable affine block: Conv -> Mul(s) -> Add(b), s and b one value (or one per
    channel), the Mul's constant first; a Mul per pixel is not a channel scale and stays."""
    rng = np.random.default_rng(1)
    inits = [_init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             _init("b", rng.standard_normal(4).astype(np.float32)),
             _init("s", np.array([1.5], np.float32)), _init("t", np.array([-0.25], np.float32)),
             _init("per_channel", rng.standard_normal((4, 1, 1)).astype(np.float32)),
             _init("per_pixel", rng.standard_normal((1, 1, 6, 6)).astype(np.float32)),
             _init("w2", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["s", "c"], ["m"]),
             helper.make_node("Add", ["m", "t"], ["y"]),
             helper.make_node("Conv", ["x", "w"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["d", "per_channel"], ["z"]),
             helper.make_node("Conv", ["x", "w2"], ["e"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["e", "per_pixel"], ["v"])]
    shape = ["N", 4, 6, 6]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 6, 6])],
                   [helper.make_tensor_value_info(name, FLOAT, shape) for name in ("y", "z", "v")], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Conv": 3, "Mul": 1}), ops
    _same(model, cleaned, [{"x": (2, 3, 6, 6)}])


def _hard_swish(x: str, out: str, *, divide_last: bool = True, three: float = 3.0) -> list:
    nodes = [helper.make_node("Add", [x, f"{out}_three"], [f"{out}_a"]),
             helper.make_node("Clip", [f"{out}_a", "zero", "six"], [f"{out}_c"])]
    if divide_last:
        nodes += [helper.make_node("Mul", [x, f"{out}_c"], [f"{out}_m"]),
                  helper.make_node("Div", [f"{out}_m", "six"], [out])]
    else:
        nodes += [helper.make_node("Div", [f"{out}_c", "six"], [f"{out}_d"]),
                  helper.make_node("Mul", [f"{out}_d", x], [out])]
    return [_const_node(f"{out}_three", three, np.float32), *nodes]


def test_hard_swish_written_out_stays_below_opset_14(tmp_path: Path) -> None:
    """No HardSwish before 14, and x * HardSigmoid(x) would run 1.8x slower on OpenVINO."""
    model = _model(tmp_path, _hard_swish("x", "y"), [helper.make_tensor_value_info("x", FLOAT, ["N", 8])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 8])],
                   [_init("zero", np.float32(0)), _init("six", np.float32(6))], opset=13)
    _, ops = _clean(tmp_path, model, "openvino-cpu")
    assert ops == Counter({"Add": 1, "Clip": 1, "Mul": 1, "Div": 1}), ops


def test_hard_swish_written_out_becomes_hard_sigmoid_times_x_for_onnx_runtime(tmp_path: Path) -> None:
    """ORT has no HardSwish kernel and runs it as HardSigmoid and Mul: the written-out chain
    becomes those two at any opset from 11, both orders of the division, same values at both knees
    and between; the chain adding 2.5 is not HardSwish and stays."""
    nodes = [*_hard_swish("x", "y"), *_hard_swish("u", "z", divide_last=False),
             *_hard_swish("w", "v", three=2.5)]
    for opset in (13, 17):
        inputs = [helper.make_tensor_value_info(name, FLOAT, ["N", 8]) for name in "xuw"]
        model = _model(tmp_path, nodes, inputs,
                       [helper.make_tensor_value_info(name, FLOAT, ["N", 8]) for name in ("y", "z", "v")],
                       [_init("zero", np.float32(0)), _init("six", np.float32(6))], opset=opset)
        cleaned, ops = _clean(tmp_path, model, "ort-cpu")
        assert ops == Counter({"HardSigmoid": 2, "Mul": 3, "Add": 1, "Clip": 1, "Div": 1}), (opset, ops)
        first, second = ort.InferenceSession(str(model)), ort.InferenceSession(str(cleaned))
        x = {name: np.linspace(-8, 8, 5 * 8, dtype=np.float32).reshape(5, 8) for name in "xuw"}
        for expected, actual in zip(first.run(None, x), second.run(None, x), strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_hard_swish_written_out_becomes_hard_swish_from_opset_14_and_a_shifted_one_stays(
        tmp_path: Path) -> None:
    """Both orders of the division; the same chain adding 2.5 is not HardSwish."""
    nodes = [*_hard_swish("x", "y"), *_hard_swish("u", "z", divide_last=False),
             *_hard_swish("w", "v", three=2.5)]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info(name, FLOAT, ["N", 8]) for name in "xuw"],
                   [helper.make_tensor_value_info(name, FLOAT, ["N", 8]) for name in ("y", "z", "v")],
                   [_init("zero", np.float32(0)), _init("six", np.float32(6))], opset=14)
    cleaned, ops = _clean(tmp_path, model, "openvino-cpu")
    assert ops == Counter({"HardSwish": 2, "Add": 1, "Clip": 1, "Mul": 1, "Div": 1}), ops
    first, second = ort.InferenceSession(str(model)), ort.InferenceSession(str(cleaned))
    x = {name: np.linspace(-8, 8, 5 * 8, dtype=np.float32).reshape(5, 8) for name in "xuw"}  # both knees
    for expected, actual in zip(first.run(None, x), second.run(None, x), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_a_reshape_with_one_computed_dim_gets_a_constant_shape_and_two_computed_dims_stay(
        tmp_path: Path) -> None:
    """Reshape(x, [0, d, 4]) with d = Shape(h)[1] read at run time: [0, -1, 4]; with a second
    computed entry there is no single unknown and the shape stays computed."""
    nodes = [helper.make_node("Shape", ["h"], ["hs"]),
             helper.make_node("Slice", ["hs", "one", "two"], ["d"]),
             helper.make_node("Concat", ["zero_dim", "d", "four"], ["shape1"], axis=0),
             helper.make_node("Reshape", ["x", "shape1"], ["y"]),
             helper.make_node("Slice", ["hs", "zero_dim", "one"], ["n"]),
             helper.make_node("Concat", ["n", "d", "four"], ["shape2"], axis=0),
             helper.make_node("Reshape", ["x", "shape2"], ["z"])]
    inits = [_init(name, np.array([v], np.int64)) for name, v in
             (("zero_dim", 0), ("one", 1), ("two", 2), ("four", 4))]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", "M"]),
                                     helper.make_tensor_value_info("h", FLOAT, ["N", "K"])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", "K", 4]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", "K", 4])], inits)
    cleaned, ops = _clean(tmp_path, model)
    reshapes = [n for n in onnx.load(cleaned).graph.node if n.op_type == "Reshape"]
    initializers = {i.name: numpy_helper.to_array(i) for i in onnx.load(cleaned).graph.initializer}
    constant = [list(initializers[n.input[1]]) for n in reshapes if n.input[1] in initializers]
    assert constant == [[0, -1, 4]], ops
    assert ops["Concat"] == 1, ops
    _same(model, cleaned, [{"x": (2, 12), "h": (2, 3)}, {"x": (3, 8), "h": (3, 2)}])


def test_a_split_of_a_constant_folds_and_what_reads_it_too(tmp_path: Path) -> None:
    """onnxscript's folder skips nodes with several outputs; RAFT splits its coordinate grid so."""
    grid = np.arange(12, dtype=np.float32).reshape(2, 6)
    nodes = [helper.make_node("Split", ["grid", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Mul", ["a", "two"], ["a2"]),
             helper.make_node("Concat", ["a2", "b"], ["g"], axis=1),
             helper.make_node("Add", ["x", "g"], ["y"])]
    inits = [_init("grid", grid), _init("sizes", np.array([2, 4], np.int64)), _init("two", np.float32(2))]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 2, 6])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 2, 6])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Add": 1}), ops
    _same(model, cleaned, [{"x": (3, 2, 6)}])


def test_a_gather_elements_of_constants_with_more_than_32_rows_folds(tmp_path: Path) -> None:
    """Funnel's relative-position table: GatherElements(64 x 8 constant, 40 x 8 constant indices,
    axis 0, some negative) then an Einsum with a weight. onnx's reference GatherElements fails past
    32 rows (numpy.choose), so onnxscript's folder left it, and OpenVINO got the Einsum after it wrong."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((64, 8)).astype(np.float32)
    where = rng.integers(-64, 64, (40, 8)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["table", "where"], ["picked"], axis=0),
             helper.make_node("Einsum", ["picked", "kernel"], ["positions"], equation="td,dh->th"),
             helper.make_node("Einsum", ["x", "positions"], ["y"], equation="bth,th->bt")]
    inits = [_init("table", table), _init("where", where),
             _init("kernel", rng.standard_normal((8, 4)).astype(np.float32))]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 40, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 40])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Einsum": 1}), ops
    _same(model, cleaned, [{"x": (2, 40, 4)}])


def test_an_expand_of_a_constant_with_a_stale_symbolic_annotation_folds(tmp_path: Path) -> None:
    """Swin's window mask: the size check reads the constant's own dims, not an annotation that
    shape inference left symbolic on it."""
    nodes = [helper.make_node("Expand", ["column", "target"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["y"])]
    inits = [_init("column", np.arange(4, dtype=np.float32).reshape(4, 1)),
             _init("target", np.array([4, 4], np.int64))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, ["N", 4, 4])],
                              [helper.make_tensor_value_info("y", FLOAT, ["N", 4, 4])], inits,
                              value_info=[helper.make_tensor_value_info("column", FLOAT, ["unk", 1])])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    cleaned, ops = _clean(tmp_path, path)
    assert ops == Counter({"Add": 1}), ops
    _same(path, cleaned, [{"x": (2, 4, 4)}])


def test_a_reshape_to_the_symbolic_shape_its_input_has_goes_and_one_that_regroups_stays(
        tmp_path: Path) -> None:
    """The attention's view(batch, -1, seq, head) of what is already [batch, heads, seq, head]:
    the dims read from other tensors are the same symbols. Regrouping the heads is a real Reshape."""
    shape_of = [helper.make_node("Shape", ["ids"], ["ids_shape"]),
                helper.make_node("Gather", ["ids_shape", "i0"], ["batch"], axis=0),
                helper.make_node("Gather", ["ids_shape", "i1"], ["seq"], axis=0),
                helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
                helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"])]
    nodes = [*shape_of,
             helper.make_node("Concat", ["batch1", "minus", "seq1", "head"], ["same"], axis=0),
             helper.make_node("Reshape", ["x", "same"], ["kept"]),
             helper.make_node("Relu", ["kept"], ["y"]),
             helper.make_node("Concat", ["batch1", "seq1", "minus"], ["merged"], axis=0),
             helper.make_node("Reshape", ["x", "merged"], ["z"])]
    inits = [_init("i0", np.int64(0)), _init("i1", np.int64(1)), _init("axis0", np.array([0], np.int64)),
             _init("minus", np.array([-1], np.int64)), _init("head", np.array([8], np.int64))]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"]),
                                     helper.make_tensor_value_info("x", FLOAT, ["B", 2, "S", 8])],
                   [helper.make_tensor_value_info("y", FLOAT, ["B", 2, "S", 8]),
                    helper.make_tensor_value_info("z", FLOAT, ["B", "S", None])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Reshape"] == 1, ops
    first, second = (ort.InferenceSession(str(p)) for p in (model, cleaned))
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 3), (2, 5)):
        feeds = {"ids": np.zeros((batch, seq), np.int64),
                 "x": rng.standard_normal((batch, 2, seq, 8)).astype(np.float32)}
        for expected, actual in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
            np.testing.assert_array_equal(actual, expected)


def test_an_equal_on_a_shape_known_in_full_becomes_a_constant(tmp_path: Path) -> None:
    """expand(batch, -1, seq) of a mask: Equal([batch, -1, seq], -1) is [False, True, False]
    whatever the batch, since a dim is never negative."""
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "i0"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axis0"], ["b1"]),
             helper.make_node("Gather", ["xs", "i1"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["s", "axis0"], ["s1"]),
             helper.make_node("Concat", ["b1", "minus", "s1"], ["wanted"], axis=0),
             helper.make_node("Equal", ["wanted", "minus3"], ["is_minus"]),
             helper.make_node("Where", ["is_minus", "ones", "wanted"], ["target"]),
             helper.make_node("Expand", ["m", "target"], ["y"])]
    inits = [_init("i0", np.int64(0)), _init("i1", np.int64(1)), _init("axis0", np.array([0], np.int64)),
             _init("minus", np.array([-1], np.int64)), _init("minus3", np.array([-1, -1, -1], np.int64)),
             _init("ones", np.array([1, 1, 1], np.int64))]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["B", "S"]),
                                     helper.make_tensor_value_info("m", FLOAT, ["B", 1, "S"])],
                   [helper.make_tensor_value_info("y", FLOAT, ["B", 1, "S"])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert "Equal" not in ops, ops
    first, second = (ort.InferenceSession(str(p)) for p in (model, cleaned))
    for batch, seq in ((1, 3), (4, 2)):
        feeds = {"x": np.zeros((batch, seq), np.float32),
                 "m": np.arange(batch * seq, dtype=np.float32).reshape(batch, 1, seq)}
        np.testing.assert_array_equal(second.run(None, feeds)[0], first.run(None, feeds)[0])


def test_a_reshape_to_a_graph_output_keeps_its_computed_shape_when_the_declared_one_is_wrong(
        tmp_path: Path) -> None:
    """ddddocr's recognizer head: the output is declared [1, seqlen] (rank 2) but is computed as
    Reshape(Gemm(...), [T, 1, -1]) from the input's own dims (rank 3). Taking the declaration as
    the output's shape made it [1, T * 8210] under --no-verify."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const_node("i0", 0), _const_node("i1", 1), _const_node("axes", [0]), _const_node("m1", [-1]),
             helper.make_node("Gather", ["s", "i0"], ["t"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["t", "axes"], ["tu"]),
             helper.make_node("Unsqueeze", ["b", "axes"], ["bu"]),
             _const_node("flat", [-1, 4]),
             helper.make_node("Reshape", ["x", "flat"], ["rows"]),
             helper.make_node("Gemm", ["rows", "w", "bias"], ["logits"], transB=1),
             helper.make_node("Concat", ["tu", "bu", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["logits", "shape"], ["y"])]
    rng = np.random.default_rng(0)
    model = _model(tmp_path, nodes,
                   [helper.make_tensor_value_info("x", FLOAT, ["T", 1, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, [1, "seqlen"])],
                   inits=[_init("w", rng.standard_normal((6, 4)).astype(np.float32)),
                          _init("bias", rng.standard_normal(6).astype(np.float32))], opset=13)
    cleaned, _ = _clean(tmp_path, model)
    _same(model, cleaned, [{"x": (5, 1, 4)}, {"x": (1, 1, 4)}])
    first = ort.InferenceSession(str(cleaned), providers=["CPUExecutionProvider"])
    assert first.run(None, {"x": np.zeros((5, 1, 4), np.float32)})[0].shape == (5, 1, 6)


def test_a_concat_read_only_by_concats_on_its_axis_is_spliced_and_one_read_by_another_op_stays(
        tmp_path: Path) -> None:
    nodes = [helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
             helper.make_node("Concat", ["x", "ab", "c"], ["y"], axis=-1),  # the same axis, negative
             helper.make_node("Concat", ["ab", "ab"], ["v"], axis=1),  # a second reader, twice
             helper.make_node("Concat", ["a", "c"], ["ac"], axis=1),
             helper.make_node("Concat", ["ac", "x"], ["z"], axis=1),
             helper.make_node("Relu", ["ac"], ["r"]),  # ac also read by a Relu: stays
             helper.make_node("Concat", ["b", "c"], ["bc"], axis=0),
             helper.make_node("Concat", ["bc", "bc"], ["w"], axis=1)]  # another axis: stays
    value = [helper.make_tensor_value_info(n, FLOAT, [2, 3]) for n in ("x", "a", "b", "c")]
    model = _model(tmp_path, nodes, value,
                   [helper.make_tensor_value_info("y", FLOAT, [2, 12]),
                    helper.make_tensor_value_info("v", FLOAT, [2, 12]),
                    helper.make_tensor_value_info("z", FLOAT, [2, 9]),
                    helper.make_tensor_value_info("r", FLOAT, [2, 6]),
                    helper.make_tensor_value_info("w", FLOAT, [4, 6])])
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Concat"] == 6
    graph = onnx.load(cleaned).graph
    assert [list(n.input) for n in graph.node if n.output[0] in ("y", "v")] == [
        ["x", "a", "b", "c"], ["a", "b", "a", "b"]]
    _same(model, cleaned, [{n: (2, 3) for n in ("x", "a", "b", "c")}])


def _projections(count: int, width: int = 8) -> tuple[list, list]:
    rng = np.random.default_rng(1)
    nodes, inits = [], []
    for index in range(count):
        inits.append(_init(f"w{index}", rng.standard_normal((width, 4 + index)).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", ["x", f"w{index}"], [f"p{index}"]))
        nodes.append(helper.make_node("Relu", [f"p{index}"], [f"y{index}"]))
    return nodes, inits


def test_three_matmuls_of_one_input_become_one_matmul_and_a_split_at_opsets_11_and_17(tmp_path: Path) -> None:
    for opset in (11, 17):
        nodes, inits = _projections(3)
        outputs = [helper.make_tensor_value_info(f"y{i}", FLOAT, ["N", "S", 4 + i]) for i in range(3)]
        model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", "S", 8])],
                       outputs, inits=inits, opset=opset)
        cleaned, ops = _clean(tmp_path, model)
        assert ops["MatMul"] == 1 and ops["Split"] == 1, ops
        assert len(onnx.load(cleaned).graph.initializer) == 1 + (opset >= 13)
        first = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        second = ort.InferenceSession(str(cleaned), providers=["CPUExecutionProvider"])
        feeds = {"x": np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)}
        for expected, actual in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)  # each column its own weights


def test_projections_stay_apart_where_the_engine_runs_them_merged_slower(tmp_path: Path) -> None:
    """OpenVINO's CPU plugin ran Q, K and V merged into one MatMul and a Split 1-6% slower than as
    exported (its target says `merged_projections_pay = false`); ONNX Runtime's target merges them."""
    nodes, inits = _projections(3)
    outputs = [helper.make_tensor_value_info(f"y{i}", FLOAT, ["N", 4 + i]) for i in range(3)]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 8])], outputs,
                   inits=inits)
    assert _clean(tmp_path, model, "openvino-cpu")[1]["MatMul"] == 3
    assert _clean(tmp_path, model, "ort-cpu")[1]["MatMul"] == 1


def test_two_matmuls_of_one_input_and_a_weight_read_twice_stay(tmp_path: Path) -> None:
    nodes, inits = _projections(2)
    outputs = [helper.make_tensor_value_info(f"y{i}", FLOAT, ["N", 4 + i]) for i in range(2)]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 8])], outputs,
                   inits=inits)
    assert Counter(_clean(tmp_path, model)[1])["MatMul"] == 2  # two would be a MatMul and a Split: no fewer
    nodes, inits = _projections(3)
    nodes.append(helper.make_node("MatMul", ["z", "w0"], ["q"]))  # w0 shared: merging would copy it
    outputs = [helper.make_tensor_value_info(f"y{i}", FLOAT, ["N", 4 + i]) for i in range(3)]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 8]),
                                     helper.make_tensor_value_info("z", FLOAT, ["N", 8])],
                   [*outputs, helper.make_tensor_value_info("q", FLOAT, ["N", 4])], inits=inits)
    assert Counter(_clean(tmp_path, model)[1])["MatMul"] == 4


def test_a_slice_read_by_two_slices_on_other_axes_becomes_two_slices_of_its_input(tmp_path: Path) -> None:
    """YOLOX's Focus: x[..., ::2, :] and x[..., 1::2, :], each read by [..., ::2] and [..., 1::2]:
    six Slices become four, each of x; with negative axes, as torch writes them."""
    inits, nodes = [], []
    for row in (0, 1):
        inits += [_init(f"r{row}_{k}", np.array([v], np.int64)) for k, v in (("s", row), ("e", 2**62),
                                                                             ("a", -2), ("t", 2))]
        nodes.append(helper.make_node("Slice", ["x", *(f"r{row}_{k}" for k in "seat")], [f"rows{row}"]))
        for col in (0, 1):
            prefix = f"c{row}{col}"
            inits += [_init(f"{prefix}_{k}", np.array([v], np.int64))
                      for k, v in (("s", col), ("e", 2**62), ("a", 3), ("t", 2))]
            nodes.append(helper.make_node("Slice", [f"rows{row}", *(f"{prefix}_{k}" for k in "seat")],
                                          [f"y{row}{col}"]))
    nodes.append(helper.make_node("Concat", ["y00", "y10", "y01", "y11"], ["y"], axis=1))
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, "H", "W"])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 12, "h", "w"])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops["Slice"] == 4, ops
    assert all(n.input[0] == "x" for n in onnx.load(cleaned).graph.node if n.op_type == "Slice")
    _same(model, cleaned, [{"x": (1, 3, 8, 6)}, {"x": (2, 3, 6, 10)}])


def test_a_scalar_mul_before_a_conv_joins_its_weights_and_a_per_pixel_one_stays(tmp_path: Path) -> None:
    """Gelu's trailing * 0.5 before the next Conv (PP-OCRv6's detector): W' = W * 0.5, with zero
    padding, which scales to zero; a scale that varies per pixel cannot join the weights."""
    rng = np.random.default_rng(3)
    inits = [_init("half", np.array(0.5, np.float32)),
             _init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             _init("b", rng.standard_normal(4).astype(np.float32)),
             _init("pixel", rng.standard_normal((1, 1, 6, 6)).astype(np.float32))]
    nodes = [helper.make_node("Mul", ["half", "x"], ["xs"]),
             helper.make_node("Conv", ["xs", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["x", "pixel"], ["xp"]),
             helper.make_node("Conv", ["xp", "w"], ["z"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 6, 6])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 4, 6, 6]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", 4, 4, 4])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Conv": 2, "Mul": 1}), ops
    _same(model, cleaned, [{"x": (2, 3, 6, 6)}])


def test_an_add_before_an_unpadded_conv_joins_its_bias_and_a_padded_one_stays(tmp_path: Path) -> None:
    """PP-LCNet's learnable affine block s * x + b before a pointwise Conv: the scale joins the
    weights and the shift the bias (B' = B + sum of W * b over each window), one value or one per
    input channel, group 2 included; before a padded Conv the border windows read 0, not b, so
    that Add stays."""
    rng = np.random.default_rng(5)
    inits = [_init("s", np.array([0.75], np.float32)), _init("t", np.array([-0.5], np.float32)),
             _init("w", rng.standard_normal((4, 6, 1, 1)).astype(np.float32)),
             _init("b", rng.standard_normal(4).astype(np.float32)),
             _init("per_input", rng.standard_normal((1, 6, 1, 1)).astype(np.float32)),
             _init("grouped", rng.standard_normal((4, 3, 2, 2)).astype(np.float32)),
             _init("padded", rng.standard_normal((4, 6, 3, 3)).astype(np.float32))]
    nodes = [helper.make_node("Mul", ["s", "x"], ["xs"]),
             helper.make_node("Add", ["xs", "t"], ["xt"]),
             helper.make_node("Conv", ["xt", "w", "b"], ["y"]),
             helper.make_node("Add", ["per_input", "x"], ["xc"]),
             helper.make_node("Conv", ["xc", "grouped"], ["z"], group=2),
             helper.make_node("Add", ["x", "t"], ["xp"]),
             helper.make_node("Conv", ["xp", "padded"], ["v"], pads=[1, 1, 1, 1])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 6, 6, 6])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 4, 6, 6]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", 4, 5, 5]),
                    helper.make_tensor_value_info("v", FLOAT, ["N", 4, 6, 6])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"Conv": 3, "Add": 1}), ops
    first, second = ort.InferenceSession(str(model)), ort.InferenceSession(str(cleaned))
    feeds = {"x": np.random.default_rng(6).standard_normal((2, 6, 6, 6)).astype(np.float32)}
    for expected, actual in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_an_add_per_output_channel_after_a_conv_transpose_joins_its_bias(tmp_path: Path) -> None:
    """ConvTranspose's weights are [C_in, C_out / group, ...]: the bias has C_out values (group 2
    here, so C_out is twice the weights' second dim); an Add of another width stays."""
    rng = np.random.default_rng(4)
    inits = [_init("w", rng.standard_normal((4, 3, 2, 2)).astype(np.float32)),
             _init("c", rng.standard_normal((1, 6, 1, 1)).astype(np.float32)),
             _init("w2", rng.standard_normal((4, 3, 2, 2)).astype(np.float32)),
             _init("wide", rng.standard_normal((1, 6, 1, 8)).astype(np.float32))]
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["d"], group=2, strides=[2, 2]),
             helper.make_node("Add", ["d", "c"], ["y"]),
             helper.make_node("ConvTranspose", ["x", "w2"], ["e"], group=2, strides=[2, 2]),
             helper.make_node("Add", ["e", "wide"], ["z"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 4, 4, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["N", 6, 8, 8]),
                    helper.make_tensor_value_info("z", FLOAT, ["N", 6, 8, 8])], inits)
    cleaned, ops = _clean(tmp_path, model)
    assert ops == Counter({"ConvTranspose": 2, "Add": 1}), ops
    _same(model, cleaned, [{"x": (2, 4, 4, 4)}])


def test_a_recurrent_ops_all_zero_initial_state_is_left_out_and_a_given_or_nonzero_one_stays(
        tmp_path: Path) -> None:
    """torch's GRU(x, zeros(...)): ConstantOfShape from the batch, sliced per layer; the spec
    assumes zeros when initial_h is left out. A state of ones, or one the caller gives, stays."""
    rng = np.random.default_rng(5)
    hidden = 4
    inits = [_init(name, rng.standard_normal(shape).astype(np.float32)) for name, shape in
             (("w", (1, 3 * hidden, 3)), ("r", (1, 3 * hidden, hidden)), ("b", (1, 6 * hidden)))]
    inits += [_init("layers", np.array([2], np.int64)), _init("width", np.array([hidden], np.int64)),
              _init("one", np.array([1], np.int64)), _init("zero", np.array([0], np.int64)),
              _init("i1", np.array(1, np.int64)), _init("a0", np.array([0], np.int64))]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i1"], ["batch"], axis=0),
             helper.make_node("Unsqueeze", ["batch", "a0"], ["batch1"]),
             helper.make_node("Concat", ["layers", "batch1", "width"], ["state_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32), "v")),
             helper.make_node("Slice", ["zeros", "zero", "one", "zero"], ["h0"]),
             helper.make_node("GRU", ["x", "w", "r", "b", "", "h0"], ["y", "hy"], hidden_size=hidden),
             helper.make_node("ConstantOfShape", ["state_shape"], ["ones"],
                              value=numpy_helper.from_array(np.ones(1, np.float32), "v")),
             helper.make_node("Slice", ["ones", "zero", "one", "zero"], ["h1"]),
             helper.make_node("GRU", ["x", "w", "r", "b", "", "h1"], ["y1", "hy1"], hidden_size=hidden),
             helper.make_node("GRU", ["x", "w", "r", "b", "", "given"], ["y2", "hy2"], hidden_size=hidden)]
    outputs = [helper.make_tensor_value_info(n, FLOAT, ["T", 1, "N", hidden]) for n in ("y", "y1", "y2")]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["T", "N", 3]),
                                     helper.make_tensor_value_info("given", FLOAT, [1, "N", hidden])],
                   outputs, inits)
    cleaned, ops = _clean(tmp_path, model)
    grus = [n for n in onnx.load(cleaned).graph.node if n.op_type == "GRU"]
    assert [len(n.input) > 5 and bool(n.input[5]) for n in grus] == [False, True, True]
    assert ops["ConstantOfShape"] == 1  # the zeros' chain is gone, the ones' stays
    first = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    second = ort.InferenceSession(str(cleaned), providers=["CPUExecutionProvider"])
    feeds = {"x": rng.standard_normal((5, 3, 3)).astype(np.float32),
             "given": rng.standard_normal((1, 3, hidden)).astype(np.float32)}
    for expected, actual in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_adjacent_dims_of_one_shape_are_read_as_one_slice_and_dims_out_of_order_stay(tmp_path: Path) -> None:
    """RAFT's TorchScript export rebuilds [-1, h, w, c] from Shape(x)[2] and Shape(x)[3], each
    gathered and unsqueezed: one Slice of the shape reads both. [w, h] (out of order) stays."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Shape", ["x2"], ["s2"])]
    for dim in (2, 3):
        nodes += [_const_node(f"i{dim}", dim), _const_node(f"a{dim}", [0]),
                  helper.make_node("Gather", ["s", f"i{dim}"], [f"g{dim}"], axis=0),
                  helper.make_node("Unsqueeze", [f"g{dim}", f"a{dim}"], [f"u{dim}"])]
        nodes += [helper.make_node("Gather", ["s2", f"i{dim}"], [f"h{dim}"], axis=0),
                  helper.make_node("Unsqueeze", [f"h{dim}", f"a{dim}"], [f"v{dim}"])]
    nodes += [_const_node("minus", [-1]), _const_node("c", [2]),
              helper.make_node("Concat", ["minus", "u2", "u3", "c"], ["shape"], axis=0),
              helper.make_node("Reshape", ["x", "shape"], ["y"]),
              helper.make_node("Concat", ["minus", "v3", "v2"], ["swapped"], axis=0),
              helper.make_node("Reshape", ["x2", "swapped"], ["z"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", 2, "H", "W"]),
                                     helper.make_tensor_value_info("x2", FLOAT, ["M", 1, "P", "Q"])],
                   [helper.make_tensor_value_info("y", FLOAT, None),
                    helper.make_tensor_value_info("z", FLOAT, None)])
    cleaned, ops = _clean(tmp_path, model)
    graph = onnx.load(cleaned).graph
    first = next(n for n in graph.node if n.op_type == "Reshape" and n.output[0] == "y")
    producer = {o: n for n in graph.node for o in n.output}
    assert producer[first.input[1]].op_type == "Concat"
    assert [producer[i].op_type for i in producer[first.input[1]].input if i in producer] == ["Slice"]
    assert ops["Gather"] == 2 and ops["Unsqueeze"] == 2, ops  # the swapped pair stays
    _same(model, cleaned, [{"x": (1, 2, 3, 4), "x2": (1, 1, 3, 4)}, {"x": (3, 2, 5, 2), "x2": (2, 1, 4, 5)}])


def test_a_scatter_with_no_index_is_removed_and_openvino_reads_the_result(tmp_path: Path) -> None:
    """Swin3D's folded shifted-window mask: ScatterNDs whose indices have no row ([0, 4, 3]) update
    nothing. OpenVINO 2026.4 reads such an empty constant as a scalar and refuses the ScatterND; the
    model it converted as exported must convert after deploycc too."""
    import openvino as ov

    indices = numpy_helper.from_array(np.zeros((0, 4, 3), np.int64), "indices")
    updates = numpy_helper.from_array(np.zeros((0, 4), np.float32), "updates")
    nodes = [helper.make_node("ScatterND", ["x", "indices", "updates"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(tmp_path, nodes, [helper.make_tensor_value_info("x", FLOAT, [2, 4, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, [2, 4, 4])], [indices, updates])
    cleaned, ops = _clean(tmp_path, model, "openvino-cpu")
    assert ops["ScatterND"] == 0, ops
    _same(model, cleaned, [{"x": (2, 4, 4)}])
    ov.Core().compile_model(str(cleaned), "CPU")
