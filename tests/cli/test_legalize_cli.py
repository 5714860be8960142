"""`deploycc legalize` and `deploycc check --explain` from the command line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import onnx

from tests.cli.test_cli import GOOD, run

REFUSED = """
<ir_version: 10, opset_import: ["" : 13, "custom.ops" : 1]>
g (float[2,4] x) => (float[2,4] y) { y = custom.ops.Mystery(x) }
"""


def test_legalize_writes_a_legal_model_and_a_json_report(write_model, tmp_path: Path) -> None:
    path = write_model(GOOD)
    out, report_file = tmp_path / "out" / "m.onnx", tmp_path / "report.json"
    result = run("legalize", str(path), "-t", "jetson-xavier", "-o", str(out), "--report", str(report_file),
                 "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads(report_file.read_text())
    assert report["success"] and report["exit_code"] == 0 and report["files"] == [str(out)]
    assert [r["rule"] for r in report["rewrites"]] == ["gelu"]
    assert report["rewrites"][0]["certificate"]["status"] == "proven"
    assert [p["name"] for p in report["passes"]] == ["opset", "axes", "map-outputs", "fold", "tidy", "refold",
                                                      "simplify", "prune", "fuse", "legalize", "fold-bodies"]
    assert report["verification"]["passed"]
    assert "Gelu" not in {n.op_type for n in onnx.load(out).graph.node}
    assert run("check", str(out), "-t", "jetson-xavier").returncode == 0


def test_refused_model_exits_1_and_writes_nothing(write_model, tmp_path: Path) -> None:
    out = tmp_path / "never.onnx"
    result = run("legalize", str(write_model(REFUSED)), "-t", "jetson-xavier", "-o", str(out))
    assert result.returncode == 1
    assert "still illegal" in result.stdout and "not written" in result.stdout
    assert not out.exists()


def test_read_only_input_folder_is_left_untouched(write_model, tmp_path: Path) -> None:
    path = write_model(GOOD)
    before = sorted(os.listdir(path.parent))
    path.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        out = tmp_path.parent / f"{tmp_path.name}-out" / "m.onnx"
        result = run("legalize", str(path), "-t", "jetson-orin", "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert sorted(os.listdir(path.parent)) == before
    finally:
        path.parent.chmod(stat.S_IRWXU)


def test_bad_options_are_one_line_errors(write_model, tmp_path: Path) -> None:
    path = str(write_model(GOOD))
    cases = [
        (["--shape", "x"], "expected NAME:DIMS"),
        (["--shape", "nope:1x8"], "no input named 'nope'"),
        (["--shape", "x:1x2x3"], "the input has rank 2"),
        (["--disable-pass", "nope"], "no pass named 'nope'"),
        (["-o", path], "refusing to overwrite the input"),
        (["--batch", "0"], "must be at least 1"),
    ]
    for flags, message in cases:
        result = run("legalize", path, "-t", "ort-cpu", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_check_explain_names_the_rule_without_rewriting(write_model) -> None:
    path = write_model(GOOD)
    before = path.read_bytes()
    result = run("check", str(path), "-t", "jetson-xavier", "--explain", "--json")
    assert result.returncode == 1
    fixes = json.loads(result.stdout)["targets"][0]["fixes"]
    assert fixes == [{"node": "y", "op": "Gelu", "fix": "gelu", "explanation": "rule gelu"}]
    assert path.read_bytes() == before


SPLIT_OF_A_CONSTANT = """
<ir_version: 10, opset_import: ["" : 13]>
g (float[2,4] x) => (float[2,4] y)
  <float[2,4] c = {1, 2, 3, 4, 5, 6, 7, 8}, int64[2] parts = {2, 2}> {
    a, b = Split<axis=1>(c, parts)
    ba = Concat<axis=1>(b, a)
    y = Add(x, ba)
}
"""


def test_the_graph_libraries_notes_stay_off_stderr_unless_debug(write_model, tmp_path: Path) -> None:
    """onnxscript's folder logs a warning for every Split of a constant it passes over; a user
    sees deploycc's findings, not that (raft_small printed it four times above its result)."""
    path = write_model(SPLIT_OF_A_CONSTANT)
    quiet = run("legalize", str(path), "-t", "ort-cpu", "-o", str(tmp_path / "a.onnx"))
    assert quiet.returncode == 0, quiet.stderr
    assert "Skipping constant folding" not in quiet.stderr + quiet.stdout
    loud = run("--debug", "legalize", str(path), "-t", "ort-cpu", "-o", str(tmp_path / "b.onnx"))
    assert loud.returncode == 0 and "Skipping constant folding" in loud.stderr
