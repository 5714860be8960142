"""`deploycc device import`: after the board's result comes back, report.json and report.md say
what happened on the device and what to do next (no longer "pending"), and a measurement the
board could not take reads "n/a" with the reason, never "None". ONNX Runtime stands in for
TensorRT on the board, as in test_device_runner.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from deploycc import api
from deploycc.options import BuildOptions, LegalizeOptions
from deploycc.records.build import BuildReport
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
    # the record read back from report.json keeps the folder that travels (it got manifest.json)
    artifact = BuildReport.from_dict(json.loads((out / "report.json").read_text())).artifact
    assert artifact is not None and artifact.device_folder == "bundle"
    assert (out / "bundle" / "manifest.json").is_file()


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


# ---- the board's files are input like any other: refused in one line, exit 2, nothing changed ----

SECRET = 1234.5  # a value only the file outside the bundle holds


def _board_folder(out: Path, tmp_path: Path) -> Path:
    """The bundle as run_on_device.sh (trtexec) leaves it on the board, brought back beside OUTDIR:
    trtexec's outputs equal to the reference, its result.json gone."""
    board = tmp_path / "board" / "bundle"
    shutil.copytree(out / "bundle", board)
    (board / "result.json").unlink()
    index = json.loads((board / "reference" / "reference.json").read_text())
    rows = []
    for entry in index["outputs"]:
        values = np.fromfile(board / "reference" / entry["file"], "<f4")
        rows.append({"name": entry["name"], "dimensions": "x".join(map(str, entry["shape"])),
                     "values": values.tolist()})
    (board / "trtexec-output.json").write_text(json.dumps(rows))
    return board


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _result(edit):
    """A result.json edit: `edit` changes the board's result (a dict), or returns the text to write."""
    def write(out: Path, tmp_path: Path) -> Path:
        path = out / "bundle" / "result.json"
        if callable(edit):
            _edit_json(path, edit)
        else:
            path.write_text(edit)
        return path
    return write


def _folder(edit):
    """A trtexec bundle folder brought back, edited by `edit(board_folder, tmp_path)`."""
    def write(out: Path, tmp_path: Path) -> Path:
        board = _board_folder(out, tmp_path)
        edit(board, tmp_path)
        return board
    return write


def _index(**fields):
    """The reference index's first output entry gets `fields` (a None value drops the key)."""
    def edit(board: Path, _tmp_path: Path) -> None:
        _edit_json(board / "reference" / "reference.json", lambda index: index["outputs"][0].update(fields))
    return edit


def _trtexec(text: str):
    return lambda board, _tmp_path: (board / "trtexec-output.json").write_text(text)


def _secret(tmp_path: Path) -> Path:
    """A file outside the bundle that reads as the output's reference: [SECRET, 0] in float32."""
    path = tmp_path / "secret.bin"
    path.write_bytes(np.array([SECRET, 0.0], "<f4").tobytes())
    return path


def _symlinked_out(board: Path, tmp_path: Path) -> None:
    reference = board / "reference" / "outputs" / "000.bin"
    reference.unlink()
    reference.symlink_to(_secret(tmp_path))


def _pop(key: str, inside: str | None = None):
    return lambda result: (result[inside] if inside else result).pop(key)


