"""The fp16 analysis on ONNX Runtime: a tensor beyond fp16's range is flagged and the layer that
writes it kept in fp32 when (and only when) the emulated output needs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import io
from deploycc.fp16 import analyze_half
from deploycc.fp16.analyze import tensor_error
from deploycc.fp16.emulate import round_array
from deploycc.fp16.record import BEYOND_RANGE
from deploycc.taxonomy import Precision

RNG = np.random.default_rng(7)


def _save(path: Path, nodes: list, inputs: list, outputs: list, weights: dict[str, np.ndarray]) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(array, name) for name, array in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, path)
    return path


def overflowing_matmul(folder: Path) -> Path:
    """x @ W writes values near 1e6 (beyond 65504); a scale by 1e-3 brings them back into range."""
    return _save(folder / "overflow.onnx", [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="wide_matmul"),
        helper.make_node("Mul", ["h", "scale"], ["s"], name="scale"),
        helper.make_node("Tanh", ["s"], ["y"], name="tanh"),
    ], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        {"W": (RNG.standard_normal((32, 16)) * 2e4).astype(np.float32),
         "scale": np.array(1e-5, np.float32)})


def masked_attention(folder: Path) -> Path:
    """Scores plus an additive mask at the float minimum, then Softmax: half holds the mask as
    -inf, and exp(-inf) = 0 is what the float minimum gave too."""
    mask = np.zeros((1, 8, 8), np.float32)
    mask[:, :, 5:] = np.finfo(np.float32).min
    return _save(folder / "mask.onnx", [
        helper.make_node("MatMul", ["q", "kT"], ["scores"], name="scores"),
        helper.make_node("Add", ["scores", "mask"], ["masked"], name="add_mask"),
        helper.make_node("Softmax", ["masked"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="context"),
    ], [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])],
        {"kT": (RNG.standard_normal((16, 8)) * 0.3).astype(np.float32), "mask": mask,
         "v": RNG.standard_normal((8, 16)).astype(np.float32)})


def test_a_matmul_beyond_fp16_is_flagged_and_kept_and_the_rest_stays_in_half(tmp_path: Path) -> None:
    model = overflowing_matmul(tmp_path)
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    report = analyze_half(model, {"x": x}, Precision.FP16, inputs="random")
    assert [flag.name for flag in report.flagged if flag.why == BEYOND_RANGE] == ["h"]
    assert report.flagged[0].node == "wide_matmul" and report.flagged[0].max_abs > 65504
    assert not report.within_all_half and report.error_all_half > 0.1
    assert report.kept == ["wide_matmul"]
    assert report.within_with_kept and report.error_with_kept < 1e-2
    assert 0.5 < report.kept_flops_share < 1  # the MatMul is most of this graph's work
    assert report.line().startswith("fp16: 1 layer(s) kept in fp32")
    # bf16 has fp32's range: nothing overflows, nothing is kept
    bf16 = analyze_half(model, {"x": x}, Precision.BF16, inputs="random")
    assert bf16.flagged == [] and bf16.kept == [] and bf16.within_all_half


def test_an_additive_mask_at_the_float_minimum_costs_no_fp32_layer(tmp_path: Path) -> None:
    model = masked_attention(tmp_path)
    q = RNG.standard_normal((1, 8, 16)).astype(np.float32)
    report = analyze_half(model, {"q": q}, Precision.FP16, inputs="random")
    assert "masked" in [flag.name for flag in report.flagged]  # flagged: beyond range
    assert report.within_all_half and report.kept == [] and report.kept_flops_share == 0
    assert report.runs == 1  # one emulation, no search


def test_a_model_within_range_keeps_every_layer_in_half(tmp_path: Path) -> None:
    from examples.make_models import small_cnn

    onnx.save(small_cnn(), tmp_path / "cnn.onnx")
    image = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    report = analyze_half(tmp_path / "cnn.onnx", {"image": image}, Precision.FP16, inputs="random")
    assert report.layers > 3 and report.flagged == [] and report.kept == []
    assert report.within_all_half and 0 < report.error_all_half < 1e-2  # half rounds, within tolerance


def test_rounding_through_half_saturates_activations_and_clamps_weights() -> None:
    values = np.array([1.0, 70000.0, -1e6, 1e-9], np.float32)
    assert list(round_array(values, Precision.FP16, clamp=False)) == [1.0, np.inf, -np.inf, 0.0]
    assert list(round_array(values, Precision.FP16, clamp=True))[:3] == [1.0, 65504.0, -65504.0]
    assert round_array(values, Precision.BF16, clamp=False)[1] == pytest.approx(70000, rel=4e-3)
    assert tensor_error(np.array([1.0, 2.0]), np.array([1.0, np.inf])) == np.inf
    assert tensor_error(np.array([-np.inf, 2.0]), np.array([-np.inf, 2.0])) == 0.0


def test_a_tensors_error_is_measured_where_both_sides_are_finite_in_any_dtype() -> None:
    """float32 activations are measured in float32 (the emulation's hot loop), others in float64:
    the same error either way; a value made inf or NaN is inf, the same non-finite value on both
    sides is not measured."""
    expected = np.array([4.0, -2.0, np.nan, np.inf, 1.0], np.float32)
    actual = np.array([4.0, -2.5, np.nan, np.inf, 1.25], np.float32)
    assert tensor_error(expected, actual) == pytest.approx(0.5 / 4.0)
    assert tensor_error(expected.astype(np.float64), actual.astype(np.float16)) == pytest.approx(0.5 / 4.0)
    assert tensor_error(expected, np.array([4.0, -2.0, 1.0, np.inf, 1.0], np.float32)) == np.inf  # NaN undone
    assert tensor_error(np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32)) == 0.0
    assert tensor_error(expected, actual[:4]) == np.inf


def test_an_analysis_run_before_is_recalled_never_for_other_inputs_or_tolerances(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cells of an audit analyze the same legalized bytes for two boards: the second takes the
    first's report from the shared folder (the Orin's from the Xavier's); other inputs, another
    precision or other tolerances are analyzed afresh."""
    from deploycc.fp16 import analyze, recalled
    from deploycc.rules.proven import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "shared"))
    analyzed: list[Precision] = []  # the analyses made, not recalled (a small one takes under 5 ms)
    made = analyze._analyze
    monkeypatch.setattr(analyze, "_analyze", lambda *args: analyzed.append(args[4]) or made(*args))
    model = overflowing_matmul(tmp_path)
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    first = analyze_half(model, {"x": x}, Precision.FP16, inputs="random")
    assert first.runs > 1 and len(analyzed) == 1
    recalled._kept.forget()  # what another cell's process sees: the shared folder
    again = analyze_half(model, {"x": x}, Precision.FP16, inputs="the same, drawn again")
    assert again.seconds == 0.0 and again.inputs == "the same, drawn again" and len(analyzed) == 1
    assert (again.kept, again.flagged, again.error_all_half, again.runs) == \
        (first.kept, first.flagged, first.error_all_half, first.runs)
    analyze_half(model, {"x": x * 2}, Precision.FP16, inputs="other")
    analyze_half(model, {"x": x}, Precision.FP16, inputs="r", tolerance=Precision.INT8)
    analyze_half(model, {"x": x}, Precision.BF16, inputs="r")
    assert analyzed == [Precision.FP16] * 3 + [Precision.BF16]


