"""The bundle's on-device runner, exercised here with ONNX Runtime standing in for TensorRT
(`--engine onnxruntime`): the same path a board takes (read the bundle and its reference, load,
feed, verify every output, time, measure memory, write result.json), then `deploycc device
import` back into the build. Only the calls into TensorRT and CUDA are not exercised here."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.device.bundle import binding_dtype
from deploycc.options import BuildOptions, LegalizeOptions
from tests.cli.test_cli import run as run_cli

RUNNER = Path(__file__).parents[2] / "deploycc" / "device" / "run_on_device.py"


def _model(path: Path) -> Path:
    """A float input and an int64 one (token ids): the int64 travels as INT32 to TensorRT 8.5."""
    weights = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2) / 8, "w")
    table = numpy_helper.from_array(np.linspace(-1, 1, 20, dtype=np.float32).reshape(10, 2), "table")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Add", ["h", "e"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                                           helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                              [weights, table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("device")
    report = api.build(_model(folder / "m.onnx"), "jetson-xavier", folder / "out",
                       BuildOptions(legalize=LegalizeOptions(batch=1), bench=False))
    assert report.status == "pending-on-device", report.summary
    return folder / "out"


def _copy(built: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(built, out)
    return out


def _run_on_device(bundle: Path) -> tuple[int, dict]:
    child = subprocess.run([sys.executable, str(bundle / "run_on_device.py"), "--engine", "onnxruntime",
                            "--iterations", "5", "--warmup-s", "0"],
                           capture_output=True, text=True, timeout=120)
    return child.returncode, json.loads((bundle / "result.json").read_text())


def test_the_bundle_carries_reference_data_in_the_engine_binding_dtypes(built: Path) -> None:
    index = json.loads((built / "bundle" / "reference" / "reference.json").read_text())
    dtypes = {entry["name"]: entry["dtype"] for entry in index["inputs"]}
    assert dtypes == {"x": "float32", "ids": "int32"}  # TensorRT 8.5 binds INT64 as INT32
    entry = next(e for e in index["inputs"] if e["name"] == "ids")
    raw = (built / "bundle" / "reference" / entry["file"]).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == entry["sha256"]
    assert np.frombuffer(raw, "<i4").shape == (1,)  # what trtexec --loadInputs=ids:FILE reads
    assert index["tolerances"] == {"atol": 0.01, "rtol": 0.01, "min_cosine": 0.999,  # fp16 on Xavier
                                   "mismatch_share": 0.0}
    assert (built / "bundle" / "run_on_device.py").read_text() == RUNNER.read_text()


def test_the_runner_verifies_and_times_and_the_result_comes_back(built: Path, tmp_path: Path) -> None:
    out = _copy(built, tmp_path)
    code, result = _run_on_device(out / "bundle")
    assert code == 0, result
    assert result["status"] == "verified-on-device" and result["engine"] == "onnxruntime"
    assert [row["name"] for row in result["outputs"]] == ["y"] and result["outputs"][0]["passed"]
    assert result["latency"]["iterations"] == 5 and result["memory"]["peak_rss_kb"] > 0
    imported = run_cli("device", "import", str(out), str(out / "bundle" / "result.json"))
    assert imported.returncode == 0, imported.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "verified-on-device" and report["device"]["latency"]["iterations"] == 5
    assert json.loads((out / "manifest.json").read_text())["status"] == "verified-on-device"
    markdown = (out / "report.md").read_text()
    assert "**Status: verified-on-device**" in markdown and markdown.count("## On the device") == 1


def test_a_wrong_reference_value_fails_on_the_device(built: Path, tmp_path: Path) -> None:
    out = _copy(built, tmp_path)
    reference = out / "bundle" / "reference"
    index = json.loads((reference / "reference.json").read_text())
    entry = index["outputs"][0]
    values = np.frombuffer((reference / entry["file"]).read_bytes(), "<f4").copy()
    values[0] += 1.0  # one value off by far more than fp16's tolerance
    (reference / entry["file"]).write_bytes(values.tobytes())
    entry["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
    (reference / "reference.json").write_text(json.dumps(index))
    code, result = _run_on_device(out / "bundle")
    assert code == 1 and result["status"] == "failed-on-device" and result["stage"] == "verify"
    assert "output 'y'" in result["reason"]
    imported = run_cli("device", "import", str(out), str(out / "bundle" / "result.json"))
    assert imported.returncode == 1
    assert json.loads((out / "report.json").read_text())["status"] == "failed-on-device"


def test_a_result_from_another_bundle_or_truncated_is_refused_and_nothing_changes(built: Path,
                                                                                   tmp_path: Path) -> None:
    out = _copy(built, tmp_path)
    code, result = _run_on_device(out / "bundle")
    assert code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    other = dict(result, model_sha256="0" * 64)
    (tmp_path / "other.json").write_text(json.dumps(other))
    (tmp_path / "cut.json").write_text((out / "bundle" / "result.json").read_text()[:80])
    for name in ("other.json", "cut.json", "missing.json"):
        refused = run_cli("device", "import", str(out), str(tmp_path / name))
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_an_unreadable_bundle_is_exit_2_with_a_result_saying_why(built: Path, tmp_path: Path) -> None:
    out = _copy(built, tmp_path)
    (out / "bundle" / "reference" / "reference.json").unlink()
    code, result = _run_on_device(out / "bundle")
    assert code == 2 and result["status"] == "failed-on-device" and "unreadable bundle" in result["reason"]


def test_binding_dtypes_follow_the_tensorrt_release() -> None:
    assert binding_dtype(np.dtype(np.int64), "8.2.1") == np.int32
    assert binding_dtype(np.dtype(np.int64), "10.3") == np.int64
    assert binding_dtype(np.dtype(np.float64), "10.3") == np.float32
    assert binding_dtype(np.dtype(np.bool_), "8.5.2") == np.bool_


def test_the_runner_keeps_to_python_3_6() -> None:
    vermin = Path(sys.executable).with_name("vermin")
    if not vermin.exists():
        pytest.skip("vermin is not installed (pip install -e '.[dev]')")
    checked = subprocess.run([str(vermin), "--target=3.6-", "--no-tips", "--violations", str(RUNNER)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _runner_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_on_device", RUNNER)
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner


def test_the_runners_comparison_is_deploycc_s() -> None:
    """The runner carries its own copy of the comparison (it cannot import deploycc on the board):
    on the same arrays it must reach deploycc's verdicts."""
    from deploycc.verify.compare import compare

    runner = _runner_module()
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((4, 50)).astype(np.float32)
    cases = [expected + 1e-4, expected + 5e-2, -expected, np.where(expected > 2, np.nan, expected),
             expected[:, :10], np.zeros_like(expected)]
    few = expected.copy()
    few[0, :1] += 1.0  # 1 of 200 elements far off: within int8's share, beyond fp32's
    for actual in [*cases, few]:
        for share in (0.0, 0.01):
            ours = compare("y", expected, actual, atol=1e-2, rtol=1e-2, min_cosine=0.99, mismatch_share=share)
            theirs = runner.compare("y", expected, actual, 1e-2, 1e-2, 0.99, share)
            assert theirs["passed"] == ours.passed, (actual[:1, :4], share, theirs, ours)
    assert compare("y", expected, few, atol=1e-2, rtol=1e-2, mismatch_share=0.01).passed
    assert not compare("y", expected, few, atol=1e-2, rtol=1e-2).passed


