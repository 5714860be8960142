"""`deploycc build` on the real backends installed here (ONNX Runtime, OpenVINO) and the device
bundle for TensorRT targets: what lands in OUTDIR, verification, reproducibility, atomicity."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from deploycc import api
from deploycc.backends.tensorrt import bundle, fingerprint
from deploycc.errors import OptionError
from deploycc.options import BuildOptions, LegalizeOptions
from deploycc.records.shapes import ShapeProfile
from tests.conftest import REPO
from tests.pipeline.conftest import digest


def test_ort_build_leaves_a_verified_deployable_directory(cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "ort"
    report = api.build(cnn, "ort-cpu", out)
    assert report.status == "verified" and report.exit_code == 0, report.summary
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "model.legalized.onnx", "model.ort.onnx", "report.json", "report.md",
        "verify-inputs.npz"]
    assert report.artifact is not None and report.artifact.placement is not None
    counts = report.artifact.placement.counts
    assert list(counts) == ["CPUExecutionProvider"] and counts["CPUExecutionProvider"] > 0
    # the artifact is a model ORT loads and that computes what the original does
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = onnx.load(cnn).graph.input[0].name
    expected = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    actual = ort.InferenceSession(str(out / "model.ort.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {name: x})[0]
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-4)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "verified" and manifest["build_hash"] == report.build_hash
    assert manifest["input"][0]["sha256"] == digest(cnn)
    assert manifest["outputs"]["model.ort.onnx"] == digest(out / "model.ort.onnx")
    assert manifest["artifact"]["settings"]["saved_optimization_level"] == "extended"
    loaded_at = manifest["artifact"]["settings"]["load"]["session_options"]["graph_optimization_level"]
    assert loaded_at == "ORT_ENABLE_ALL"
    assert {"onnx", "onnx-ir", "onnxscript", "onnxruntime", "openvino", "tensorrt"} <= \
        set(manifest["versions"])
    assert str(tmp_path) not in (out / "manifest.json").read_text()  # no absolute paths
    markdown = (out / "report.md").read_text()
    assert "**Status: verified**" in markdown and "## Verification" in markdown
    assert report.benchmark is not None and report.benchmark.p50_ms > 0


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu"])
def test_same_build_twice_is_byte_identical(cnn: Path, tmp_path: Path, target: str) -> None:
    first = api.build(cnn, target, tmp_path / "a", BuildOptions(bench=False))
    second = api.build(cnn, target, tmp_path / "b", BuildOptions(bench=False))
    assert first.status == second.status == "verified"
    assert first.build_hash == second.build_hash
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()
    for name in json.loads((tmp_path / "a" / "manifest.json").read_text())["outputs"]:
        assert digest(tmp_path / "a" / name) == digest(tmp_path / "b" / name), name


def test_openvino_ir_and_fp16_compression(cnn: Path, tmp_path: Path) -> None:
    fp32 = api.build(cnn, "openvino-cpu", tmp_path / "fp32", BuildOptions(precision="fp32", bench=False))
    fp16 = api.build(cnn, "openvino-cpu", tmp_path / "fp16", BuildOptions(precision="fp16", bench=False))
    assert fp32.status == fp16.status == "verified"
    assert "f16" not in (tmp_path / "fp32" / "model.xml").read_text()
    assert 'element_type="f16"' in (tmp_path / "fp16" / "model.xml").read_text()
    assert (tmp_path / "fp16" / "model.bin").stat().st_size < (tmp_path / "fp32" / "model.bin").stat().st_size
    assert fp16.verification is not None and fp16.verification.precision == "fp16"
    assert fp32.artifact is not None and fp32.artifact.settings["compile"]["PERFORMANCE_HINT"] == "LATENCY"
    assert fp32.artifact.placement is not None and set(fp32.artifact.placement.counts) == {"CPU"}


def test_ort_format_artifact(cnn: Path, tmp_path: Path) -> None:
    report = api.build(cnn, "ort-cpu", tmp_path / "o", BuildOptions(artifact_format="ort", bench=False))
    assert report.status == "verified"
    assert report.artifact is not None and report.artifact.files == ["model.ort"]
    assert (tmp_path / "o" / "model.ort").read_bytes()[4:8] == b"ORTM"  # the ORT flatbuffer identifier


def test_tensorrt_target_writes_a_device_bundle(encoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "xavier"
    options = BuildOptions(batch_range=(1, 4, 8), legalize=LegalizeOptions(shapes={"x": ["batch", 16, 64]}))
    report = api.build(encoder, "jetson-xavier", out, options)
    assert report.status == "pending-on-device" and report.exit_code == 0
    assert "pending on the device" in report.summary
    data = json.loads((out / "bundle" / "bundle.json").read_text())
    assert data["settings"]["precision"] == "fp16" and data["settings"]["tensorrt"] == "8.5.2"
    command = data["trtexec"]
    assert command[:2] == ["trtexec", "--onnx=model.onnx"]
    # 8.5: --memPoolSize with a bare MiB count (std::stod ignores a suffix), --buildOnly (no --skipInference)
    assert "--fp16" in command and "--memPoolSize=workspace:4096" in command and "--buildOnly" in command
    assert "--minShapes=x:1x16x64" in command and "--maxShapes=x:8x16x64" in command
    assert data["deploycc"] == "deploycc build bundle --engine-only --target jetson-xavier --jetpack 5.1.2"
    assert (out / "bundle" / "model.onnx").read_bytes() == (out / "model.legalized.onnx").read_bytes()
    assert (out / "bundle" / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()
    script = (out / "bundle" / "trtexec.sh").read_text()
    assert '"$TRTEXEC" --onnx=model.onnx' in script and "/usr/src/tensorrt/bin/trtexec" in script
    assert "pending on the device" in (out / "report.md").read_text()


def test_tensorrt_8_2_uses_the_old_workspace_flag(encoder: Path, tmp_path: Path) -> None:
    options = BuildOptions(legalize=LegalizeOptions(shapes={"x": [1, 16, 64]}), bench=False)
    report = api.build(encoder, "jetson-nano", tmp_path / "nano", options)
    assert report.status == "pending-on-device"
    command = json.loads((tmp_path / "nano" / "bundle" / "bundle.json").read_text())["trtexec"]
    assert any(flag.startswith("--workspace=") for flag in command) and "--buildOnly" in command
    assert not any(flag.startswith("--minShapes") for flag in command)  # static: no profile needed


def test_a_dynamic_export_builds_by_the_targets_shape_policy(encoder: Path, tmp_path: Path) -> None:
    """The headline command with nothing but the target: Jetson fixes the batch at 1 and gives the
    sequence a profile around its typical size; gpu-trt10 gives the batch a profile 1/8/32."""
    report = api.build(encoder, "jetson-xavier", tmp_path / "x", BuildOptions(bench=False))
    assert report.status == "pending-on-device", report.summary
    assert report.shapes is not None
    (x,) = report.shapes.inputs
    assert x.exported == ["batch", "seq", 64] and x.sample == [1, 128, 64]
    assert x.profile == ShapeProfile("x", [1, 64, 64], [1, 128, 64], [1, 256, 64])
    assert x.accepts == "1x[64..128..256]x64"
    trtexec = report.artifact.settings["trtexec"] if report.artifact else ""
    assert "--minShapes=x:1x64x64" in trtexec and "--maxShapes=x:1x256x64" in trtexec
    markdown = (tmp_path / "x" / "report.md").read_text()
    assert "1x[64..128..256]x64" in markdown and "--shape-range" in markdown
    server = api.build(encoder, "gpu-trt10", tmp_path / "g", BuildOptions(bench=False))
    assert server.shapes is not None and server.shapes.inputs[0].profile == ShapeProfile(
        "x", [1, 64, 64], [8, 128, 64], [32, 256, 64])
    assert server.shapes.inputs[0].sample == [2, 128, 64]  # verified at a batch of 2: rows mixed show


def test_a_users_flags_win_over_the_policy(encoder: Path, tmp_path: Path) -> None:
    options = BuildOptions(bench=False, batch_range=(1, 4, 16),
                           legalize=LegalizeOptions(sample_shapes={"x": [2, 32, 64]}))
    report = api.build(encoder, "jetson-xavier", tmp_path / "x", options)
    assert report.shapes is not None and report.shapes.inputs[0].profile is not None
    assert report.shapes.inputs[0].profile.min[0] == 1 and report.shapes.inputs[0].profile.max[0] == 16
    assert report.legalize is not None and report.legalize.verification is not None
    assert report.legalize.verification.shapes == {"x": [2, 32, 64]}


def test_engine_only_needs_tensorrt_and_says_where_to_run(encoder: Path, tmp_path: Path) -> None:
    from deploycc.backends.base import BackendUnavailable

    options = BuildOptions(legalize=LegalizeOptions(shapes={"x": [1, 16, 64]}))
    api.build(encoder, "jetson-orin", tmp_path / "orin", options)
    with pytest.raises(BackendUnavailable, match="run this on the jetson-orin"):
        api.build(tmp_path / "orin" / "bundle", None, None, BuildOptions(engine_only=True))
    with pytest.raises(OptionError, match="not a device bundle"):
        api.build(tmp_path / "orin", None, None, BuildOptions(engine_only=True))


def test_fingerprints_say_what_differs(tmp_path: Path) -> None:
    built = {"tensorrt": "8.5.2.2", "compute_capability": "7.2", "l4t": "35.4.1"}
    assert fingerprint.mismatch(built, dict(built)) is None
    problem = fingerprint.mismatch(built, {"tensorrt": "8.6.2", "compute_capability": "8.7", "l4t": "36.3.0"})
    assert problem is not None and "tensorrt 8.5.2.2 (this machine: 8.6.2)" in problem
    assert "compute_capability 7.2 (this machine: 8.7)" in problem and "--engine-only" in problem
    release = tmp_path / "nv_tegra_release"
    release.write_text("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64\n")
    assert fingerprint.l4t_release(release) == "35.4.1"
    assert fingerprint.l4t_release(tmp_path / "absent") is None


def test_trtexec_command_for_dla(encoder: Path) -> None:
    from deploycc.backends.base import BuildRequest
    from deploycc.backends.tensorrt.options import TensorRTOptions
    from deploycc.targets.registry import resolve

    options = TensorRTOptions(dla_core=1, gpu_fallback=True)
    request = BuildRequest(model=encoder, outdir=encoder.parent, target=resolve("jetson-orin"),
                           precision="fp16", backend_options=options)
    command = bundle.trtexec_command(request)
    assert "--useDLACore=1" in command and "--allowGPUFallback" in command
    options.gpu_fallback = False
    assert "--allowGPUFallback" not in bundle.trtexec_command(request)


def test_a_per_position_scale_before_a_conv_is_rewritten_so_openvino_computes_it_right(
        tmp_path: Path, write_model) -> None:
    """OpenVINO 2026.4 folds a constant scale over H x W positions into the 3 x 3 Conv after it as
    if it were per channel (timm's CSATv2): check says so, legalize flattens the positions, and the
    engine then verifies against ORT without leaning on the backend's own result."""
    from tests.rules.test_arithmetic_extra import spatial_scale_model

    model = write_model(spatial_scale_model("Div"))
    verdict = api.check(model, ["openvino-cpu", "ort-cpu"]).targets
    assert [group.category for group in verdict[0].illegal] == ["wrong-result"], verdict[0].illegal
    assert verdict[1].legal
    report = api.build(model, "openvino-cpu", tmp_path / "ov", BuildOptions(bench=False))
    assert report.status == "verified" and report.verification is not None
    assert not report.verification.backend_bound, report.verification.caveat()
    assert max(o.max_abs_error for o in report.verification.outputs) < 1e-4


def test_failed_legalization_is_exit_1_with_a_report(tmp_path: Path, write_model) -> None:
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 13, "custom.ops" : 1]>
        g (float[2,4] x) => (float[2,4] y) { y = custom.ops.Mystery(x) }
    """)
    report = api.build(model, "openvino-cpu", tmp_path / "f")
    assert report.status == "failed" and report.stage == "legalize" and report.exit_code == 1
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["manifest.json", "report.json", "report.md"]
    assert "## Still illegal" in (tmp_path / "f" / "report.md").read_text()
    assert "check --explain" in report.next_step


def test_existing_outdir_is_refused_unless_forced(cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OptionError, match="already exists"):
        api.build(cnn, "ort-cpu", out)
    assert (out / "keep.txt").read_text() == "mine"
    report = api.build(cnn, "ort-cpu", out, BuildOptions(force=True, bench=False))
    assert report.status == "verified" and not (out / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _slow_model(path: Path) -> None:
    """A model whose build takes a few seconds: enough time to be interrupted."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, previous = [], [], "x"
    for i in range(120):
        # Sin keeps the signal alive over 120 layers: a chain that decays to zero has degenerate
        # outputs, and verification then asks for inputs instead of building.
        weight = rng.standard_normal((256, 256)).astype(np.float32) / 4
        inits.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Gelu", [f"m{i}"], [f"g{i}"]),
                  helper.make_node("Sin", [f"g{i}"], [f"s{i}"])]
        previous = f"s{i}"
    graph = helper.make_graph(nodes, "slow",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 256])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_build_leaves_nothing_and_the_next_run_succeeds(tmp_path: Path, sig: int) -> None:
    model = tmp_path / "in" / "slow.onnx"
    model.parent.mkdir()
    _slow_model(model)
    before = digest(model)
    out = tmp_path / "out" / "build"
    interrupted = 0
    for delay in (0.4, 1.5):  # early (loading, legalizing) and late (building, writing)
        command = [sys.executable, "-m", "deploycc.cli", "build", str(model), "-t", "jetson-xavier",
                   "-o", str(out), "--no-bench"]
        child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        child.send_signal(sig)
        _, stderr = child.communicate(timeout=120)
        if child.returncode == 0:  # it finished first (or a library held the signal): whole output
            assert {"manifest.json", "report.json", "report.md"} <= {p.name for p in out.iterdir()}
            shutil.rmtree(out)
            continue
        interrupted += 1
        # 130 once deploycc handles the signal; killed outright when it arrives before the
        # interpreter got that far (nothing was written then either)
        assert child.returncode in (130, -sig), (child.returncode, stderr)
        if out.exists():  # the signal came after the final rename: the output must be whole
            written = {p.name for p in out.iterdir()}
            assert {"manifest.json", "report.json", "report.md"} <= written, \
                f"partial output after {sig!r} at {delay} s: {sorted(written)}"
            shutil.rmtree(out)
        if sig != signal.SIGKILL:  # a killed process cannot clean its staging folder
            assert "Traceback" not in stderr and not list(out.parent.glob(".build.partial-*"))
        assert digest(model) == before and sorted(os.listdir(model.parent)) == ["slow.onnx"]
    assert interrupted, "the build finished before any signal: make the model slower"
    report = api.build(model, "jetson-xavier", out, BuildOptions(bench=False))
    assert report.status == "pending-on-device"
    assert not list(out.parent.glob(".build.partial-*")), "a killed build's staging folder was not cleaned"


