"""INT8 with calibration data: TensorRT's calibration cache format, the Q/DQ form TensorRT takes,
the accuracy guard keeping a layer in float when the budget demands it, and bad data refused with
one line and exit 2. Every model here is run on ONNX Runtime (and OpenVINO through NNCF)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
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
from tests.records.test_round_trip import assert_reads_back


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
    # the reference names the sample it holds, not the staging folder (which changed build_hash)
    reference = json.loads((tmp_path / "xavier" / "bundle" / "reference" / "reference.json").read_text())
    assert reference["inputs_described"] == "verify-inputs.npz (the first validation sample)"
    assert_reads_back(tmp_path / "xavier")  # `device import` renders report.md again from report.json


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

def _outlier_model(shift: float = 400.0, softmax: bool = False) -> onnx.ModelProto:
    """x -> MatMul(a) -> Add(one channel +shift) -> MatMul(b) -> y. In float the outlier channel meets
    a zero row of b and leaves y alone; in int8 it stretches the range of b's input so far that the
    other channels round to a few levels. Keeping `second` in float leaves that tensor float.
    `softmax`: y through a Softmax (attention's op, which makes NNCF pick its transformer scheme)."""
    rng = np.random.default_rng(1)
    first = rng.normal(0, 0.5, (16, 16)).astype(np.float32)
    bias = np.zeros(16, np.float32)
    bias[3] = shift
    second = rng.normal(0, 0.5, (16, 8)).astype(np.float32)
    second[3, :] = 0.0
    last = [helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)] if softmax else []
    graph = helper.make_graph([
        helper.make_node("MatMul", ["x", "a"], ["h"], name="first"),
        helper.make_node("Add", ["h", "bias"], ["h2"], name="shift"),
        helper.make_node("MatMul", ["h2", "b"], ["logits" if softmax else "y"], name="second"), *last,
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


def test_the_guard_holds_every_step_to_the_budget_the_precision_search_judges_by(tmp_path: Path) -> None:
    """An int8 model whose cosine metric is within its drop (0.0017 of 0.01) while an output differs
    element by element beyond int8's verification tolerances: the guard alone took it, and the precision
    search then refused it. With the search's budget (min_cosine) every step is held to it too, and the
    guard keeps layers in float until it is met."""
    model = tmp_path / "outlier.onnx"
    onnx.save(_outlier_model(shift=40.0), model)
    calibration = _samples(tmp_path / "calibration", 20, x=(1, 16))
    steps = {}
    for min_cosine in (0.0, 0.999):
        options = QuantizeOptions(calibration=calibration, metric="cosine", min_cosine=min_cosine)
        report = api.build(model, "ort-cpu", tmp_path / f"out-{min_cosine}", BuildOptions(
            precision="int8", bench=False, quantize=options))
        assert report.quantization is not None and report.status == "verified", report.summary
        steps[min_cosine] = report.quantization.steps
    assert len(steps[0.0]) == 1 and steps[0.0][0]["within_budget"], steps[0.0]  # the metric alone
    first, last = steps[0.999][0], steps[0.999][-1]
    assert first["drop"] <= 0.01 and not first["within_budget"], first
    assert "on validation sample" in first["beyond"] and "differ beyond" in first["beyond"], first
    assert last["within_budget"] and last["kept_float"], last


def test_nncf_tries_its_default_scheme_where_the_transformer_scheme_is_over_budget(tmp_path: Path) -> None:
    """NNCF's transformer scheme (picked where there is a Softmax) broke a legalized Whisper encoder
    (cosine 0.9988) that its default scheme keeps at 0.99995: where the first int8 model is over
    budget, the other scheme is quantized and judged too, and the guard starts from the better."""
    model = tmp_path / "attention_like.onnx"
    onnx.save(_outlier_model(softmax=True), model)
    options = QuantizeOptions(calibration=_samples(tmp_path / "calibration", 20, x=(1, 16)), metric="cosine",
                              max_drop=0.001)
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(
        precision="int8", bench=False, quantize=options))
    assert report.quantization is not None and report.status == "verified", report.summary
    schemes = next((note for note in report.quantization.notes if "transformer scheme" in note), "")
    assert "its default scheme: cosine" in schemes, report.quantization.notes


def test_ort_cpu_int8_is_a_verified_qdq_model(cnn, tmp_path: Path) -> None:
    model, calibration = cnn
    report = api.build(model, "ort-cpu", tmp_path / "ort", BuildOptions(
        precision="int8", quantize=QuantizeOptions(calibration=calibration)))
    quantized = report.quantization
    assert report.status == "verified" and quantized is not None, report.summary
    assert quantized.metric == "top1" and quantized.within_budget
    # the speed verdict: int8 and fp32 raced in interleaved pairs, the ratio with its interval
    speed = quantized.speed
    assert speed is not None and speed.order == "ABBA interleaved" and speed.pairs >= 30
    assert speed.ci95[0] <= speed.ratio_of_medians <= speed.ci95[1]
    assert (quantized.int8_latency_ms, quantized.fp32_latency_ms) == (speed.median_ms, speed.other_median_ms)
    assert quantized.speed_text in (tmp_path / "ort" / "report.md").read_text()
    assert_reads_back(tmp_path / "ort")  # the race's interval and the latency come back from JSON too
    if quantized.decision == "int8":
        assert speed.ci95[1] < 1.0  # kept only where faster beyond noise
        assert report.verification is not None and report.verification.precision == "int8"
        ops = {n.op_type for n in onnx.load(tmp_path / "ort" / "model.int8.onnx").graph.node}
        assert "QuantizeLinear" in ops
    else:  # not faster beyond noise on this machine: said, and fp32 built
        assert speed.ci95[1] >= 1.0
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


def test_nncf_s_accuracy_control_is_stopped_at_its_limit_and_says_so(tmp_path: Path, monkeypatch) -> None:
    """NNCF's guard ranks every quantized group and ranks the rest again after each step that does
    not help: on PP-OCRv4's detector it ran past 25 minutes. Past its limit it stops, and the build
    keeps fp32 and says why, where it waited on NNCF."""
    pytest.importorskip("nncf", reason="NNCF is the int8 extra: pip install 'deploycc[int8]'")
    from deploycc.quantize import openvino_nncf

    monkeypatch.setattr(openvino_nncf, "GUARD_SECONDS", 0.0)
    model = tmp_path / "outlier.onnx"
    onnx.save(_outlier_model(), model)
    options = QuantizeOptions(calibration=_samples(tmp_path / "calibration", 20, x=(1, 16)), metric="cosine",
                              max_drop=0.001)
    report = api.build(model, "openvino-cpu", tmp_path / "ov",
                       BuildOptions(precision="int8", quantize=options, bench=False))
    quantized = report.quantization
    assert quantized is not None and report.status == "verified", report.summary
    assert not quantized.steps[0]["within_budget"]  # all-int8 breaks the budget: the guard was asked
    assert len(quantized.steps) == 1 and quantized.decision == "fp32" and report.precision == "fp32"
    assert "accuracy control was stopped after" in quantized.reason, quantized.reason
    assert "0 evaluation(s)" in quantized.reason


def _matmuls(size: int = 1024, layers: int = 4) -> onnx.ModelProto:
    """x -> (MatMul, Relu) x `layers` with size x size weights: 16 MB of fp32 weights that do not
    stay in cache where their 4 MB of int8 do, so OpenVINO's int8 beats fp32 by far more than any
    noise (0.2x its latency on a busy 2-core machine); still quantized and built in seconds."""
    rng = np.random.default_rng(2)
    nodes, weights, value = [], [], "x"
    for index in range(layers):
        weights.append(numpy_helper.from_array(
            rng.normal(0, size ** -0.5, (size, size)).astype(np.float32), f"w{index}"))
        nodes += [helper.make_node("MatMul", [value, f"w{index}"], [f"h{index}"], name=f"matmul{index}"),
                  helper.make_node("Relu", [f"h{index}"], [f"r{index}"], name=f"relu{index}")]
        value = f"r{index}"
    graph = helper.make_graph(nodes, "matmuls",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1, size])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_openvino_int8_build_keeps_one_copy_of_its_ir(tmp_path: Path) -> None:
    """The int8 IR was left as model.int8.xml/.bin beside the artifact model.xml/.bin, byte for
    byte the same files."""
    pytest.importorskip("nncf", reason="NNCF is the int8 extra: pip install 'deploycc[int8]'")
    import openvino as ov

    model = tmp_path / "matmuls.onnx"
    onnx.save(_matmuls(), model)
    out = tmp_path / "ov"
    report = api.build(model, "openvino-cpu", out, BuildOptions(
        precision="int8", bench=False,
        quantize=QuantizeOptions(calibration=_samples(tmp_path / "calibration", 10, x=(1, 1024)))))
    quantized = report.quantization
    assert report.status == "verified" and quantized is not None, report.summary
    assert quantized.decision == "int8" and quantized.faster, quantized.reason
    assert quantized.speed is not None and quantized.speed.ci95[1] < 1.0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert not [name for name in files if ".int8." in name], files
    assert report.artifact is not None and report.artifact.files == ["model.xml", "model.bin"]
    assert quantized.model == "model.xml"  # the int8 model is the artifact
    built = ov.Core().read_model(str(out / "model.xml"))
    assert "FakeQuantize" in {op.get_type_name() for op in built.get_ops()}
    # the lists a user reads name what is there, each once
    assert report.files == files
    outputs = json.loads((out / "manifest.json").read_text())["outputs"]
    reports = ("manifest.json", "report.json", "report.md")
    assert sorted(outputs) == [name for name in files if name not in reports]