def test_the_runners_generation_steps_are_deploycc_s() -> None:
    """The runner times a decoder's generation with its own copy of a step's inputs (it cannot
    import deploycc on the board), at the host bench's prompt lengths: the same feeds, dtypes
    included, as verify/generation.py's step_feeds, for a prompt and for a step on a cache."""
    from deploycc.bench.generative import PROMPT_LENGTHS
    from deploycc.graph.decoder import CacheEntry, DecoderSignature
    from deploycc.verify.generation import step_feeds

    runner = _runner_module()
    assert runner.GENERATION_PROMPTS == PROMPT_LENGTHS
    cache = (CacheEntry(0, "key", "past.0.key", "present.0.key", 2),)
    signature = DecoderSignature("input_ids", "logits", cache, attention_mask="attention_mask",
                                 position_ids="position_ids")
    decoder = {"input_ids": "input_ids", "logits": "logits", "attention_mask": "attention_mask",
               "position_ids": "position_ids", "cache": [{"past": "past.0.key", "present": "present.0.key",
                                                          "axis": 2}]}
    reference = {"input_ids": np.zeros((1, 4), np.int32), "attention_mask": np.zeros((1, 4), np.int32),
                 "position_ids": np.zeros((1, 4), np.int32)}  # TensorRT 8.x binds INT64 as INT32
    dtypes = {name: array.dtype for name, array in reference.items()}
    for tokens, past_length in ((np.array([[5, 6, 7]]), 0), (np.array([[9]]), 3)):
        past = {"past.0.key": np.ones((1, 2, past_length, 8), np.float32)}
        ours = step_feeds(signature, tokens.astype(np.int32), past, past_length, dtypes)
        theirs = runner._step_feeds(decoder, reference, tokens, past, past_length)
        assert ours.keys() == theirs.keys()
        for name, array in ours.items():
            assert theirs[name].dtype == array.dtype and np.array_equal(theirs[name], array), name