def test_force_never_replaces_a_directory_holding_the_input(cnn: Path) -> None:
    folder = cnn.parent
    before = digest(cnn)
    with pytest.raises(OptionError, match="holds the input"):
        api.build(cnn, "ort-cpu", folder, BuildOptions(force=True))
    assert digest(cnn) == before


def _scatter_model(path: Path, *, indices_from_shape: bool) -> Path:
    """A ScatterND whose indices have no row. With `indices_from_shape` they are sliced to a length
    of x's dim 0 minus itself, known only at run time as exported: OpenVINO converts the model as it
    is, while folding with x's dims fixed leaves an empty constant, which OpenVINO 2026.4 reads as a
    scalar and refuses (Swin3D's folded mask; prune removes such a scatter, disabled below). Else
    the empty indices are initializers, which OpenVINO refuses as exported too."""
    from onnx import TensorProto, helper, numpy_helper

    rows = numpy_helper.from_array(np.zeros((3, 4, 3), np.int64), "rows")
    updates = numpy_helper.from_array(np.zeros((3, 4), np.float32), "updates")
    zero, one = (numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((0, "zero"), (1, "one")))
    if indices_from_shape:
        nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                 helper.make_node("Slice", ["shape", "zero", "one"], ["n"]),
                 helper.make_node("Sub", ["n", "n"], ["none"]),
                 helper.make_node("Slice", ["rows", "zero", "none"], ["indices"]),
                 helper.make_node("Slice", ["updates", "zero", "none"], ["values"])]
        initializers = [rows, updates, zero, one]
    else:
        nodes = []
        initializers = [numpy_helper.from_array(np.zeros((0, 4, 3), np.int64), "indices"),
                        numpy_helper.from_array(np.zeros((0, 4), np.float32), "values")]
    nodes += [helper.make_node("ScatterND", ["x", "indices", "values"], ["s"]),
              helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, 4])],
                              initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), path)
    return path


