"""The CLI: exit codes, one-line errors without tracebacks, JSON identical to the API's."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import deploycc
from tests.conftest import REPO

GOOD = """
<ir_version: 10, opset_import: ["" : 20]>
g (float[N,8] x) => (float[N,8] y) { y = Gelu(x) }
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploycc.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=REPO)


def test_check_exit_codes(write_model):
    path = str(write_model(GOOD))
    assert run("check", path, "-t", "ort-cpu").returncode == 0
    assert run("check", path, "-t", "jetson-xavier").returncode == 1


def test_json_output_is_the_api_result(write_model):
    path = str(write_model(GOOD))
    out = run("check", path, "-t", "jetson-xavier", "-t", "ort-cpu", "--json")
    returned = deploycc.check(path, ["jetson-xavier", "ort-cpu"], precision="target").to_dict()
    printed = json.loads(out.stdout)
    for data in (printed, returned):  # the Xavier builds fp16: the analysis ran, and took its own time
        data["half"].pop("seconds")
    assert printed == returned
    out = run("inspect", path, "--json")
    assert json.loads(out.stdout) == deploycc.inspect(path).to_dict()
    out = run("targets", "--json")
    assert json.loads(out.stdout) == deploycc.list_targets().to_dict()
    out = run("targets", "show", "jetson-xavier", "--json")
    assert json.loads(out.stdout)["spec_hash"] == deploycc.get_target("jetson-xavier").spec_hash


def test_tables_for_people(write_model):
    path = str(write_model(GOOD))
    out = run("check", path, "-t", "jetson-xavier", "-t", "ort-cpu")
    assert "Gelu" in out.stdout and "verdict" in out.stdout
    assert "ort-cpu" in run("targets").stdout
    shown = run("targets", "show", "xavier", "--jetpack", "4.6.1")
    assert "8.2.1" in shown.stdout and "32.7.1" in shown.stdout


def _bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    good = tmp_path / "good.onnx"
    onnx.save(onnx.parser.parse_model(GOOD), good)
    zero = tmp_path / "zero.onnx"
    zero.write_bytes(b"")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[:40])
    noise = tmp_path / "noise.onnx"
    noise.write_bytes(random.Random(0).randbytes(4096))  # seeded: the same bytes every run
    not_a_model = tmp_path / "graph.onnx"
    not_a_model.write_bytes(onnx.parser.parse_graph("g (float x) => (float y) { y = Relu(x) }")
                            .SerializeToString())
    unchecked = onnx.parser.parse_model(GOOD)
    unchecked.graph.node[0].input[0] = "nowhere"
    invalid = tmp_path / "invalid.onnx"
    invalid.write_bytes(unchecked.SerializeToString())
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("name = ")
    return {
        "missing file": ["check", str(tmp_path / "absent.onnx")],
        "directory": ["inspect", str(tmp_path)],
        "zero bytes": ["check", str(zero)],
        "truncated": ["inspect", str(truncated)],
        "random bytes": ["check", str(noise)],
        "not a model": ["check", str(not_a_model)],
        "fails the checker": ["check", str(invalid)],
        "unknown target": ["check", str(good), "-t", "jetson-xaviar"],
        "malformed target toml": ["check", str(good), "-t", str(bad_toml)],
        "unknown option": ["check", str(good), "--frobnicate"],
        "unknown jetpack": ["targets", "show", "jetson-nano", "--jetpack", "9.9"],
    }