REFUSED = [  # (the board's file, the field the one line names)
    pytest.param(_result("[" * 100_000 + "]" * 100_000), "nested", id="result-nested-lists"),
    pytest.param(_result('{"a": ' * 5000 + "1" + "}" * 5000), "nested", id="result-nested-objects"),
    pytest.param(_result(lambda r: r["latency"].update(p90_ms="fast")), "latency.p90_ms",
                 id="latency-a-string"),
    pytest.param(_result(_pop("p90_ms", "latency")), "latency.p90_ms", id="latency-missing-p90"),
    pytest.param(_result(lambda r: r.update(latency=[1, 2])), "latency", id="latency-a-list"),
    pytest.param(_result(lambda r: r["outputs"][0].update(max_abs_error="tiny")), "outputs[0].max_abs_error",
                 id="outputs-error-a-string"),
    pytest.param(_result(_pop("tolerances")), "tolerances", id="verified-without-tolerances"),
    pytest.param(_result(lambda r: r["outputs"][0].update(passed=False)), "outputs[0].passed",
                 id="verified-with-an-output-failed"),
    pytest.param(_result(lambda r: r.update(nvml={"before": {"used": 1}, "after": {"used": 2}})),
                 "nvml.before.gpu_memory_used_kb", id="nvml-sample-without-memory"),
    pytest.param(_folder(lambda board, _: (board / "model.onnx").unlink()), "model.onnx",
                 id="folder-without-model"),
    pytest.param(_folder(_trtexec("[{]")), "trtexec-output.json", id="trtexec-not-json"),
    pytest.param(_folder(_trtexec(json.dumps([{"name": "y", "dimensions": "1x2", "values": ["a", "b"]}]))),
                 "[0].values[0]", id="trtexec-strings"),
    pytest.param(_folder(_trtexec(json.dumps([{"name": "y", "dimensions": "1099511627776x2",
                                               "values": [0.0, 0.0]}]))), "[0].dimensions",
                 id="trtexec-dims-lie"),
    pytest.param(_folder(lambda board, _: _edit_json(board / "reference" / "reference.json",
                                                     lambda index: index.pop("tolerances"))),
                 "tolerances", id="reference-without-tolerances"),
    pytest.param(_folder(_index(shape=[1000, 1000])), "outputs[0].shape", id="reference-shape-lies"),
    pytest.param(_folder(_index(shape=[2 ** 40])), "outputs[0].shape", id="reference-shape-2e40"),
    pytest.param(_folder(_index(shape=[1, "2"])), "outputs[0].shape", id="reference-shape-a-string"),
    pytest.param(_folder(_index(dtype="object")), "outputs[0].dtype", id="reference-object-dtype"),
]

ESCAPES = [  # a reference file that leads out of the bundle: never read
    pytest.param(lambda board, tmp: (_secret(tmp), _index(file="../../../secret.bin")(board, tmp)),
                 id="dot-dot"),
    pytest.param(lambda board, tmp: _index(file=str(_secret(tmp)))(board, tmp), id="absolute"),
    pytest.param(_symlinked_out, id="symlink-out"),
]


def _refused(ran_on_board: Path, tmp_path: Path, write) -> tuple[str, str]:
    """The CLI's one line for the board's file `write` made, exit 2, OUTDIR as it was; the line
    and report.json."""
    out = tmp_path / "out"
    shutil.copytree(ran_on_board, out)
    kept = {name: (out / name).read_text() for name in ("report.json", "report.md", "manifest.json")}
    result = write(out, tmp_path)
    refused = run_cli("device", "import", str(out), str(result))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert {name: (out / name).read_text() for name in kept} == kept
    return lines[0], refused.stdout + (out / "report.json").read_text()


@pytest.mark.parametrize("write, field", REFUSED)
def test_a_malformed_file_from_the_board_is_refused_naming_the_field(ran_on_board: Path, tmp_path: Path,
                                                                      write, field: str) -> None:
    line, _ = _refused(ran_on_board, tmp_path, write)
    assert field in line, line


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_reference_file_out_of_the_bundle_is_refused_unread(ran_on_board: Path, tmp_path: Path,
                                                              escape) -> None:
    line, seen = _refused(ran_on_board, tmp_path, _folder(escape))
    assert "outputs[0].file" in line and str(SECRET) not in line + seen, line


def test_a_trtexec_folder_brought_back_beside_outdir_is_judged(ran_on_board: Path, tmp_path: Path) -> None:
    """The honest folder the refusals above start from imports (exit 0): each refusal is its edit's."""
    out = tmp_path / "out"
    shutil.copytree(ran_on_board, out)
    imported = run_cli("device", "import", str(out), str(_board_folder(out, tmp_path)))
    assert imported.returncode == 0, imported.stderr
    assert json.loads((out / "report.json").read_text())["device"]["outputs"][0]["passed"] is True


def test_a_trtexec_log_whose_numbers_are_not_numbers_is_no_crash(ran_on_board: Path, tmp_path: Path) -> None:
    """trtexec.log is the board's text too: what does not parse as a number is no measurement."""
    out = tmp_path / "out"
    shutil.copytree(ran_on_board, out)
    board = _board_folder(out, tmp_path)
    (board / "trtexec.log").write_text("=== Performance summary ===\n[I] Throughput: ... qps\n[I] Latency: "
                                       "min = 1e5e5 ms, mean = 2.5 ms, percentile(99%) = -.- ms\n")
    imported = run_cli("device", "import", str(out), str(board))
    assert imported.returncode == 0 and "Traceback" not in imported.stderr, imported.stderr
    latency = json.loads((out / "report.json").read_text())["device"]["latency"]
    assert latency["mean_ms"] == 2.5 and latency["throughput_per_s"] is None and latency["p99_ms"] is None
