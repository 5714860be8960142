"""`deploycc audit`: the matrix, the reports, resuming, and cells whose process really crashes,
really hangs or really runs out of memory while the audit goes on."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from deploycc import api
from deploycc.audit.isolate import run_isolated
from deploycc.audit.run import AuditOptions
from deploycc.errors import OptionError
from deploycc.records.audit import CATEGORIES, STATUSES, CellSpec
from examples.make_models import encoder_block, small_cnn
from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    onnx.save(small_cnn(), folder / "cnn.onnx")
    (folder / "nested").mkdir()
    onnx.save(encoder_block(), folder / "nested" / "encoder.onnx")
    (folder / "broken.onnx").write_bytes(b"not a model")
    return folder


def test_audit_matrix_reports_and_resume(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    options = AuditOptions(jobs=2, batch=1, stages=("check", "legalize"))
    report = api.audit([corpus], ["ort-cpu", "jetson-nano"], out, options)
    assert len(report.cells) == 6 and report.reused == 0
    assert {c.status for c in report.cells} <= set(STATUSES)
    cells = {(Path(c.model).name, c.target): c for c in report.cells}
    cnn = cells[("cnn.onnx", "ort-cpu")]
    assert cnn.legal_as_exported is True and cnn.status == "legalized"  # the furthest stage reached
    nano = cells[("encoder.onnx", "jetson-nano")]
    assert nano.legal_as_exported is False and nano.status == "legalized"
    assert nano.rules == ["gelu", "layer-normalization"]
    broken = cells[("broken.onnx", "ort-cpu")]
    assert broken.status == "failed" and broken.category == "invalid-model"
    summary = {s.target: s for s in report.summary}
    assert summary["jetson-nano"].rate_as_exported < summary["jetson-nano"].rate_after_deploycc
    page = (out / "audit.html").read_text()
    # self-contained: nothing fetched, one inline script (the column sort)
    assert "src=" not in page and page.count("<script") == 1
    assert "http" not in page.replace("<!DOCTYPE html>", "")
    assert "as exported vs after deploycc" in page and "encoder.onnx" in page
    assert json.loads((out / "audit.json").read_text())["counts"] == report.counts
    assert "## Top failure causes" in (out / "audit.md").read_text()
    again = api.audit([corpus], ["ort-cpu", "jetson-nano"], out, options)
    assert again.reused == 6 and [c.status for c in again.cells] == [c.status for c in report.cells]
    fresh = api.audit([corpus], ["ort-cpu"], out, AuditOptions(fresh=True, stages=("check",)))
    assert fresh.reused == 0
    # stored only: the models whose every target's cell is stored, and nothing run
    made = sorted((out / "cells").rglob("*"))
    options = AuditOptions(jobs=2, batch=1, stages=("check", "legalize"), stored_only=True)
    stored = api.audit([corpus], ["ort-cpu", "jetson-nano"], out, options)
    assert stored.reused == len(stored.cells) == 6 and len(stored.models) == 3
    unmade = api.audit([corpus], ["ort-cpu", "jetson-orin"], out, options)  # the Orin's never ran
    assert unmade.cells == [] and unmade.models == []
    assert sorted((out / "cells").rglob("*")) == made


def test_list_files_and_bad_input(corpus: Path, tmp_path: Path) -> None:
    listing = tmp_path / "models.txt"
    listing.write_text(f"# corpus\n{corpus / 'cnn.onnx'}\n")
    report = api.audit([listing], ["openvino-cpu"], tmp_path / "a", AuditOptions(stages=("check",)))
    assert [Path(c.model).name for c in report.cells] == ["cnn.onnx"]
    with pytest.raises(OptionError, match="no models found"):
        api.audit([tmp_path / "a" / "cells"], ["ort-cpu"], tmp_path / "b")
    with pytest.raises(OptionError, match="unknown stage"):
        api.audit([listing], ["ort-cpu"], tmp_path / "c", AuditOptions(stages=("check", "deploy")))


def _spec(tmp_path: Path) -> CellSpec:
    return CellSpec(model=str(tmp_path / "m.onnx"), model_sha256="0", target="ort-cpu", target_hash="0",
                    stages=("check",))


def test_a_cell_that_dies_by_a_signal_is_a_backend_crash(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    result = run_isolated(_spec(tmp_path), timeout=30, memory_limit=None, worker=crash)
    assert result.status == "failed" and result.category == "backend-crash"
    assert "SIGSEGV" in result.message


def test_a_cell_that_hangs_is_killed_at_the_timeout(tmp_path: Path) -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    result = run_isolated(_spec(tmp_path), timeout=2, memory_limit=None, worker=hang)
    assert result.category == "timeout" and result.seconds < 30


def test_a_cell_that_eats_memory_is_out_of_memory(tmp_path: Path) -> None:
    hog = [sys.executable, "-c",
           "import sys; sys.stdin.read(); blocks = [bytearray(1 << 30) for _ in range(64)]"]
    result = run_isolated(_spec(tmp_path), timeout=60, memory_limit=512 << 20, worker=hog)
    assert result.category == "out-of-memory" and "512 MiB" in result.message


def test_crashing_cells_do_not_stop_the_audit(corpus: Path, tmp_path: Path) -> None:
    crash = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)")
    options = AuditOptions(stages=("check",), worker=crash, jobs=2)
    report = api.audit([corpus], ["ort-cpu"], tmp_path / "crash", options)
    assert len(report.cells) == 3 and all(c.category == "backend-crash" for c in report.cells)
    assert (tmp_path / "crash" / "audit.html").exists()


def test_categories_are_the_fixed_taxonomy(corpus: Path, tmp_path: Path) -> None:
    report = api.audit([corpus], ["jetson-xavier"], tmp_path / "x", AuditOptions(batch=1))
    for cell in report.cells:
        assert cell.category is None or cell.category in CATEGORIES
    encoder = next(c for c in report.cells if c.model.endswith("encoder.onnx"))
    # no hints: the sequence gets the target's profile around its typical size, as `build` gives it
    assert encoder.status == "legalized", encoder.message
    assert encoder.details["shapes"] == "x 1x[64..128..256]x64"


def test_audit_takes_builds_axes_flags_and_hints(tmp_path: Path) -> None:
    """The same axes flags as `build`, for every model or per model in its hints file; the hints'
    own flags win over the command line's."""
    onnx.save(encoder_block(), tmp_path / "a.onnx")
    onnx.save(encoder_block(), tmp_path / "b.onnx")
    (tmp_path / "b.hints.json").write_text('{"dynamic_batch": [1, 2, 4], "shape_ranges": '
                                           '{"x": [[1, 16, 64], [2, 32, 64], [4, 48, 64]]}}')
    out = tmp_path / "out"
    result = run("audit", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "-t", "gpu-trt10",
                 "-o", str(out), "--stages", "check,legalize,build",
                 "--shape-range", "x:1x8x64:4x16x64:8x32x64", "--json")
    assert result.returncode == 0, result.stderr
    cells = {Path(c["model"]).name: c for c in json.loads(result.stdout)["cells"]}
    assert cells["a.onnx"]["details"]["shapes"] == "x [1..4..8]x[8..16..32]x64"
    assert cells["b.onnx"]["details"]["shapes"] == "x [1..2..4]x[16..32..48]x64"
    bad = run("audit", str(tmp_path / "a.onnx"), "-t", "gpu-trt10", "-o", str(tmp_path / "bad"),
              "--dynamic-batch", "4:2:1")
    assert bad.returncode == 2 and "MIN <= OPT <= MAX" in bad.stderr