def test_bad_input_gets_one_line_and_exit_2(tmp_path: Path):
    messages = set()
    for label, args in _bad_inputs(tmp_path).items():
        result = run(*args)
        assert result.returncode == 2, (label, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (label, result.stderr)
        assert lines[0].startswith("deploycc: error: "), (label, lines[0])
        assert "Traceback" not in result.stderr
        messages.add(lines[0])
    assert len(messages) == len(_bad_inputs(tmp_path))  # each names its own problem
    assert any("did you mean 'jetson-xavier'" in m for m in messages)


def test_debug_shows_the_traceback(tmp_path: Path):
    result = run("--debug", "check", str(tmp_path / "absent.onnx"))
    assert result.returncode != 0
    assert "Traceback" in result.stderr


@pytest.mark.parametrize("argv", [["-c", "import deploycc"],
                                  ["-m", "deploycc.cli", "--help"],
                                  ["-m", "deploycc.cli", "targets"]])
def test_no_backend_is_imported_by_import_or_help(argv: list[str]):
    code = (
        "import sys, atexit\n"
        "def report():\n"
        "    heavy = [m for m in ('onnxruntime', 'openvino', 'tensorrt') if m in sys.modules]\n"
        "    sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
        "atexit.register(report)\n"
    )
    if argv[0] == "-c":
        code += argv[1] + "\n"
    else:
        code += (f"sys.argv = ['deploycc', *{argv[2:]!r}]\n"
                 "from deploycc.cli.main import main\n"
                 "try:\n    main()\nexcept SystemExit:\n    pass\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert "HEAVY=\n" in result.stderr, result.stderr


def test_output_in_a_pipe_is_not_wrapped(tmp_path: Path) -> None:
    """A CI log or `| tee` must keep each line whole, so the commands deploycc prints can be
    copied: the written path of a long output name stays on its line."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    out = tmp_path / ("a_rather_long_folder_name_for_the_output_of_this_build" * 2) / "legal.onnx"
    result = run("legalize", str(model), "-t", "ort-cpu", "-o", str(out), env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert any(line.endswith(f"written to {out}") for line in result.stdout.splitlines()), result.stdout


def test_build_partition_and_run_the_chain(tmp_path: Path):
    """A model with an ai.onnx.ml op in the middle: `build --partition` on OpenVINO, then `run`."""
    import numpy as np

    from tests.pipeline.test_partition import _save, scaler_in_the_middle

    model = _save(tmp_path, scaler_in_the_middle(channels=16, size=32), "middle.onnx")
    done = run("build", str(model), "-t", "openvino-cpu", "-o", str(tmp_path / "out"), "--partition",
               "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "verified" and len(report["segments"]) == 3
    x = np.random.default_rng(0).standard_normal((1, 16, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    ran = run("run", str(tmp_path / "out" / "segments"), "--inputs", str(tmp_path / "in.npz"),
              "-o", str(tmp_path / "y.npz"))
    assert ran.returncode == 0, ran.stderr
    assert "y: float32 [1, 16, 32, 32]" in ran.stdout
    with np.load(tmp_path / "y.npz") as outputs:
        import onnxruntime as ort

        expected = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
        np.testing.assert_allclose(outputs["y"], expected, rtol=1e-5, atol=1e-5)
    bad = run("run", str(tmp_path), "--inputs", str(tmp_path / "in.npz"))
    assert bad.returncode == 2 and "not a partitioned model" in bad.stderr and "Traceback" not in bad.stderr


def test_legalize_partition_writes_segments_verified_on_ort(tmp_path: Path):
    from tests.pipeline.test_partition import _save, scaler_in_the_middle

    model = _save(tmp_path, scaler_in_the_middle(channels=16, size=32), "middle.onnx")
    done = run("legalize", str(model), "-t", "jetson-nano", "-o", str(tmp_path / "split"), "--partition",
               "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["chain_on_ort"]["passed"] and report["chain_on_engines"] is None
    assert [s["placement"] for s in report["segments"]] == ["device", "host", "device"]
    assert not (tmp_path / "split" / "segments" / "00").exists()  # no engine: legalize only
    missing = run("legalize", str(model), "-t", "jetson-nano", "--partition")
    assert missing.returncode == 2 and "--partition writes a directory" in missing.stderr


def test_a_target_whose_mode_is_partition_builds_with_host_segments(tmp_path: Path):
    """`mode = "partition"` in a target file makes `build` cut what no rule makes legal."""
    from tests.pipeline.test_partition import _save, scaler_in_the_middle

    text = (REPO / "targets" / "openvino-cpu.toml").read_text()
    text = text.replace('name = "openvino-cpu"', 'name = "openvino-split"\nmode = "partition"', 1)
    text = text.replace("aliases = ", "# aliases = ", 1)
    (tmp_path / "openvino-split.toml").write_text(text)
    model = _save(tmp_path, scaler_in_the_middle(channels=16, size=32), "middle.onnx")
    done = run("build", str(model), "-t", str(tmp_path / "openvino-split.toml"), "-o", str(tmp_path / "out"),
               "--json")
    assert done.returncode == 0, done.stderr
    assert [s["placement"] for s in json.loads(done.stdout)["segments"]] == ["device", "host", "device"]


def test_an_openvino_ir_that_does_not_fit_the_disk_is_a_full_disk(tmp_path: Path) -> None:
    """OpenVINO's save_model on a full disk says only "basic_ios::clear: iostream error", and a build
    whose candidates' IRs did not fit went on to say "fp32 did not pass". On a real small filesystem (a
    tmpfs with room for the legalized model, not for the IR beside it): the full disk, one line, exit 2."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
                              [numpy_helper.from_array(weight, "w")])
    model = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    small = tmp_path / "small"
    small.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(small)]
    mounted = os.geteuid() == 0 and subprocess.run(mount, capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("needs a small filesystem: mounting a tmpfs takes root")
    try:
        done = run("build", str(model), "-t", "openvino-cpu", "-o", str(small / "out"), "--precision", "fp32",
                   "--no-bench")
        left = sorted(path.name for path in small.iterdir())
    finally:
        subprocess.run(["umount", str(small)], check=True)
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, done.stderr
    assert err.startswith("deploycc: error: No space left on device") and "model.xml" in err, err
    assert left == [], left  # the staging folder removed: the disk as it was


def test_a_full_disk_is_one_line_and_exit_2_not_an_internal_error(tmp_path: Path, monkeypatch, capsys):
    """The disk filling up under an audit said "internal error" (exit 3): it is the machine's
    condition, named with the file being written."""
    import errno

    from deploycc import api
    from deploycc.cli.main import main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / "model.legalized.onnx"))

    monkeypatch.setattr(api, "build_onnx", full)
    model = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(GOOD), model)
    with pytest.raises(SystemExit) as exited:
        main(["build", str(model), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("deploycc: error: No space left on device writing ")
    assert "model.legalized.onnx" in err

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(api, "build_onnx", broken)
    with pytest.raises(SystemExit) as exited:
        main(["build", str(model), "-o", str(tmp_path / "out2")])
    assert exited.value.code == 3  # another OSError is still a bug to report