@pytest.mark.parametrize("opset", [17, 8])
def test_the_search_s_runs_round_as_a_model_rebuilt_for_each_kept_set(tmp_path: Path, opset: int) -> None:
    """The search's runs share one session whose layers are switched by inputs (opset 9 and up,
    Where): each set of kept layers gives what the model rounded for that set alone gives, a
    weight read by a kept layer staying wide. Below opset 9 each run is a model of its own."""
    from deploycc.fp16.analyze import _prepared
    from deploycc.fp16.emulate import HalfEmulation, activations, exposed, float_layers, round_between_layers
    from deploycc.verify.runner import run_ort

    source = overflowing_matmul(tmp_path)
    proto = onnx.load(source)
    proto.opset_import[0].version = opset
    onnx.save(proto, source)
    model, written = _prepared(io.load(source, check=False).model, tmp_path / "prepared.onnx")
    names = [v.name or "" for node in float_layers(model.graph) for v in activations(node)]
    x = (RNG.standard_normal((2, 32)) * 3).astype(np.float32)
    emulation = HalfEmulation(tmp_path / "prepared.onnx", Precision.FP16, written)
    for kept in (set(), {"wide_matmul"}, {"scale", "tanh"}, {"wide_matmul", "scale", "tanh"}):
        rebuilt = io.load(tmp_path / "prepared.onnx", check=False).model
        round_between_layers(rebuilt, kept, Precision.FP16)
        exposed(rebuilt, names)
        io.save(rebuilt, tmp_path / "rebuilt.onnx")
        expected = run_ort(tmp_path / "rebuilt.onnx", {"x": x})
        found = emulation.run({"x": x}, kept, every_activation=True)
        for name in names:
            np.testing.assert_allclose(found[name], expected[name], rtol=1e-6, err_msg=f"{name}, kept {kept}")
    assert (emulation.switched is not None) == (opset >= 9)
    h = emulation.run({"x": x}, {"scale"}, every_activation=True)["h"]
    assert np.isinf(h).any()  # the MatMul not kept: its output beyond fp16 saturates to inf
    assert not np.isinf(emulation.run({"x": x}, {"wide_matmul"}, every_activation=True)["h"]).any()


