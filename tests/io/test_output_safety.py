"""No command writes over what it reads, replaces an output it was not told to, leaves a killed
run's staging behind for good, lets two runs write one output at once, or reads outside a
corpus's folder for a hints file: each found by an attacker's round, each on a real small model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import io
from deploycc.errors import OptionError
from tests.cli.test_cli import GOOD, run

RELU = """
<ir_version: 10, opset_import: ["" : 17]>
g (float[2,4] x) => (float[2,4] y) { y = Relu(x) }
"""


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("deploycc: error: "), result.stderr
    return lines[0]


def _lock_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(f".*{io.outputs.LOCK_SUFFIX}"))


def test_a_report_named_as_the_input_leaves_the_input_as_it_was(write_model, tmp_path: Path) -> None:
    model = write_model(RELU)
    before = model.read_bytes()
    os.link(model, tmp_path / "alias.onnx")  # the same file by another name
    for report in (model, tmp_path / "alias.onnx", tmp_path / "." / model.name):
        result = run("legalize", str(model), "-o", str(tmp_path / "leg.onnx"), "--report", str(report))
        assert "refusing to overwrite the input" in _one_error_line(result)
        assert model.read_bytes() == before
    assert not (tmp_path / "leg.onnx").exists()


def test_the_report_and_the_model_are_two_outputs(write_model, tmp_path: Path) -> None:
    result = run("legalize", str(write_model(RELU)), "-o", str(tmp_path / "a.onnx"),
                 "--report", str(tmp_path / "a.onnx"))
    assert "named as two outputs" in _one_error_line(result)


def _external(path: Path) -> Path:
    weights = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location=path.name + ".data")
    return path


def test_an_existing_sidecar_is_an_existing_output(tmp_path: Path) -> None:
    """A model with external weights writes NEW.onnx.data: one there already is the user's until
    --force, as NEW.onnx would be."""
    model = _external(tmp_path / "m.onnx")
    sidecar = tmp_path / "new.onnx.data"
    sidecar.write_bytes(b"precious")
    result = run("legalize", str(model), "-o", str(tmp_path / "new.onnx"))
    assert "new.onnx.data: already exists" in _one_error_line(result)
    assert sidecar.read_bytes() == b"precious" and not (tmp_path / "new.onnx").exists()
    forced = run("legalize", str(model), "-o", str(tmp_path / "new.onnx"), "--force")
    assert forced.returncode == 0, forced.stderr
    assert sidecar.stat().st_size == 4096 * 4


def test_forced_output_over_the_inputs_weights_is_refused(tmp_path: Path) -> None:
    """--force replaces an output, never the input's own weight file, however it is named."""
    model = _external(tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    before = data.read_bytes()
    os.link(data, tmp_path / "out.onnx.data")  # the output's sidecar is the input's weights
    result = run("legalize", str(model), "-o", str(tmp_path / "out.onnx"), "--force")
    assert "refusing to overwrite the input" in _one_error_line(result)
    assert data.read_bytes() == before


def test_a_killed_legalizes_staging_is_removed_by_the_next_run(write_model, tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    stale = tmp_path / f".earlier.onnx{io.PARTIAL_MARK}{dead}-k1ll3d"
    stale.mkdir()
    (stale / "earlier.onnx").write_bytes(b"a complete-looking model")
    running = tmp_path / f".other.onnx{io.PARTIAL_MARK}{alive}-running"  # a live run's: kept
    running.mkdir()
    result = run("legalize", str(write_model(RELU)), "-o", str(tmp_path / "leg.onnx"))
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and running.is_dir()
    assert not list(tmp_path.glob(f".leg.onnx{io.PARTIAL_MARK}*")) and not _lock_files(tmp_path)


def test_an_audit_resume_removes_a_killed_cells_staging(write_model, tmp_path: Path) -> None:
    from deploycc import api
    from deploycc.audit.run import AuditOptions

    model = write_model(RELU)
    out = tmp_path / "audit"
    options = AuditOptions(stages=("check",))
    api.audit([model], ["ort-cpu"], out, options)
    stale = out / "builds" / f".m.ort-cpu{io.PARTIAL_MARK}{_dead_pid()}-k1ll3d"
    stale.mkdir(parents=True)
    (stale / "legalized.onnx").write_bytes(b"half a build")
    resumed = api.audit([model], ["ort-cpu"], out, options)
    assert resumed.reused == 1  # nothing ran again, and the leftover went all the same
    assert not stale.exists() and not _lock_files(tmp_path)


def test_two_runs_to_one_output_one_is_refused(write_model, tmp_path: Path) -> None:
    """The lock a run holds while it writes, held here as a run holds it: the other run exits 2
    naming it; once it is let go, nothing of it is left and the run goes through."""
    model = str(write_model(GOOD))
    for command, output, flags in (("legalize", tmp_path / "leg.onnx", []),
                                   ("build", tmp_path / "built", ["--no-bench"])):
        with io.output_lock(output):
            busy = run(command, model, "-o", str(output), *flags)
            line = _one_error_line(busy)
            assert f"is being written by another deploycc run (pid {os.getpid()})" in line
            assert not output.exists()
        assert not _lock_files(tmp_path)
        done = run(command, model, "-o", str(output), *flags)
        assert done.returncode == 0, done.stderr
        assert not _lock_files(tmp_path)


def test_a_killed_runs_lock_file_blocks_no_one(write_model, tmp_path: Path) -> None:
    output = tmp_path / "leg.onnx"
    io.outputs.lock_path(output).write_text(f"{_dead_pid()}\n")  # left by a SIGKILL: no flock on it
    result = run("legalize", str(write_model(RELU)), "-o", str(output))
    assert result.returncode == 0, result.stderr
    assert not _lock_files(tmp_path)


def test_the_lock_is_held_once_per_process(tmp_path: Path) -> None:
    """The command line and the API under it both claim an output: the same process is let in."""
    output = tmp_path / "x.onnx"
    with io.output_lock(output), io.output_lock(output):
        assert io.outputs.lock_path(output).is_file()
    assert not io.outputs.lock_path(output).exists()


def test_another_thread_is_another_run(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    output = tmp_path / "x.onnx"

    def claim() -> str:
        try:
            with io.output_lock(output):
                return "held"
        except io.OutputBusy as busy:
            return str(busy)

    with io.output_lock(output), ThreadPoolExecutor(1) as pool:
        assert f"another deploycc run (pid {os.getpid()})" in pool.submit(claim).result()
    assert not _lock_files(tmp_path)


def _hinted(folder: Path, inputs: str) -> Path:
    onnx.save(onnx.parser.parse_model(RELU), folder / "m.onnx")
    (folder / "m.hints.json").write_text(json.dumps({"inputs": inputs}))
    return folder / "m.onnx"


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_hints_inputs_outside_the_models_folder_are_refused_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from deploycc.audit.run import read_hints

    secret = tmp_path / "secret.npz"
    np.savez(secret, x=np.zeros((2, 4), np.float32))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    named = {"absolute": str(secret), "dotdot": "../secret.npz", "symlink": "x.npz"}[how]
    if how == "symlink":
        (corpus / "x.npz").symlink_to(secret)
    model = _hinted(corpus, named)
    read: list[Path] = []
    original = Path.read_bytes

    def recorded(self: Path) -> bytes:
        read.append(self.resolve())
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", recorded)
    with pytest.raises(OptionError, match="outside its folder"):
        read_hints(model)
    assert secret.resolve() not in read


def test_an_audit_refuses_a_hints_file_pointing_out(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    model = _hinted(corpus, "/etc/passwd")
    result = run("audit", str(model), "-t", "ort-cpu", "-o", str(tmp_path / "out"), "--stages", "check")
    assert "outside its folder" in _one_error_line(result)


def test_an_output_that_cannot_be_made_is_a_one_line_error(write_model, tmp_path: Path) -> None:
    model = str(write_model(RELU))
    for command, output in (("legalize", f"{model}/leg.onnx"), ("build", f"{model}/built"),
                            ("legalize", "/proc/deploycc-test/leg.onnx"), ("build", "/proc/built")):
        assert "cannot write" in _one_error_line(run(command, model, "-o", output)), (command, output)
