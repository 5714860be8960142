"""`deploycc build` from the command line: exit codes, one-line errors, the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import GOOD, run
from tests.cli.test_legalize_cli import REFUSED


def test_build_exit_codes_and_json(write_model, tmp_path: Path) -> None:
    model = str(write_model(GOOD))
    built = run("build", model, "-t", "openvino-cpu", "-o", str(tmp_path / "ov"), "--json", "--no-bench",
                "--batch", "2")
    assert built.returncode == 0, built.stderr
    report = json.loads(built.stdout)
    assert report["status"] == "verified" and report["exit_code"] == 0
    assert json.loads((tmp_path / "ov" / "report.json").read_text())["build_hash"] == report["build_hash"]
    refused_model = str(write_model(REFUSED, "r.onnx"))
    refused = run("build", refused_model, "-t", "jetson-xavier", "-o", str(tmp_path / "r"))
    assert refused.returncode == 1 and "failed" in refused.stdout
    again = run("build", model, "-t", "openvino-cpu", "-o", str(tmp_path / "ov"))
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr


def test_build_bad_options_are_one_line_errors(write_model, tmp_path: Path) -> None:
    model = str(write_model(GOOD))
    cases = [
        (["--dynamic-batch", "8:1:4"], "MIN <= OPT <= MAX"),
        (["--shape-range", "x:1x8"], "expected NAME:MIN:OPT:MAX"),
        (["--precision", "bf16"], "does not support precision bf16"),
    ]
    for flags, message in cases:
        result = run("build", model, "-t", "ort-cpu", "-o", str(tmp_path / "o"), *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_engine_only_here_says_where_to_run_it(write_model, tmp_path: Path) -> None:
    model = str(write_model(GOOD))
    assert run("build", model, "-t", "jetson-orin", "-o", str(tmp_path / "b"), "--batch", "1").returncode == 0
    result = run("build", str(tmp_path / "b" / "bundle"), "--engine-only")
    assert result.returncode == 1
    assert "cannot build the engine here" in result.stderr and "jetson-orin" in result.stderr


def test_bad_model_is_refused_with_exit_2_before_any_folder_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for model in (tmp_path / "nosuch.onnx", tmp_path, empty):
        result = run("build", str(model), "-t", "ort-cpu")  # no -o: the default folder, never announced
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (model, result.stderr)
        assert len(lines) == 1 and lines[0].startswith("deploycc: error: "), (model, result.stderr)
        assert "internal error" not in result.stderr and "writing" not in result.stderr


def test_a_failed_build_does_not_block_the_next_attempt(write_model, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    refused = run("build", str(write_model(REFUSED, "r.onnx")), "-t", "jetson-xavier", "-o", out)
    assert refused.returncode == 1
    assert json.loads((tmp_path / "out" / "report.json").read_text())["status"] == "failed"
    retried = run("build", str(write_model(GOOD)), "-t", "ort-cpu", "-o", out, "--no-bench")
    assert retried.returncode == 0, retried.stderr
    assert "held only the report of a failed build" in retried.stdout
    assert json.loads((tmp_path / "out" / "report.json").read_text())["status"] == "verified"
    # a failed build's folder that holds anything else is the user's: replaced only with --force
    assert run("build", str(tmp_path / "r.onnx"), "-t", "jetson-xavier", "-o", out, "--force").returncode == 1
    (tmp_path / "out" / "notes.txt").write_text("mine")
    again = run("build", str(write_model(GOOD)), "-t", "ort-cpu", "-o", out)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