def test_the_result_schema_is_spelled_alike_on_the_board_and_the_host() -> None:
    """result.json is read by the host (records/device.py) and written by the runner, which cannot
    import deploycc: the two spellings of its schema must agree."""
    from deploycc.records.device import REQUIRED, RESULT_SCHEMA
    from deploycc.taxonomy import DEVICE_STAGES, BuildStatus

    runner = _runner_module()
    assert runner.RESULT_SCHEMA == RESULT_SCHEMA
    assert (runner.VERIFIED, runner.FAILED) == (BuildStatus.VERIFIED_ON_DEVICE, BuildStatus.FAILED_ON_DEVICE)
    assert runner.STAGES == tuple(DEVICE_STAGES)
    assert set(runner.RESULT_KEYS) | {"model_sha256"} == set(REQUIRED)


def test_the_runners_engines_are_spelled_alike_on_the_board_and_the_host(tmp_path: Path) -> None:
    """`device run --engine` and `audit --device-engine` offer the runner's engines; without one the
    runner takes the bundle's own, the board's engine (TensorRT) where the bundle names none."""
    from deploycc.device import BOARD_ENGINE, GPU_ENGINE, RUNNER_ENGINES

    runner = _runner_module()
    assert set(RUNNER_ENGINES) == set(runner.ENGINES)
    assert 'parser.add_argument("--engine", choices=sorted(ENGINES), default=None,' in RUNNER.read_text()
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": 1, "settings": {}}))
    assert runner.bundle_engine(str(tmp_path)) == BOARD_ENGINE
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": 1, "settings": {}, "engine": GPU_ENGINE}))
    assert runner.bundle_engine(str(tmp_path)) == GPU_ENGINE
    assert runner.bundle_engine(str(tmp_path / "absent")) == BOARD_ENGINE


def test_the_runner_holds_its_result_to_the_schema(built: Path, tmp_path: Path) -> None:
    """What the runner writes passes its own check; what would break the host's reading does not."""
    runner = _runner_module()
    code, result = _run_on_device(_copy(built, tmp_path) / "bundle")
    assert code == 0 and runner.check_result(result) == []
    unreadable = {"schema": 1, "engine": "tensorrt", "status": "failed-on-device", "stage": "read"}
    assert runner.check_result(unreadable) == []  # the model was never read: no sha256 to give
    for broken in ({**result, "status": "verified"}, {**result, "stage": "device"},
                   {**result, "schema": 2}, {**result, "stage": "verify"},
                   {key: value for key, value in result.items() if key != "model_sha256"}):
        assert runner.check_result(broken), broken


def test_tegrastats_lines_from_the_board_are_summarised_on_import(built: Path, tmp_path: Path) -> None:
    """The runner keeps tegrastats' raw lines (sampled while timing, on a Jetson); the host reads
    them. Two verbatim Nano lines (tests/backends/test_device_logs.py cites them)."""
    from tests.backends.test_device_logs import NANO_JP4

    out = _copy(built, tmp_path)
    code, result = _run_on_device(out / "bundle")
    assert code == 0 and result["tegrastats"] is None  # no tegrastats on this machine
    busy = NANO_JP4.replace("GR3D_FREQ 0%@76", "GR3D_FREQ 90%@921")
    result.update(tegrastats=[NANO_JP4, busy], power_mode="NV Power Mode: MAXN",
                  clocks={"cpu_locked": True, "gpu_locked": False, "gpu_mhz": 76.8, "jetson_clocks": False})
    (tmp_path / "board.json").write_text(json.dumps(result))
    assert run_cli("device", "import", str(out), str(tmp_path / "board.json")).returncode == 0
    device = json.loads((out / "manifest.json").read_text())["device"]
    assert device["tegrastats_summary"]["gr3d_mean_percent"] == 45.0
    markdown = (out / "report.md").read_text()
    assert "tegrastats (2 samples, NV Power Mode: MAXN)" in markdown
    assert "Clocks not locked" in markdown and "GPU at 76.8 MHz" in markdown


def _xavier_sysfs(root: Path, *, cpu_min: int, gpu_min: int) -> None:
    """The files jetson_clocks writes, laid out as on an AGX Xavier (JetPack 5): 8 Carmel cores,
    the Volta GPU's devfreq node 17000000.gv11b; frequencies in kHz (CPU) and Hz (GPU)."""
    for cpu in range(8):
        folder = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_min_freq").write_text(f"{cpu_min}\n")
        (folder / "scaling_max_freq").write_text("2265600\n")
    gpu = root / "class" / "devfreq" / "17000000.gv11b"
    gpu.mkdir(parents=True)
    (gpu / "min_freq").write_text(f"{gpu_min}\n")
    (gpu / "max_freq").write_text("1377000000\n")
    (gpu / "cur_freq").write_text(f"{gpu_min}\n")
    (root / "class" / "devfreq" / "2c00000.emc").mkdir()  # not the GPU: ignored