def test_the_speed_verdict_reads_from_the_interval_not_the_point() -> None:
    """A ratio whose interval straddles 1 is "not faster beyond noise", with no point ratio."""
    from deploycc.bench.run import Comparison
    from deploycc.quantize import QuantizeReport
    from deploycc.report.markdown import _quantization  # report.md's INT8 section

    def verdict(low: float, ratio: float, high: float) -> tuple[bool | None, str, str]:
        report = QuantizeReport(target="ort-cpu", method="m", decision="int8", reason="r", metric="top1",
                                fp32_metric=1.0, int8_metric=1.0, drop=0.0, max_drop=0.01, within_budget=True,
                                calibration_samples=8, validation_samples=2,
                                speed=Comparison("fp32", "ABBA interleaved", 50, ratio, 1.0, ratio,
                                                 (low, high), 2000))
        return report.faster, report.speed_text, "\n".join(_quantization(report))

    faster, text, page = verdict(0.30, 0.35, 0.41)
    assert faster is True and text in page
    assert text.startswith("int8 at 0.35x fp32's latency (95% CI 0.30-0.41")
    faster, text, page = verdict(0.93, 1.02, 1.12)
    assert faster is False and text.startswith("not faster beyond noise") and "1.02" not in text
    assert text in page and "1.02x" not in page
    faster, text, _ = verdict(1.2, 1.3, 1.4)
    assert faster is False and text.startswith("int8 slower: 1.30x")


