"""The kept layers in each engine's own form: TensorRT's trtexec flags per release and the
board's runner (its name mapping, the engine inspector's JSON, the result imported), OpenVINO's
runtime attribute, ONNX Runtime's fp16 converter; and `check --precision fp16`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploycc import api
from deploycc.device.bundle import trtexec_flags
from deploycc.options import BuildOptions
from deploycc.taxonomy import Precision
from tests.backends.test_device_runner import _runner_module
from tests.cli.test_cli import run as run_cli
from tests.fp16.test_analyze import overflowing_matmul

KEPT = "wide_matmul"


@pytest.fixture(scope="module")
def overflow(tmp_path_factory) -> Path:
    return overflowing_matmul(tmp_path_factory.mktemp("fp16"))


@pytest.mark.parametrize("version, has", [("8.2.1", False), ("8.4.1", True), ("8.5.2", True), ("8.6.1", True),
                                          ("10.3.0", True), ("10.16.0", True), ("11.0.0", False)])
def test_trtexec_pins_layer_precision_from_8_4_1_until_11(version: str, has: bool) -> None:
    flags = trtexec_flags(version)
    assert ("layer_precisions" in flags) is has
    if has:  # as sampleOptions.cpp spells them
        assert flags["layer_precisions"].format("a:fp32") == "--layerPrecisions=a:fp32"
        assert flags["layer_output_types"].format("a:fp32") == "--layerOutputTypes=a:fp32"
        assert flags["precision_constraints"].format("obey") == "--precisionConstraints=obey"


def test_the_bundle_keeps_the_overflowing_layer_in_fp32_where_trtexec_can_and_says_where_not(
        overflow: Path, tmp_path: Path) -> None:
    xavier = api.build(overflow, "jetson-xavier", tmp_path / "xavier")  # TensorRT 8.5.2
    assert xavier.half is not None and xavier.half.kept == [KEPT]
    bundle = json.loads((tmp_path / "xavier" / "bundle" / "bundle.json").read_text())
    assert bundle["settings"]["fp32_layers"] == [KEPT]
    assert f"--layerPrecisions={KEPT}:fp32" in bundle["trtexec"] and "--precisionConstraints=obey" in \
        bundle["trtexec"] and f"--layerOutputTypes={KEPT}:fp32" in bundle["trtexec"]
    nano = api.build(overflow, "jetson-nano", tmp_path / "nano")  # TensorRT 8.2.1
    nano_bundle = json.loads((tmp_path / "nano" / "bundle" / "bundle.json").read_text())
    assert nano_bundle["settings"]["fp32_layers"] == [KEPT]
    assert not any(flag.startswith("--layerPrecisions") for flag in nano_bundle["trtexec"])
    assert any("has no --layerPrecisions" in note for note in nano.artifact.notes)
    markdown = (tmp_path / "xavier" / "report.md").read_text()
    assert "## fp16" in markdown and "1 layer(s) kept in fp32" in markdown
    assert "| h | wide_matmul |" in markdown


def test_the_runner_maps_tensorrt_layer_names_back_to_onnx_nodes() -> None:
    runner = _runner_module()
    wanted = {KEPT, "norm"}
    assert runner.layer_nodes(KEPT, "", wanted) == KEPT
    assert runner.layer_nodes(f"{KEPT}_1", "", wanted) == KEPT  # a node's second layer
    assert runner.layer_nodes("norm_x", "", wanted) is None
    assert runner.layer_nodes("(Unnamed Layer* 3) [Shuffle]", "", wanted) is None
    assert runner.layer_nodes("ONNXTRT_Broadcast_7", "[ONNX Layer: norm]", wanted) == "norm"  # 10.x metadata
    # The engine inspector's detailed JSON, as trex's ResNet example has it (fp16 build)
    layers = [
        {"Name": "Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1", "LayerType": "Reformat",
         "Outputs": [{"Format/Datatype": "Channel major FP16 format where channel % 4 == 0"}]},
        {"Name": "Conv_0 + Relu_1", "LayerType": "CaskConvolution",
         "Outputs": [{"Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
        {"Name": "Gemm_48", "LayerType": "CaskGemm",
         "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
        {"Name": "{ForeignNode[Add_5...Mul_9]}", "LayerType": "Myelin",
         "Outputs": [{"Format/Datatype": "Half"}]},
        {"Name": "x", "Metadata": "[ONNX Layer: Softmax_3]", "Outputs": [{"Format/Datatype": "Float"}]},
    ]
    found = runner.engine_precisions(layers, {"Conv_0", "Relu_1", "Gemm_48", "Add_5", "Conv", "Softmax_3"})
    assert found == {"Conv_0": "fp16", "Relu_1": "fp16", "Gemm_48": "fp32", "Softmax_3": "fp32"}


def test_the_board_s_result_reports_the_kept_layers_and_the_import_shows_them(overflow: Path,
                                                                                 tmp_path: Path) -> None:
    api.build(overflow, "jetson-xavier", tmp_path / "built")
    out = tmp_path / "out"
    shutil.copytree(tmp_path / "built", out)
    child = subprocess.run([sys.executable, str(out / "bundle" / "run_on_device.py"), "--engine",
                            "onnxruntime", "--iterations", "3", "--warmup-s", "0"],
                           capture_output=True, text=True, timeout=120)
    result = json.loads((out / "bundle" / "result.json").read_text())
    assert child.returncode == 0, result
    assert result["fp32_layers"]["asked"] == [KEPT] and "stands in" in result["fp32_layers"]["note"]
    imported = run_cli("device", "import", str(out), str(out / "bundle" / "result.json"))
    assert imported.returncode == 0, imported.stderr
    assert "fp32 layers: 1 asked" in (out / "report.md").read_text()


def test_openvino_keeps_the_layer_with_its_runtime_attribute_and_verifies(overflow: Path,
                                                                         tmp_path: Path) -> None:
    import openvino as ov

    report = api.build(overflow, "openvino-cpu", tmp_path / "ov", BuildOptions(precision=Precision.FP16))
    assert report.status == "verified" and report.half is not None and report.half.kept == [KEPT]
    assert any("1 layer(s) kept in fp32" in note for note in report.artifact.notes)
    model = ov.Core().read_model(str(tmp_path / "ov" / "model.xml"))
    # what the IR carries for the op after the runtime's own fp16 compression read the attribute
    marked = [op.get_friendly_name() for op in model.get_ops()
              if "DisablePrecisionConversion_0" in list(op.get_rt_info().keys())]
    assert marked == [KEPT]


def test_ort_fp16_keeps_the_layer_and_its_weights_in_fp32_and_verifies(overflow: Path,
                                                                       tmp_path: Path) -> None:
    import onnx

    def matmul_types(folder: Path) -> tuple[int, int]:
        """(the type of x as the MatMul reads it, the stored type of its weights)."""
        model = onnx.load(str(folder / "model.fp16.onnx"))
        node = next(n for n in model.graph.node if n.name == KEPT)
        weights = {t.name: t.data_type for t in model.graph.initializer}
        producers = {out: n for n in model.graph.node for out in n.output}
        reader = producers.get(node.input[0])
        x_type = reader.attribute[0].i if reader is not None else onnx.TensorProto.FLOAT
        return x_type, weights["W"]

    fp16 = BuildOptions(precision=Precision.FP16, bench=False)
    kept = api.build(overflow, "ort-cpu", tmp_path / "kept", fp16)
    assert kept.status == "verified", kept.summary
    assert any("block list" in note for note in kept.artifact.notes)
    assert matmul_types(tmp_path / "kept") == (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT)
    plain = api.build(overflow, "ort-cpu", tmp_path / "plain",
                      BuildOptions(precision=Precision.FP16, bench=False, half_analysis=False))
    assert matmul_types(tmp_path / "plain") == (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT16)
    # This x86 CPU has no fp16 arithmetic: ORT runs the fp16 MatMul in fp32 between Casts it
    # takes out again, so even the plain conversion verifies here, and the build says so.
    assert plain.status == "verified"
    if not any("no fp16 arithmetic" in note for note in plain.artifact.notes):
        pytest.skip("this CPU computes in fp16: the plain conversion's overflow is the board's case")


def test_check_gives_the_analysis_without_building(overflow: Path) -> None:
    out = run_cli("check", str(overflow), "-t", "ort-cpu", "--precision", "fp16", "--json")
    assert out.returncode == 0, out.stderr
    half = json.loads(out.stdout)["half"]
    assert half["kept"] == [KEPT] and half["flagged"][0]["name"] == "h"
    # as the CLI does by default: where a target builds fp16 (the Jetsons), not where it builds fp32
    assert api.check(overflow, ["ort-cpu"], precision="target").half is None
    assert api.check(overflow, ["jetson-orin"], precision="target").half.kept == [KEPT]
    assert api.check(overflow, ["jetson-orin"]).half is None  # the API's default: the graph only