def test_the_runner_tells_whether_jetson_clocks_locked_the_clocks(tmp_path: Path) -> None:
    runner = _runner_module()
    _xavier_sysfs(tmp_path / "locked", cpu_min=2265600, gpu_min=1377000000)
    assert runner.clock_state(str(tmp_path / "locked")) == {
        "cpu_locked": True, "gpu_locked": True, "gpu_mhz": 1377.0, "jetson_clocks": True}
    _xavier_sysfs(tmp_path / "dvfs", cpu_min=115200, gpu_min=114750000)
    state = runner.clock_state(str(tmp_path / "dvfs"))
    assert state["jetson_clocks"] is False and state["gpu_mhz"] == 114.8
    # off Jetson (no GPU devfreq node): unknown, not "unlocked"
    assert runner.clock_state(str(tmp_path / "empty"))["jetson_clocks"] is None


def test_a_bundle_newer_than_the_runner_is_refused(built: Path, tmp_path: Path) -> None:
    out = _copy(built, tmp_path)
    document = json.loads((out / "bundle" / "bundle.json").read_text())
    assert document["schema"] == 1
    (out / "bundle" / "bundle.json").write_text(json.dumps(dict(document, schema=99)))
    code, result = _run_on_device(out / "bundle")
    assert code == 2 and "schema 99 is newer" in result["reason"]


def _trtexec_output(names_and_arrays: dict[str, np.ndarray]) -> str:
    """trtexec's --exportOutput file as exportJSONOutput writes it (sampleReporting.cpp, 8.2.1 to
    10.0.1): dims joined by 'x', values by ', ', floats at the stream's default 6 digits."""
    parts = []
    for name, array in names_and_arrays.items():
        values = ", ".join(f"{v:g}" for v in array.reshape(-1))
        dims = "x".join(str(d) for d in array.shape)
        parts.append(f'{{ "name" : "{name}"\n  , "dimensions" : "{dims}"\n'
                     f'  , "values" : [ {values} ]\n  }}\n')
    return "[\n  " + ", ".join(parts) + "]\n"


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_a_trtexec_run_folder_is_judged_on_import(built: Path, tmp_path: Path, shift: float) -> None:
    """run_on_device.sh leaves trtexec's outputs and log in the bundle; the host judges them."""
    from tests.backends.test_device_logs import SUMMARY_THREE_PERCENTILES

    out = _copy(built, tmp_path)
    bundle = out / "bundle"
    script = (bundle / "run_on_device.sh").read_text()
    assert "--loadInputs=x:reference/inputs/000.bin,ids:reference/inputs/001.bin" in script
    assert "--shapes=x:1x4,ids:1" in script and "--buildOnly" not in script and "--exportOutput=" in script
    for name in ("run_on_device.sh", "trtexec.sh"):  # both parse as POSIX sh
        assert subprocess.run(["sh", "-n", str(bundle / name)]).returncode == 0, name
    index = json.loads((bundle / "reference" / "reference.json").read_text())
    entry = index["outputs"][0]
    expected = np.fromfile(bundle / "reference" / entry["file"], "<f4").reshape(entry["shape"])
    (bundle / "trtexec-output.json").write_text(_trtexec_output({"y": expected + np.float32(shift)}))
    (bundle / "trtexec.log").write_text("[I] Engine built.\n" + SUMMARY_THREE_PERCENTILES)
    imported = run_cli("device", "import", str(out), str(bundle))
    report = json.loads((out / "report.json").read_text())
    if shift == 0.0:
        assert imported.returncode == 0, imported.stderr
        assert report["status"] == "verified-on-device" and report["device"]["latency"]["p99_ms"] == 4.32874
    else:
        assert imported.returncode == 1 and report["status"] == "failed-on-device"
        assert report["device"]["stage"] == "verify"