# ------------------------------------------------------------------------------ --require-int8

def test_require_int8_fails_the_build_where_the_guard_keeps_float(cnn, tmp_path: Path) -> None:
    """A metric only the fp32 model meets (its own logits to 1e-5): no int8 step is within the
    budget, so the guard keeps fp32; with --require-int8 that fails the build at the quantize stage."""
    import onnxruntime as ort

    model, calibration = cnn
    session = ort.InferenceSession(str(model))
    folder = tmp_path / "expected"
    folder.mkdir()
    for file in sorted(calibration.glob("*.npz"))[:10]:
        image = np.load(file)["image"]
        np.savez(folder / file.name, image=image, expected=session.run(None, {"image": image})[0])
    out = tmp_path / "strict"
    result = run_cli("build", str(model), "--precision", "int8", "--calibration", str(folder),
                     "--require-int8", "--metric", "tests.quantize.labels_metric:close_to_fp32", "--no-bench",
                     "-o", str(out), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["status"], report["stage"], report["artifact"]) == ("failed", "quantize", None)
    assert report["quantization"]["decision"] == "fp32" and report["quantization"]["required"]
    assert report["summary"].startswith("--require-int8: the guard kept fp32: no int8 model was within")
    assert "--require-int8" in report["next_step"]
    assert "int8 was required (--require-int8) and the guard kept fp32" in (out / "report.md").read_text()
    assert not (out / "model.int8.onnx").exists() and not (out / "model.ort.onnx").exists()


@pytest.mark.parametrize("args", [("-t", "ort-cpu"),  # no --precision int8: the target's fp32
                                  ("-t", "jetson-nano", "--precision", "int8", "--allow-fallback")])
def test_require_int8_on_a_build_that_is_not_int8_is_refused_up_front(cnn, tmp_path: Path,
                                                                     args: tuple[str, ...]) -> None:
    model, calibration = cnn
    result = run_cli("build", str(model), *args, "--calibration", str(calibration), "--require-int8",
                     "--batch", "1", "-o", str(tmp_path / "out"))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "--require-int8, but this build is" in lines[0], \
        result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- bad input

def test_openvino_int8_without_nncf_is_one_line_and_exit_2(cnn, tmp_path: Path) -> None:
    """NNCF is the optional int8 extra. Without it an openvino-cpu int8 build fell back to fp32,
    exit 0, with "int8: top1 0.0000 vs fp32 1.0000". A folder first on PYTHONPATH whose nncf.py
    fails to import the way a missing package does makes an environment without it."""
    model, calibration = cnn
    shadow = tmp_path / "without-nncf"
    shadow.mkdir()
    (shadow / "nncf.py").write_text("raise ModuleNotFoundError(\"No module named 'nncf'\", name='nncf')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    assert subprocess.run([sys.executable, "-c", "import nncf"], env={**os.environ, **env},
                          capture_output=True).returncode != 0  # the stand-in environment holds
    out = tmp_path / "ov"
    result = run_cli("build", str(model), "-t", "openvino-cpu", "--precision", "int8", "--calibration",
                     str(calibration), "-o", str(out), env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "needs NNCF: pip install 'deploycc[int8]'" in lines[0], result.stderr
    assert not out.exists()



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
    shutil.copytree(calibration, corpus / "cal")  # a hints file's data lies in its folder (issue 49)
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
