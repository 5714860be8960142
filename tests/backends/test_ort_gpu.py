"""onnxruntime-gpu targets (ort-cuda, ort-trt) on a host without their providers: the bundle, its
provider options, the one call that loads it (run here by the CPU build, the GPU options left
unread), the runner standing in, and ORT's profiling read back as placement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.options import BuildOptions
from deploycc.taxonomy import Precision
from tests.backends.test_device_runner import _runner_module
from tests.cli.test_cli import run as run_cli


def _model(path: Path) -> Path:
    """A dynamic batch through MatMul, Relu and Det (a node neither GPU provider has)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "square"], ["m"], name="to_square"),
             helper.make_node("Det", ["m"], ["d"], name="det"),
             helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid")]
    signature = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])]
    graph = helper.make_graph(nodes, "g", signature,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4])],
                              [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
                               numpy_helper.from_array(np.array([-1, 2, 2], np.int64), "square")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ort-gpu")
    report = api.build(_model(folder / "m.onnx"), "ort-trt", folder / "out")
    assert report.status == "pending-on-device", report.summary
    assert "ONNX Runtime session is pending" in report.summary
    assert "--engine onnxruntime-gpu" in report.next_step
    return folder / "out"


def test_the_bundle_carries_the_providers_with_caches_profiles_and_the_ep_context(built: Path) -> None:
    document = json.loads((built / "bundle" / "providers.json").read_text())
    names = [name for name, _ in document["providers"]]
    assert names == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    trt = document["providers"][0][1]
    assert trt["trt_engine_cache_enable"] and trt["trt_timing_cache_enable"]
    assert trt["trt_dump_ep_context_model"]
    assert trt["trt_fp16_enable"] is False  # ort-trt builds fp32 by default, as ORT does
    # the target's batch profile (1, 8, 32) as explicit shapes: no rebuild inside them
    assert (trt["trt_profile_min_shapes"], trt["trt_profile_opt_shapes"], trt["trt_profile_max_shapes"]) == \
        ("x:1x8", "x:8x8", "x:32x8")
    # as exported, Det has no TensorRT importer nor CUDA kernel: three engines' worth of borders ...
    original = api.check(built.parent / "m.onnx", ["ort-trt"]).targets[0].placement
    assert {o.node: o.provider for o in original.off_primary} == {"det": "CPUExecutionProvider"}
    assert original.memcpy == 2 and original.subgraphs == 2
    # ... legalized (the 2x2 determinant written out), the whole graph is one TensorRT subgraph
    predicted = json.loads((built / "bundle" / "placement-predicted.json").read_text())
    assert predicted["off_primary"] == {} and predicted["memcpy"] == 0 and predicted["subgraphs"] == 1


def test_the_cpu_build_of_onnxruntime_loads_the_bundle_with_the_gpu_options_unread(built: Path) -> None:
    runner = _runner_module()
    session, missing = runner.ort_gpu_session(str(built / "bundle"))
    assert missing == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    import onnxruntime as ort

    original = ort.InferenceSession(str(built.parent / "m.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], original.run(None, {"x": x})[0], rtol=1e-5)


def test_the_runner_stands_in_reads_placement_and_the_import_shows_it(built: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(built, out)
    # no --engine: the runner takes the bundle's own (as `device run` and a Ray cell call it)
    child = subprocess.run([sys.executable, str(out / "bundle" / "run_on_device.py"), "--iterations", "3",
                            "--warmup-s", "0"], capture_output=True, text=True, timeout=120)
    result = json.loads((out / "bundle" / "result.json").read_text())
    assert child.returncode == 0, result
    assert result["engine"] == "onnxruntime-gpu" and result["status"] == "verified-on-device"
    placement = result["placement"]
    assert placement["counts"] == {"CPUExecutionProvider": len(placement["nodes"])}
    assert placement["missing_providers"] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    # without the GPU providers every node the prediction put on TensorRT ran on the CPU: said so
    assert placement["differs"] and set(placement["differs"].values()) == {
        "TensorrtExecutionProvider -> CPUExecutionProvider"}
    imported = run_cli("device", "import", str(out), str(out / "bundle" / "result.json"))
    assert imported.returncode == 0, imported.stderr
    assert "Placement measured (ORT profiling): CPUExecutionProvider" in (out / "report.md").read_text()


def test_the_placement_reader_takes_ort_s_profiling_events() -> None:
    # Node events as ONNX Runtime writes them (quoted from microsoft/onnxruntime issue #5617)
    events = [
        {"cat": "Node", "pid": 8800, "tid": 10988, "dur": 0, "ts": 331013, "ph": "X",
         "name": "Add_27_fence_before", "args": {"op_name": "Add"}},
        {"cat": "Node", "pid": 8800, "tid": 10988, "dur": 42, "ts": 331014, "ph": "X",
         "name": "Add_27_kernel_time",
         "args": {"op_name": "Add", "provider": "CPUExecutionProvider", "graph_index": "25",
                  "parameter_size": "0", "exec_plan_index": "25", "activation_size": "1548800",
                  "output_size": "774400"}},
        {"cat": "Node", "pid": 8800, "tid": 10988, "dur": 80, "ts": 331063, "ph": "X",
         "name": "PRelu_28_kernel_time", "args": {"op_name": "PRelu", "provider": "CPUExecutionProvider",
                                                  "graph_index": "26", "parameter_size": "4"}},
        {"cat": "Session", "pid": 8800, "tid": 10988, "dur": 30779, "ts": 13, "ph": "X",
         "name": "model_loading_uri", "args": {}},
    ]
    runner = _runner_module()
    counts, nodes = runner.placement_from_profile(events)
    assert counts == {"CPUExecutionProvider": 2} and nodes == {"Add_27": "CPUExecutionProvider",
                                                               "PRelu_28": "CPUExecutionProvider"}
    predicted = {"primary": "CUDAExecutionProvider", "off_primary": {"PRelu_28": "CPUExecutionProvider"}}
    assert runner.placement_differences(predicted, nodes) == {
        "Add_27": "CUDAExecutionProvider -> CPUExecutionProvider"}


def test_ort_cuda_fp16_converts_the_model_and_puts_cuda_first(tmp_path: Path) -> None:
    report = api.build(_model(tmp_path / "m.onnx"), "ort-cuda", tmp_path / "out",
                       BuildOptions(precision=Precision.FP16))
    assert report.status == "pending-on-device"
    document = json.loads((tmp_path / "out" / "bundle" / "providers.json").read_text())
    assert [name for name, _ in document["providers"]] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    bundled = onnx.load(str(tmp_path / "out" / "bundle" / "model.onnx"))
    weights = {t.name: t.data_type for t in bundled.graph.initializer}
    assert weights["W"] == TensorProto.FLOAT16 and report.half is not None


def test_a_fragment_not_worth_its_launch_sets_the_tensorrt_min_subgraph_size(tmp_path: Path) -> None:
    """A convolution worth an engine, then Unique (no TensorRT importer, no CUDA kernel: the CPU),
    then one Neg on its output: an engine for one cheap node costs more than it computes."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Unique", ["r"], ["u"], name="unique"),
             helper.make_node("Neg", ["u"], ["y"], name="neg")]
    image = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])
    graph = helper.make_graph(nodes, "g", [image],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 16, 32, 32])],
                              [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32),
                                                       "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    placement = api.check(tmp_path / "m.onnx", ["ort-trt"]).targets[0].placement
    assert placement.subgraph_sizes == [2, 1]
    report = api.build(tmp_path / "m.onnx", "ort-trt", tmp_path / "out")
    trt = json.loads((tmp_path / "out" / "bundle" / "providers.json").read_text())["providers"][0][1]
    assert trt["trt_min_subgraph_size"] == 2  # the Neg stays with CUDA; the convolution's engine is kept
    assert any("not worth a launch" in note for note in report.notes)


def test_a_jetson_s_ort_wheel_gets_only_the_options_its_release_reads(tmp_path: Path) -> None:
    """jetson-xavier-ort at JetPack 4.6.1 is ORT 1.11 (built against TensorRT 8.2): no explicit
    profiles, timing cache nor EPContext model, which its Python binding would refuse by name."""
    # a batch range asked for (the board's own policy fixes the batch at 1: no profile to give)
    report = api.build(_model(tmp_path / "m.onnx"), "jetson-xavier-ort", tmp_path / "out",
                       BuildOptions(batch_range=(1, 2, 4)), jetpack="4.6.1")
    assert report.status == "pending-on-device", report.summary
    document = json.loads((tmp_path / "out" / "bundle" / "providers.json").read_text())
    trt = document["providers"][0][1]
    assert trt["trt_engine_cache_enable"] and "trt_fp16_enable" in trt
    assert not {"trt_profile_min_shapes", "trt_timing_cache_enable", "trt_dump_ep_context_model"} & set(trt)
    assert report.artifact is not None and any(
        "predates trt_profile_min_shapes" in note and "rebuilt" in note for note in report.artifact.notes)
    settings = json.loads((tmp_path / "out" / "bundle" / "bundle.json").read_text())["settings"]
    assert (settings["onnxruntime"], settings["jetpack"]) == ("1.11", "4.6.1")
    assert settings["tensorrt"].startswith("8.2")  # as the JetPack map states it
    assert document["profiles"] == [{"input": "x", "min": [1, 8], "opt": [2, 8], "max": [4, 8]}]
    # the Orin at JetPack 6.0 (ORT 1.17) reads them all
    newer = api.build(tmp_path / "m.onnx", "jetson-orin-ort", tmp_path / "out2",
                      BuildOptions(batch_range=(1, 2, 4)))
    trt = json.loads((tmp_path / "out2" / "bundle" / "providers.json").read_text())["providers"][0][1]
    assert trt["trt_profile_opt_shapes"] == "x:2x8" and trt["trt_timing_cache_enable"]
    assert trt["trt_dump_ep_context_model"] and newer.artifact is not None
    assert not any("predates" in note for note in newer.artifact.notes)


def test_dynamic_quantization_the_cuda_provider_lacks_becomes_float(tmp_path: Path) -> None:
    """quantize_dynamic writes MatMulInteger on uint8 activations; the CUDA provider has it for
    int8 ones only, so ORT would run it on the CPU between two Memcpy. The whole pattern is written
    as the float arithmetic it stands for, and the graph stays on CUDA."""
    from onnxruntime.quantization import quantize_dynamic

    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Tanh", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    weights = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w")
    graph = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "f.onnx")
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"))
    exported = api.check(tmp_path / "q.onnx", ["ort-cuda"]).targets[0].placement
    assert exported is not None and {o.op for o in exported.off_primary} == {"MatMulInteger"}
    report = api.legalize(tmp_path / "q.onnx", "ort-cuda", tmp_path / "q.cuda.onnx")
    assert report.success and report.verification is not None and report.verification.passed
    assert "dynamic-quantization-to-float" in {r.rule for r in report.rewrites}
    after = api.check(tmp_path / "q.cuda.onnx", ["ort-cuda"]).targets[0].placement
    assert after is not None and after.cpu_nodes == 0 and after.memcpy == 0