def test_an_nvml_sample_in_the_result_reaches_the_report(built: Path, tmp_path: Path) -> None:
    """On a GPU box the runner samples NVML before and after timing (none here: no GPU). The
    samples below are made up, in the shape `nvml_sample` returns (pinned by the test after this
    one where NVML starts): this tests the import and the report, not the sampling."""
    out = _copy(built, tmp_path)
    code, result = _run_on_device(out / "bundle")
    assert code == 0 and result["nvml"] is None
    result["nvml"] = {"before": {"gpu_memory_used_kb": 1000, "power_mw": 60000},  # made up
                      "after": {"gpu_memory_used_kb": 51000, "power_mw": 180000}}
    (tmp_path / "gpu.json").write_text(json.dumps(result))
    assert run_cli("device", "import", str(out), str(tmp_path / "gpu.json")).returncode == 0
    text = (out / "report.md").read_text()
    assert "GPU memory 1000 kB before timing, 51000 kB after; power 180000 mW" in text


def test_nvml_sample_is_none_where_nvml_cannot_start_and_a_sample_where_it_can() -> None:
    """The runner's own NVML sampling, on this machine's real NVML (nvidia-ml-py is in the dev
    extras): without a GPU or its driver nvmlInit fails, and the documented answer is None."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install -e '.[dev]')")
    runner = _runner_module()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:  # here: "NVML Shared Library Not Found"
        assert runner.nvml_sample() is None, error
    else:  # a discrete GPU: the shape the report reads
        pynvml.nvmlShutdown()
        sample = runner.nvml_sample()
        assert sample is not None and set(sample) == {"gpu_memory_used_kb", "power_mw"}, sample
        assert sample["gpu_memory_used_kb"] > 0


_SAMPLE_IN_A_BARE_PYTHON = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("run_on_device", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
print(json.dumps({"pynvml": importlib.util.find_spec("pynvml") is not None, "sample": runner.nvml_sample()}))
"""


def test_nvml_sample_is_none_where_the_boards_python_has_no_pynvml() -> None:
    """A Jetson's Python has no nvidia-ml-py: the runner in a child Python without site-packages."""
    child = subprocess.run([sys.executable, "-S", "-c", _SAMPLE_IN_A_BARE_PYTHON, str(RUNNER)],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {"pynvml": False, "sample": None}


def test_a_decoders_generation_is_timed_on_the_device_and_comes_back(tmp_path: Path) -> None:
    """A decoder's bundle carries its signature; the runner times its generation on the engine at
    the host bench's prompt lengths (time to first token, 32 single-token steps on the growing
    cache, the cache's bytes and their share of the board's memory), and a length past the
    model's positions (this one has 256) is refused with the reason and ends the list; tokens/s per
    watt comes from the input rail of the tegrastats lines taken meanwhile (a Xavier NX's,
    verbatim, put in their place here)."""
    from examples.make_models import kv_decoder
    from tests.backends.test_device_logs import XAVIER_JP5

    model = tmp_path / "decoder.onnx"
    onnx.save(kv_decoder(seed=1, layers=2), model)
    out = tmp_path / "out"
    report = api.build(model, "jetson-orin", out, BuildOptions(bench=False))
    assert report.status == "pending-on-device", report.summary
    index = json.loads((out / "bundle" / "reference" / "reference.json").read_text())
    decoder = index["decoder"]
    assert decoder["input_ids"] == "input_ids" and len(decoder["cache"]) == 4  # 2 layers, key and value
    code, result = _run_on_device(out / "bundle")
    assert code == 0, result
    first, refused = result["generation"]["prompts"]  # 128 ran; 512 is past the 256 positions
    assert "error" not in first and first["prompt_tokens"] == 128 and first["decode_steps"] == 32
    assert first["context_tokens"] == 128 + 32 and first["decode_tokens_per_s"] > 0
    # 2 layers x (key, value) x [1, 2 KV heads, 160 tokens, 16] float32
    assert first["kv_cache_bytes"] == 4 * 2 * 160 * 16 * 4
    share = round(first["kv_cache_bytes"] / (first["memory_total_kb"] * 1024), 6)
    assert first["kv_cache_share_of_memory"] == share
    assert refused["prompt_tokens"] == 512 and refused["error"] and "time_to_first_token_ms" not in refused
    first["tegrastats"] = [XAVIER_JP5, XAVIER_JP5.replace("VDD_IN 2763mW", "VDD_IN 3237mW")]
    (tmp_path / "board.json").write_text(json.dumps(result))
    assert run_cli("device", "import", str(out), str(tmp_path / "board.json")).returncode == 0
    imported = json.loads((out / "report.json").read_text())["device"]["generation"]["prompts"][0]
    assert imported["power_rail"] == "VDD_IN" and imported["power_mean_mw"] == 3000.0
    assert imported["tokens_per_s_per_watt"] == round(first["decode_tokens_per_s"] / 3.0, 4)
    markdown = (out / "report.md").read_text()
    assert "Generation on the device" in markdown and "| 512 | refused: " in markdown