def test_audit_cells_suggest_only_what_audit_takes(tmp_path: Path) -> None:
    """A model the drawn inputs cannot run: `build` says --inputs, which audit has not; the cell
    says where a corpus gives inputs instead, and every flag a cell names is one audit takes."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "reshape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 7]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "n.onnx")
    report = api.audit([tmp_path / "n.onnx"], ["ort-cpu"], tmp_path / "out", AuditOptions())
    (cell,) = report.cells
    assert cell.category == "needs-inputs" and "MODEL.hints.json" in cell.message, cell.message
    accepted = set(re.findall(r"--[a-z][a-z-]+", run("audit", "--help").stdout))
    assert set(re.findall(r"--[a-z][a-z-]+", cell.message)) <= accepted


def test_audit_cli(corpus: Path, tmp_path: Path) -> None:
    result = run("audit", str(corpus / "cnn.onnx"), "-t", "ort-cpu", "-o", str(tmp_path / "cli"),
                 "--stages", "check", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"] == {"legal-as-exported": 1}
    stored = run("audit", str(corpus / "cnn.onnx"), "-t", "ort-cpu", "-t", "jetson-nano", "-o",
                 str(tmp_path / "cli"), "--stages", "check", "--json", "--stored-only")
    assert stored.returncode == 0 and json.loads(stored.stdout)["counts"] == {}, stored.stderr
    bad = run("audit", str(tmp_path / "nothing.onnx"), "-t", "ort-cpu", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "no such model" in bad.stderr


def test_the_store_runs_cells_again_that_failed_for_want_of_a_resource_or_time(tmp_path: Path) -> None:
    """A rerun after a board joined the cluster must not reuse 'unschedulable'; a real failure
    (an illegal op) is kept."""
    from deploycc.audit.store import CellStore
    from deploycc.records.audit import CellResult

    store = CellStore(tmp_path / "cells")
    for key, category in (("a", "unschedulable"), ("b", "timeout"), ("c", "unsupported-op")):
        store.put(key, CellResult(model="m.onnx", target="jetson-xavier", status="failed", stage="schedule",
                                  category=category))
    assert store.get("a") is None and store.get("b") is None
    kept = store.get("c")
    assert kept is not None and kept.cached and kept.category == "unsupported-op"


def test_a_cell_failure_is_categorised_by_its_error_type_not_its_words() -> None:
    from deploycc.audit.worker import _category, _export_category
    from deploycc.errors import DynamicShapeError, OptionError
    from deploycc.records.export import (
        TORCH_FAILURE,
        UNSUPPORTED_OP,
        ExportAttempt,
        ExportFailure,
        ExportReport,
    )

    assert _category(DynamicShapeError("jetson-nano needs static shapes")) == "dynamic-shape"
    assert _category(OptionError("--dynamic-batch '1:2': expected MIN:OPT:MAX")) == "backend-error"
    # memory running out in C++ or the kernel is not a backend's error (a 644 M-parameter export)
    assert _category(OSError(12, "Cannot allocate memory")) == "out-of-memory"
    assert _category(RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during "
                                  "initialization: std::bad_alloc")) == "out-of-memory"

    def export(*failures: ExportFailure) -> ExportReport:
        return ExportReport(source="m", kind="module", target="ort-cpu", opset_ceiling=17, example_shapes={},
                            order=[], attempts=[ExportAttempt("dynamo", 17, failure=f) for f in failures])

    enomem = ExportFailure(TORCH_FAILURE, "torch failed: [Errno 12] Cannot allocate memory")
    unsupported = ExportFailure(UNSUPPORTED_OP, "the exporter has no ONNX translation for aten.foo")
    assert _export_category(export(enomem, enomem)) == "out-of-memory"
    assert _export_category(export(unsupported, enomem)) == "unsupported-op"  # one exporter said why


def test_top_failure_causes_count_the_cells_of_every_target(corpus: Path, tmp_path: Path) -> None:
    """The same cause on two targets is two hits, not only the last target's."""
    options = AuditOptions(stages=("check",))
    report = api.audit([corpus / "broken.onnx"], ["ort-cpu", "jetson-nano"], tmp_path / "a", options)
    assert [(c.target, c.category) for c in report.cells] == [("ort-cpu", "invalid-model"),
                                                             ("jetson-nano", "invalid-model")]
    (cause,) = report.top_failures
    assert cause["count"] == 2
    assert cause["cells"] == ["broken.onnx @ ort-cpu", "broken.onnx @ jetson-nano"]
    assert "invalid-model at check (2): broken.onnx @ ort-cpu, broken.onnx @ jetson-nano" in \
        (tmp_path / "a" / "audit.md").read_text()


