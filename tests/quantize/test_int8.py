"""INT8 with calibration data: TensorRT's calibration cache format, the Q/DQ form TensorRT takes,
the accuracy guard keeping a layer in float when the budget demands it, and bad data refused with
one line and exit 2. Every model here is run on ONNX Runtime (and OpenVINO through NNCF)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.options import BuildOptions, LegalizeOptions, QuantizeOptions
from deploycc.quantize import calibration_cache
from deploycc.quantize.ort_qdq import tensorrt_form_problems
from examples.make_models import small_cnn
from tests.cli.test_cli import run as run_cli


def _samples(folder: Path, count: int, seed: int = 0, **shapes: tuple[int, ...]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        np.savez(folder / f"{index:03d}.npz",
                 **{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()})
    return folder


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("int8")
    model = folder / "cnn.onnx"
    onnx.save(small_cnn(), model)
    return model, _samples(folder / "calibration", 24, image=(1, 3, 32, 32))


# ------------------------------------------------------------------ TensorRT's calibration cache

def test_calibration_cache_round_trips_and_is_tensorrt_s_format(tmp_path: Path) -> None:
    scales = {"input": 0.0123, "conv1_out": 1 / 127, "a name: with colon": 3.5e-5}
    path = tmp_path / "calibration.cache"
    calibration_cache.write_cache(path, scales, "8.5.2")
    lines = path.read_text().splitlines()
    assert lines[0] == "TRT-8502-EntropyCalibration2"
    # big-endian IEEE-754 float32 bits, as TensorRT's calibrator writes them
    assert f"input: {struct.pack('>f', 0.0123).hex()}" in lines
    header, read = calibration_cache.read_cache(path)
    assert header == lines[0]
    # a value written is the value read back (as the float32 TensorRT keeps)
    assert read == {name: float(np.float32(value)) for name, value in scales.items()}
    assert calibration_cache.version_number("10.0.1") == 100001
    assert calibration_cache.version_number("8.6.1") == 8601
    assert calibration_cache.encode_scale(1.0) == "3f800000"


def test_a_cache_that_is_not_tensorrt_s_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.cache"
    path.write_text("TRT-8502-EntropyCalibration2\nx: not-hex\n")
    with pytest.raises(ValueError, match="not `tensor: hex`"):
        calibration_cache.read_cache(path)


# ---------------------------------------------------------------------------- the TensorRT form

def test_tensorrt_int8_is_symmetric_per_channel_qdq_with_a_cache(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    report = api.build(model, "jetson-xavier", tmp_path / "xavier", BuildOptions(
        legalize=LegalizeOptions(batch=1), precision="int8", bench=False,
        quantize=QuantizeOptions(calibration=calibration)))
    assert report.status == "pending-on-device", report.summary
    quantized = report.quantization
    assert quantized is not None and quantized.decision == "int8"
    qdq = onnx.load(tmp_path / "xavier" / "bundle" / "model.onnx")
    assert tensorrt_form_problems(qdq, opset_range=(7, 17)) == []
    assert any(n.op_type == "QuantizeLinear" for n in qdq.graph.node)
    _, scales = calibration_cache.read_cache(tmp_path / "xavier" / "bundle" / "calibration.cache")
    legalized = onnx.load(tmp_path / "xavier" / "model.legalized.onnx")
    assert "image" in scales and all(v > 0 for v in scales.values())
    assert set(scales) <= {v for n in legalized.graph.node for v in n.output} | {"image"}
    settings = json.loads((tmp_path / "xavier" / "bundle" / "bundle.json").read_text())["settings"]
    assert settings["precision"] == "int8" and settings["int8_calibration_cache"] is None  # GPU: Q/DQ
    # ... and the other form beside it, for the runner to time both on the GPU and keep the faster
    assert settings["int8_implicit"] == {"model": "model.fp32.onnx", "cache": "calibration.cache"}
    fp32 = onnx.load(tmp_path / "xavier" / "bundle" / "model.fp32.onnx")
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in fp32.graph.node)


def test_the_dla_builds_the_fp32_model_with_the_cache(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    report = api.build(model, "jetson-xavier", tmp_path / "dla", BuildOptions(
        legalize=LegalizeOptions(batch=1), precision="int8", bench=False, dla_core=0,
        quantize=QuantizeOptions(calibration=calibration)))
    assert report.status == "pending-on-device", report.summary
    bundle = json.loads((tmp_path / "dla" / "bundle" / "bundle.json").read_text())
    assert bundle["settings"]["int8_calibration_cache"] == "calibration.cache"
    assert bundle["settings"]["int8_implicit"] is None  # the DLA has one form only
    assert "--calib=calibration.cache" in bundle["trtexec"] and "--useDLACore=0" in bundle["trtexec"]
    inside = onnx.load(tmp_path / "dla" / "bundle" / "model.onnx")
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in inside.graph.node)


def test_the_form_check_finds_what_tensorrt_refuses() -> None:
    """An asymmetric zero point, a per-channel axis across the wrong dim, a QLinear op."""
    weight = numpy_helper.from_array(np.zeros((4, 3, 1, 1), np.int8), "w")
    scale = numpy_helper.from_array(np.ones(3, np.float32), "w_scale")  # 3 scales: across dim 1
    zero = numpy_helper.from_array(np.zeros(3, np.int8), "w_zero")
    x_scale = numpy_helper.from_array(np.array(0.1, np.float32), "x_scale")
    x_zero = numpy_helper.from_array(np.array(3, np.uint8), "x_zero")  # asymmetric, unsigned
    graph = helper.make_graph([
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wd"], axis=1),
        helper.make_node("Conv", ["xd", "wd"], ["y"]),
        helper.make_node("QLinearMatMul", ["xq", "x_scale", "x_zero", "xq", "x_scale", "x_zero",
                                           "x_scale", "x_zero"], ["z"]),
    ], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight, scale, zero, x_scale, x_zero])
    problems = tensorrt_form_problems(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                                      opset_range=(7, 13))
    text = "\n".join(problems)
    assert "zero point" in text and "axis 1" in text and "QLinearMatMul" in text, text


# ------------------------------------------------------------------------------------ the guard

def _outlier_model() -> onnx.ModelProto:
    """x -> MatMul(a) -> Add(one channel +400) -> MatMul(b) -> y. In float the outlier channel meets
    a zero row of b and leaves y alone; in int8 it stretches the range of b's input so far that the
    other channels round to a few levels. Keeping `second` in float leaves that tensor float."""
    rng = np.random.default_rng(1)
    first = rng.normal(0, 0.5, (16, 16)).astype(np.float32)
    bias = np.zeros(16, np.float32)
    bias[3] = 400.0
    second = rng.normal(0, 0.5, (16, 8)).astype(np.float32)
    second[3, :] = 0.0
    graph = helper.make_graph([
        helper.make_node("MatMul", ["x", "a"], ["h"], name="first"),
        helper.make_node("Add", ["h", "bias"], ["h2"], name="shift"),
        helper.make_node("MatMul", ["h2", "b"], ["y"], name="second"),
    ], "outlier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(first, "a"), numpy_helper.from_array(bias, "bias"),
         numpy_helper.from_array(second, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_guard_keeps_the_damaging_layer_in_float_when_the_budget_demands_it(tmp_path: Path) -> None:
    model = tmp_path / "outlier.onnx"
    onnx.save(_outlier_model(), model)
    calibration = _samples(tmp_path / "calibration", 20, x=(1, 16))
    options = QuantizeOptions(calibration=calibration, metric="cosine", max_drop=0.001)
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(precision="int8", quantize=options))
    quantized = report.quantization
    assert quantized is not None
    first, last = quantized.steps[0], quantized.steps[-1]
    assert not first["within_budget"] and first["drop"] > 0.001  # all-int8 breaks the budget
    assert last["within_budget"] and "second" in last["kept_float"]
    assert set(quantized.kept_float) == set(last["kept_float"])
    # whichever precision it kept (int8 or fp32 where int8 is not faster here), it was verified
    assert report.status == "verified", report.summary
    assert "## INT8" in (tmp_path / "out" / "report.md").read_text()


def test_ort_cpu_int8_is_a_verified_qdq_model(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    report = api.build(model, "ort-cpu", tmp_path / "ort", BuildOptions(
        precision="int8", quantize=QuantizeOptions(calibration=calibration)))
    quantized = report.quantization
    assert report.status == "verified" and quantized is not None, report.summary
    assert quantized.metric == "top1" and quantized.within_budget
    assert quantized.fp32_latency_ms and quantized.int8_latency_ms
    if quantized.decision == "int8":
        assert report.verification is not None and report.verification.precision == "int8"
        ops = {n.op_type for n in onnx.load(tmp_path / "ort" / "model.int8.onnx").graph.node}
        assert "QuantizeLinear" in ops
    else:  # not faster on this machine: said, and fp32 built
        assert "does not pay off" in quantized.reason and report.precision == "fp32"


def test_openvino_int8_through_nncf(cnn, tmp_path: Path) -> None:
    pytest.importorskip("nncf", reason="NNCF is the int8 extra: pip install 'deploycc[int8]'")
    model, calibration = cnn
    report = api.build(model, "openvino-cpu", tmp_path / "ov", BuildOptions(
        precision="int8", quantize=QuantizeOptions(calibration=calibration), bench=False))
    quantized = report.quantization
    assert report.status == "verified" and quantized is not None, report.summary
    assert quantized.method.startswith("NNCF")
    assert set(quantized.default_precision_latency_ms) == {"fp32", "int8"}
    if quantized.decision == "int8":
        import openvino as ov

        built = ov.Core().read_model(str(tmp_path / "ov" / "model.xml"))
        ops = {op.get_type_name() for op in built.get_ops()}
        assert "FakeQuantize" in ops


# ---------------------------------------------------------------------------------- bad input

def test_jetson_nano_refuses_int8_with_the_reason_and_falls_back_when_allowed(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    refused = run_cli("build", str(model), "-t", "jetson-nano", "--precision", "int8", "--calibration",
                      str(calibration), "-o", str(tmp_path / "nano"), "--batch", "1")
    assert refused.returncode == 2 and "compute capability 5.3" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "nano").exists()
    allowed = run_cli("build", str(model), "-t", "jetson-nano", "--precision", "int8", "--calibration",
                      str(calibration), "-o", str(tmp_path / "nano"), "--batch", "1", "--allow-fallback",
                      "--json")
    assert allowed.returncode == 0, allowed.stderr
    report = json.loads(allowed.stdout)
    assert report["precision"] == "fp16" and "built in fp16, not int8" in report["notes"][0]


@pytest.mark.parametrize("problem", ["no-data", "missing-input", "dtype", "shape", "empty-folder"])
def test_bad_calibration_data_is_one_line_and_exit_2(cnn, tmp_path: Path, problem: str) -> None:
    model, _ = cnn
    folder = tmp_path / "data"
    folder.mkdir()
    arrays = {"missing-input": {"picture": np.zeros((1, 3, 32, 32), np.float32)},
              "dtype": {"image": np.zeros((1, 3, 32, 32), np.float64)},
              "shape": {"image": np.zeros((1, 3, 16, 32), np.float32)}}.get(problem)
    if arrays is not None:
        np.savez(folder / "000.npz", **arrays)
    args = ["build", str(model), "--precision", "int8", "-o", str(tmp_path / "out")]
    if problem != "no-data":
        args += ["--calibration", str(folder)]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    expected = {"no-data": "needs calibration data", "missing-input": "no array for input 'image'",
                "dtype": "is float64", "shape": "[1, 3, 16, 32]", "empty-folder": "no .npz files"}[problem]
    assert expected in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_users_metric_gets_the_labels_beside_the_samples(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    import onnxruntime as ort

    session = ort.InferenceSession(str(model))
    folder = tmp_path / "labelled"
    folder.mkdir()
    for index, file in enumerate(sorted(calibration.glob("*.npz"))):
        image = np.load(file)["image"]
        label = int(np.argmax(session.run(None, {"image": image})[0]))  # the fp32 model's own answer
        np.savez(folder / f"{index:03d}.npz", image=image, label=np.array(label))
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(precision="int8", bench=False,
        quantize=QuantizeOptions(calibration=folder, metric="tests.quantize.labels_metric:accuracy")))
    quantized = report.quantization
    assert quantized is not None and quantized.metric == "tests.quantize.labels_metric:accuracy"
    assert quantized.fp32_metric == 1.0  # labelled with the fp32 model's own answers


def test_audit_int8_calibrates_on_the_hints_samples(cnn, tmp_path: Path) -> None:
    from deploycc.audit.run import AuditOptions

    model, calibration = cnn
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, hints in (("with_data", {"shapes": {"image": [1, 3, 32, 32]}, "calibration": "cal"}),
                        ("without_data", {"shapes": {"image": [1, 3, 32, 32]}})):
        (corpus / f"{name}.onnx").write_bytes(model.read_bytes())
        (corpus / f"{name}.hints.json").write_text(json.dumps(hints))
    (corpus / "cal").symlink_to(calibration)
    report = api.audit([corpus], ["ort-cpu", "jetson-nano"], tmp_path / "audit",
                       AuditOptions(precision="int8", timeout=300))
    cells = {(Path(c.model).stem, c.target): c for c in report.cells}
    good = cells[("with_data", "ort-cpu")]
    assert good.status == "verified", good.message
    assert good.details["int8"]["within_budget"] is True and good.details["int8"]["metric"] == "top1"
    assert cells[("without_data", "ort-cpu")].category == "needs-inputs"
    nano = cells[("with_data", "jetson-nano")]
    assert nano.category == "precision" and "compute capability 5.3" in nano.message


def test_samples_come_from_python_iterables_through_the_api(tmp_path: Path) -> None:
    model = tmp_path / "outlier.onnx"
    onnx.save(_outlier_model(), model)
    rng = np.random.default_rng(5)
    samples = ({"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(12))
    held = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(5)]
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(
        precision="int8", bench=False, quantize=QuantizeOptions(samples=samples, validation_samples=held,
                                                                max_drop=1.0)))
    quantized = report.quantization
    assert quantized is not None and (quantized.calibration_samples, quantized.validation_samples) == (12, 5)
    assert not quantized.notes or "set apart" not in quantized.notes[0]  # nothing split off: both given