def test_a_chain_of_layers_beyond_fp16_is_kept_in_one_run_not_one_layer_per_run(tmp_path: Path) -> None:
    """Three layers in a row write values near 1e6: in half each is inf, and keeping one in fp32
    hands its inf to the next. The search keeps all three from the start (the fp32 run measured
    them beyond range) and is within tolerance on its first run."""
    model = _save(tmp_path / "chain.onnx", [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="wide_matmul"),
        helper.make_node("Add", ["h", "bias"], ["b"], name="wide_add"),
        helper.make_node("Relu", ["b"], ["r"], name="wide_relu"),
        helper.make_node("Mul", ["r", "scale"], ["y"], name="scale"),
    ], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        {"W": (RNG.standard_normal((32, 16)) * 2e4).astype(np.float32),
         "bias": np.full(16, 1e6, np.float32), "scale": np.array(1e-5, np.float32)})
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    report = analyze_half(model, {"x": x}, Precision.FP16, inputs="random")
    assert report.error_all_half == np.inf
    assert sorted(report.kept) == ["wide_add", "wide_matmul", "wide_relu"]
    assert report.within_with_kept and report.runs == 2  # all in half, then the three kept


def test_ranges_measured_inside_the_run_flag_what_the_fetched_activations_flag(tmp_path: Path) -> None:
    """The fp32 run reduces each activation to its extremes inside ORT instead of fetching them
    all: the tensors flagged (an overflow, values all below fp16's smallest normal, an inf a
    division makes, and an empty slice) are those the fetched activations give."""
    from deploycc.fp16.analyze import _measured, _prepared, flagged_tensors
    from deploycc.fp16.emulate import HalfEmulation, float_layers

    model = _save(tmp_path / "ranges.onnx", [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="wide_matmul"),
        helper.make_node("Mul", ["h", "tiny"], ["t"], name="tiny_scale"),
        helper.make_node("Div", ["x", "zeros"], ["d"], name="divide"),  # inf, NaN (0/0) and finite
        helper.make_node("Slice", ["x", "start", "end", "axis"], ["empty"], name="empty_slice"),
        helper.make_node("Tanh", ["t"], ["y"], name="tanh"),
    ], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 32]),
         helper.make_tensor_value_info("empty", TensorProto.FLOAT, [2, 0])],
        {"W": (RNG.standard_normal((32, 16)) * 2e4).astype(np.float32), "tiny": np.array(1e-12, np.float32),
         "zeros": np.repeat(np.array([0, 1], np.float32), 16), "start": np.array([3], np.int64),
         "end": np.array([3], np.int64), "axis": np.array([1], np.int64)})
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    x[0, 0] = 0.0
    prepared, written = _prepared(io.load(model, check=False).model, tmp_path / "prepared.onnx")
    layers = float_layers(prepared.graph)
    emulation = HalfEmulation(tmp_path / "prepared.onnx", Precision.FP16, written)
    reference, flagged, every_activation = _measured(emulation, layers, Precision.FP16, {"x": x})
    fetched = emulation.run({"x": x}, None, every_activation=True)
    described = [(f.name, f.why, f.max_abs, f.min_abs_nonzero) for f in flagged]
    expected = flagged_tensors(fetched, layers, Precision.FP16, {"x": x})
    assert described == [(f.name, f.why, f.max_abs, f.min_abs_nonzero) for f in expected]
    assert {f.name for f in flagged} == {"h", "t", "y"}  # d's finite values and the empty slice: held
    assert not every_activation and "h" in reference  # fetched to be described, as flagged
    np.testing.assert_array_equal(reference["y"], fetched["y"])