def test_audit_page_links_each_cell_to_its_build_and_shows_why(tmp_path: Path) -> None:
    """Build folders are named by model and target (a short hash only where two models share a
    stem), each cell links to its report.md relative to the page, the failure reason is text on
    the page, and a rerun reuses the cells and keeps the links."""
    corpus = tmp_path / "corpus"
    for folder in ("a", "b"):
        (corpus / folder).mkdir(parents=True)
    onnx.save(small_cnn(), corpus / "a" / "cnn.onnx")
    onnx.save(encoder_block(), corpus / "b" / "cnn.onnx")  # another model of the same stem
    shutil.copy(corpus / "a" / "cnn.onnx", corpus / "copy.onnx")  # the same bytes: one key, run once
    (corpus / "broken.onnx").write_bytes(b"not a model")
    out = tmp_path / "audit"
    report = api.audit([corpus], ["ort-cpu"], out, AuditOptions(jobs=2, batch=1))
    folders = sorted(p.name for p in (out / "builds").iterdir())  # broken.onnx never reached a build
    assert len(folders) == 2 and all(re.fullmatch(r"cnn\.ort-cpu\.[0-9a-f]{8}", f) for f in folders), folders
    assert all(re.fullmatch(r"[0-9a-f]{32}\.json", p.name) for p in (out / "cells").iterdir())  # keys
    cells = {Path(c.model).relative_to(corpus).as_posix(): c for c in report.cells}
    assert set(cells) == {"a/cnn.onnx", "b/cnn.onnx", "copy.onnx", "broken.onnx"}
    links = {name: cell.details.get("report") for name, cell in cells.items()}
    assert links["a/cnn.onnx"] != links["b/cnn.onnx"] and links["copy.onnx"] == links["a/cnn.onnx"]
    assert links["broken.onnx"] is None
    assert sorted(str(links[name]) for name in ("a/cnn.onnx", "b/cnn.onnx")) == \
        [f"builds/{folder}/report.md" for folder in folders]

    moved = Path(shutil.move(out, tmp_path / "elsewhere"))  # links are relative to the page
    page = (moved / "audit.html").read_text()
    hrefs = re.findall(r'<a href="([^"]+)">', page)
    assert sorted(hrefs) == sorted(str(links[name]) for name in ("a/cnn.onnx", "b/cnn.onnx", "copy.onnx"))
    assert all(not Path(href).is_absolute() and (moved / href).is_file() for href in hrefs)
    broken = cells["broken.onnx"]
    assert broken.category == "invalid-model" and broken.message
    visible = html.unescape(re.sub(r"<[^>]*>", " ", page))  # the text a reader sees, without tags or titles
    assert f"at check: {broken.message}" in visible

    again = api.audit([corpus], ["ort-cpu"], moved, AuditOptions(jobs=2, batch=1))
    assert again.reused == 4 and [c.details.get("report") for c in again.cells] == \
        [c.details.get("report") for c in report.cells]
    # a run with other options (another key) rebuilt b/cnn's folder: the reused cell stops linking it
    (moved / str(links["b/cnn.onnx"])).write_text("# another build\n")
    stale = api.audit([corpus], ["ort-cpu"], moved, AuditOptions(jobs=2, batch=1))
    assert stale.reused == 4 and [c.details.get("report") for c in stale.cells] == \
        [None if c.model.endswith("b/cnn.onnx") else c.details.get("report") for c in report.cells]


