"""`deploycc probe` on a subset of the ONNX conformance cases, and `check --capabilities`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploycc import api
from deploycc.audit.probe import capability_table, probe
from tests.cli.test_cli import run

SUBSET = ["test_abs", "test_gelu_default_1", "test_layer_normalization_2d_axis0", "test_mish",
          "test_affine_grid_2d_expanded", "test_einsum_batch_matmul", "test_hardswish"]


@pytest.fixture(scope="module")
def ort_probe():
    return probe("ort-cpu", names=SUBSET)


def test_probe_runs_cases_raw_and_legalized(ort_probe) -> None:
    results = {r.case: r for r in ort_probe.results}
    assert set(results) == set(SUBSET)
    assert results["test_abs"].raw == "pass" and results["test_abs"].legalized == "pass"
    assert results["test_abs"].op == "Abs" and results["test_abs"].dtype == "float32"
    # legalization never loses a case ORT ran as exported (the AffineGrid case once did)
    assert all(r.legalized == "pass" for r in results.values() if r.raw == "pass")
    assert ort_probe.passed_legalized >= ort_probe.passed_raw


def test_capability_table_changes_what_check_says(ort_probe, tmp_path: Path, write_model) -> None:
    table = capability_table(ort_probe)
    assert table["rows"]["|Abs|13|float32"] == "pass"
    table["rows"]["|Abs|13|float32"] = "fail"  # as if the backend had refused it
    path = tmp_path / "caps.json"
    path.write_text(json.dumps(table))
    model = write_model("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (float[2] x) => (float[2] y) { y = Abs(x) }
    """)
    assert api.check(model, ["ort-cpu"]).targets[0].legal
    probed = api.check(model, ["ort-cpu"], capabilities=[path]).targets[0]
    assert not probed.legal and "failed when probed" in probed.illegal[0].reason
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = run("check", str(model), "--capabilities", str(bad))
    assert result.returncode == 2 and "not a capability table" in result.stderr


def test_probe_cli_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "caps.json"
    result = run("probe", "-t", "openvino-cpu", "--limit", "5", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "5 cases" in result.stdout and json.loads(out.read_text())["target"] == "openvino-cpu"
    # off a terminal the bar is silent: a line per op on stderr, which together count every case
    per_op = re.findall(r"^\[5/5\] (\w+): \d+/(\d+) pass as exported, \d+/\2 after deploycc", result.stderr,
                        re.MULTILINE)
    assert per_op and sum(int(n) for _, n in per_op) == 5 and len({op for op, _ in per_op}) == len(per_op)
    refused = run("probe", "-t", "jetson-xavier", "--limit", "1")
    assert refused.returncode == 2 and "on the device" in refused.stderr
    chosen = run("probe", "-t", "ort-cpu", "--case", "test_abs", "--case", "test_cast_FLOAT_to_BFLOAT16",
                 "-j", "2", "--json")
    assert chosen.returncode == 0, chosen.stderr
    report = json.loads(chosen.stdout)
    assert sorted(r["case"] for r in report["results"]) == ["test_abs", "test_cast_FLOAT_to_BFLOAT16"]
    assert report["passed_raw"] == 2  # a bfloat16 output is read back from its storage bits
    assert sorted(line for line in chosen.stderr.splitlines() if line.startswith("[")) == [
        "[2/2] Abs: 1/1 pass as exported, 1/1 after deploycc",
        "[2/2] Cast: 1/1 pass as exported, 1/1 after deploycc"]  # stderr: stdout is the JSON


def test_legalization_gains_cases_openvino_cannot_run_as_exported() -> None:
    """SwiGLU (a function op OpenVINO's frontend does not know), CumProd (no translator) and an
    Unsqueeze with run-time axes (a dynamic rank the CPU plugin refuses) fail as exported and pass
    after deploycc's legalization, on the real OpenVINO."""
    gains = ["test_swiglu", "test_cumprod_1d", "test_unsqueeze_axis_0"]
    report = probe("openvino-cpu", names=gains)
    results = {r.case: r for r in report.results}
    assert set(results) == set(gains)
    for name, result in results.items():
        assert result.raw != "pass" and result.legalized == "pass", (name, result)
