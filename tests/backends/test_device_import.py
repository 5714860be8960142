"""`deploycc device import`: after the board's result comes back, report.json and report.md say
what happened on the device and what to do next (no longer "pending"), and a measurement the
board could not take reads "n/a" with the reason, never "None". ONNX Runtime stands in for
TensorRT on the board, as in test_device_runner.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deploycc import api
from deploycc.options import BuildOptions, LegalizeOptions
from tests.backends.test_device_runner import _model, _run_on_device
from tests.cli.test_cli import run as run_cli


@pytest.fixture(scope="module")
def ran_on_board(tmp_path_factory) -> Path:
    """A jetson-xavier build whose bundle ran on the (stand-in) board: bundle/result.json is there."""
    folder = tmp_path_factory.mktemp("board")
    report = api.build(_model(folder / "m.onnx"), "jetson-xavier", folder / "out",
                       BuildOptions(legalize=LegalizeOptions(batch=1), bench=False))
    assert report.status == "pending-on-device", report.summary
    code, result = _run_on_device(folder / "out" / "bundle")
    assert code == 0 and result["status"] == "verified-on-device", result
    return folder / "out"


def _import(ran_on_board: Path, tmp_path: Path, **changes) -> tuple[int, dict, list[str]]:
    out = tmp_path / "out"
    shutil.copytree(ran_on_board, out)
    result_file = out / "bundle" / "result.json"
    result = json.loads(result_file.read_text())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key].update(value)
        else:
            result[key] = value
    result_file.write_text(json.dumps(result))
    imported = run_cli("device", "import", str(out), str(result_file))
    assert "Traceback" not in imported.stderr, imported.stderr
    return imported.returncode, json.loads((out / "report.json").read_text()), \
        (out / "report.md").read_text().splitlines()


def _status_and_next_step(markdown: list[str]) -> tuple[str, str]:
    status = next(line for line in markdown if line.startswith("**Status: "))
    step = next(line for line in markdown if line.startswith("- next step: "))
    return status, step


def test_a_verified_import_says_so_and_what_to_deploy(ran_on_board: Path, tmp_path: Path) -> None:
    code, report, markdown = _import(ran_on_board, tmp_path, memory={"nvmap_delta_kb": None})
    assert code == 0 and report["status"] == "verified-on-device" and report["exit_code"] == 0
    for text in (report["summary"], report["next_step"], *_status_and_next_step(markdown)):
        assert "pending" not in text, text
    assert report["summary"].startswith("verified on the device with onnxruntime")
    assert "stood in for TensorRT" in report["next_step"]  # ORT ran it: the TensorRT engine is still to come
    status, step = _status_and_next_step(markdown)
    assert report["summary"] in status and step == f"- next step: {report['next_step']}"
    memory = next(line for line in markdown if line.startswith("Memory: "))
    assert "None" not in memory and "NvMap delta n/a (no NvMapMemUsed" in memory, memory


def test_a_verified_tensorrt_import_names_the_plan_and_its_nvmap_delta(ran_on_board: Path,
                                                                          tmp_path: Path) -> None:
    code, report, markdown = _import(ran_on_board, tmp_path, engine="tensorrt", engine_version="8.5.2",
                                     memory={"nvmap_delta_kb": 2048})
    assert code == 0 and "model.plan" in report["next_step"], report["next_step"]
    assert report["summary"].startswith("verified on the device with tensorrt 8.5.2")
    assert any(line.startswith("Memory: ") and "NvMap delta 2048 kB." in line for line in markdown)


def test_a_failed_import_says_what_failed_and_the_way_past_it(ran_on_board: Path, tmp_path: Path) -> None:
    code, report, markdown = _import(ran_on_board, tmp_path, status="failed-on-device", stage="verify",
                                     reason="output 'y': max abs error 0.5 > atol 0.01", latency=None,
                                     memory=None)
    assert code == 1 and report["status"] == "failed-on-device" and report["exit_code"] == 1
    assert report["summary"] == ("failed on the device at stage verify: "
                                 "output 'y': max abs error 0.5 > atol 0.01")
    assert "--precision fp32" in report["next_step"]  # the build was fp16
    status, step = _status_and_next_step(markdown)
    assert status.startswith("**Status: failed-on-device** (stage reached: verify).")
    assert report["summary"] in status
    assert step == f"- next step: {report['next_step']}" and "pending" not in step


def _spliced(markdown: str, report: dict, device_section: str) -> str:
    """report.md as `device import` wrote it by splicing text: the status line and the next step
    replaced, the board's section appended. Rendering from the record must give the same."""
    import re

    status = f"**Status: {report['status']}** (stage reached: {report['stage']}). {report['summary']}"
    markdown = re.sub(r"^\*\*Status: [^*]+\*\*.*$", lambda _: status, markdown, count=1, flags=re.M)
    markdown = re.sub(r"^- next step: .*$", lambda _: f"- next step: {report['next_step']}", markdown,
                      count=1, flags=re.M)
    return markdown + device_section


def test_import_renders_report_md_again_as_the_build_wrote_it(ran_on_board: Path, tmp_path: Path) -> None:
    """report.md after the import is the build's, with the board's status, next step and section:
    rendered again from the updated record, twice the same."""
    before = (ran_on_board / "report.md").read_text()
    code, report, _ = _import(ran_on_board, tmp_path, reason=None,
                              clocks={"cpu_locked": True, "gpu_locked": True, "gpu_mhz": 921.6,
                                      "jetson_clocks": True})
    out = tmp_path / "out"
    after = (out / "report.md").read_text()
    section = after[after.index("\n## On the device"):]
    assert code == 0 and "Clocks locked (jetson_clocks)" in section
    assert after == _spliced(before, report, section)
    again = run_cli("device", "import", str(out), str(out / "bundle" / "result.json"))
    assert again.returncode == 0 and (out / "report.md").read_text() == after


def test_a_result_of_a_newer_schema_is_refused_in_one_line(ran_on_board: Path, tmp_path: Path) -> None:
    """A board's runner newer than this deploycc: refused, exit 2, the build directory untouched."""
    out = tmp_path / "out"
    shutil.copytree(ran_on_board, out)
    kept = {name: (out / name).read_text() for name in ("report.json", "report.md", "manifest.json")}
    result = json.loads((out / "bundle" / "result.json").read_text())
    (tmp_path / "newer.json").write_text(json.dumps({**result, "schema": 2}))
    refused = run_cli("device", "import", str(out), str(tmp_path / "newer.json"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "result schema 2 is newer than this deploycc reads (1)" in lines[0], lines
    assert {name: (out / name).read_text() for name in kept} == kept