def test_audit_prints_a_line_per_cell_off_a_terminal(corpus: Path, tmp_path: Path) -> None:
    """In a pipe the progress bar is silent: each finished cell is a line on stderr instead, and
    with --json stdout is still only the JSON."""
    result = run("audit", str(corpus / "cnn.onnx"), str(corpus / "broken.onnx"), "-t", "ort-cpu",
                 "-t", "jetson-nano", "-o", str(tmp_path / "out"), "--stages", "check", "--jobs", "2",
                 "--json")
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)["cells"]
    lines = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert [line.split("] ")[0] for line in lines] == ["[1/4", "[2/4", "[3/4", "[4/4"], result.stderr
    assert all(re.search(r", \d+\.\d s$", line) for line in lines)
    said = sorted(re.sub(r"^\[\d/4\] |, \d+\.\d s$", "", line) for line in lines)
    outcomes = [f"failed ({c['category']}) at {c['stage']}" if c["status"] == "failed" else c["status"]
                for c in cells]
    assert said == sorted(f"{Path(c['model']).name} @ {c['target']}: {outcome}"
                          for c, outcome in zip(cells, outcomes, strict=True))
    assert "broken.onnx @ jetson-nano: failed (invalid-model) at check" in said
    assert "cnn.onnx @ ort-cpu: legal-as-exported" in said