def test_a_backend_failing_on_deploycc_model_but_not_the_export_gets_the_export(tmp_path: Path) -> None:
    """Never worse than doing nothing, past legalize: OpenVINO refuses the model deploycc made
    (prune, which mends this, disabled) and converts the model as exported, so the build is that
    one, verified, and the report says deploycc failed (the audit counts such a cell apart)."""
    model = _scatter_model(tmp_path / "m.onnx", indices_from_shape=True)
    options = LegalizeOptions(shapes={"x": [2, 4, 4]}, disable_passes=("prune",))
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(legalize=options))
    assert report.status == "verified", report.summary
    assert report.original_on_backend is True
    assert any("runs the model as exported" in note for note in report.notes), report.notes
    kept = onnx.load(tmp_path / "out" / "model.legalized.onnx")
    assert [n.op_type for n in kept.graph.node].count("Shape") == 1  # not folded: the export's graph
    # with every pass, deploycc's model converts: the export is never asked for
    plain = api.build(model, "openvino-cpu", tmp_path / "plain", BuildOptions(
        legalize=LegalizeOptions(shapes={"x": [2, 4, 4]})))
    assert plain.status == "verified" and plain.original_on_backend is None, plain.summary


def test_a_backend_failing_on_the_export_too_is_not_called_deploycc_worse(tmp_path: Path) -> None:
    model = _scatter_model(tmp_path / "m.onnx", indices_from_shape=False)
    options = LegalizeOptions(shapes={"x": [2, 4, 4]}, disable_passes=("prune",))
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(legalize=options))
    assert report.status == "failed" and report.stage == "build", report.summary
    assert report.original_on_backend is False