def test_reports_only_keeps_each_cells_reports_and_drops_its_engines(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    report = api.audit([corpus / "cnn.onnx"], ["ort-cpu"], out, AuditOptions(reports_only=True))
    cell = report.cells[0]
    assert cell.status == "verified"
    kept = sorted(p.name for p in (out / "builds").rglob("*") if p.is_file())
    assert kept == ["report.json", "report.md"]
    assert (out / cell.details["report"]).is_file()  # the audit page still links the cell's report


def test_the_page_groups_models_by_the_family_their_hints_name(tmp_path: Path) -> None:
    folder = tmp_path / "zoo"
    folder.mkdir()
    for name, family in (("b_cnn", "timm"), ("a_encoder", "transformers"), ("c_cnn", "timm"), ("d", None)):
        onnx.save(encoder_block() if "encoder" in name else small_cnn(), folder / f"{name}.onnx")
        if family:
            (folder / f"{name}.hints.json").write_text(json.dumps({"family": family}))
    report = api.audit([folder], ["ort-cpu"], tmp_path / "audit", AuditOptions(stages=("check",)))
    assert report.families == {str(folder / "b_cnn.onnx"): "timm", str(folder / "c_cnn.onnx"): "timm",
                               str(folder / "a_encoder.onnx"): "transformers"}
    page = (tmp_path / "audit" / "audit.html").read_text()
    order = [page.index(text) for text in ("timm (2)", "b_cnn", "c_cnn", "transformers (1)", "a_encoder",
                                           "no family (1)", "d.onnx")]
    assert order == sorted(order)  # each family's row, then its models; those without a family last
    family_row = page[page.index("timm (2)"):page.index("</tr>", page.index("timm (2)"))]
    assert "<b>2/2</b>" in family_row  # both legal on ort-cpu
    assert page.count("<tbody>") == 3  # a group each, which the page's script sorts within


def test_the_page_groups_by_exporter_and_sorts_failures_first(tmp_path: Path) -> None:
    folder = tmp_path / "zoo"
    folder.mkdir()
    onnx.save(small_cnn(), folder / "good_dynamo.onnx")
    (folder / "broken_ts.onnx").write_bytes(b"not a model")
    for name, exporter in (("good_dynamo", "dynamo"), ("broken_ts", "torchscript")):
        (folder / f"{name}.hints.json").write_text(json.dumps({"family": "timm", "exporter": exporter}))
    report = api.audit([folder], ["ort-cpu"], tmp_path / "audit", AuditOptions(stages=("check",)))
    assert sorted(report.families.values()) == ["timm / dynamo", "timm / torchscript"]
    page = (tmp_path / "audit" / "audit.html").read_text()
    assert "timm / dynamo (1)" in page and "timm / torchscript (1)" in page
    # each cell's sort key ranks its status: a failure sorts before a cell that deployed
    ranks = {text: int(rank) for rank, text in re.findall(r'<td data-key="(\d+) ([^"]*)"', page)}
    assert ranks.keys() == {"failed: invalid-model", "legal-as-exported"}, ranks
    assert ranks["failed: invalid-model"] < ranks["legal-as-exported"]


def test_no_fp16_analysis_reaches_each_cells_build_and_keys_it_apart(corpus: Path, tmp_path: Path) -> None:
    """As `build --no-fp16-analysis`: the Xavier's fp16 build analyses half by default, not with
    the flag, and the two are stored apart (a rerun without the flag does not reuse its cell)."""
    out = tmp_path / "audit"
    flags = ("audit", str(corpus / "cnn.onnx"), "-t", "jetson-xavier", "-o", str(out), "--json")

    def half(result: subprocess.CompletedProcess[str]) -> dict | None:
        assert result.returncode == 0, result.stderr
        (cell,) = json.loads(result.stdout)["cells"]
        assert cell["status"] == "legalized"
        return json.loads((out / cell["details"]["report"]).with_name("report.json").read_text())["half"]

    assert half(run(*flags, "--no-fp16-analysis")) is None
    analysed = run(*flags)
    assert half(analysed)["runs"] >= 1
    assert json.loads(analysed.stdout)["reused"] == 0
