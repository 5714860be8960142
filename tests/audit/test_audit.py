"""`deploycc audit`: the matrix, the reports, resuming, and cells whose process really crashes,
really hangs or really runs out of memory while the audit goes on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest

from deploycc import api
from deploycc.audit.cells import CATEGORIES, STATUSES, CellSpec
from deploycc.audit.isolate import run_isolated
from deploycc.audit.run import AuditOptions
from deploycc.errors import OptionError
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
    assert "<script" not in page and "http" not in page.replace("<!DOCTYPE html>", "")
    assert "as exported vs after deploycc" in page and "encoder.onnx" in page
    assert json.loads((out / "audit.json").read_text())["counts"] == report.counts
    assert "## Top failure causes" in (out / "audit.md").read_text()
    again = api.audit([corpus], ["ort-cpu", "jetson-nano"], out, options)
    assert again.reused == 6 and [c.status for c in again.cells] == [c.status for c in report.cells]
    fresh = api.audit([corpus], ["ort-cpu"], out, AuditOptions(fresh=True, stages=("check",)))
    assert fresh.reused == 0


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
    assert encoder.status == "failed" and encoder.category == "dynamic-shape"  # seq stays dynamic


def test_audit_cli(corpus: Path, tmp_path: Path) -> None:
    result = run("audit", str(corpus / "cnn.onnx"), "-t", "ort-cpu", "-o", str(tmp_path / "cli"),
                 "--stages", "check", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"] == {"legal-as-exported": 1}
    bad = run("audit", str(tmp_path / "nothing.onnx"), "-t", "ort-cpu", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "no such model" in bad.stderr


def test_the_store_runs_cells_again_that_failed_for_want_of_a_resource_or_time(tmp_path: Path) -> None:
    """A rerun after a board joined the cluster must not reuse 'unschedulable'; a real failure
    (an illegal op) is kept."""
    from deploycc.audit.cells import CellResult
    from deploycc.audit.store import CellStore

    store = CellStore(tmp_path / "cells")
    for key, category in (("a", "unschedulable"), ("b", "timeout"), ("c", "unsupported-op")):
        store.put(key, CellResult(model="m.onnx", target="jetson-xavier", status="failed", stage="schedule",
                                  category=category))
    assert store.get("a") is None and store.get("b") is None
    kept = store.get("c")
    assert kept is not None and kept.cached and kept.category == "unsupported-op"


def test_a_cell_failure_is_categorised_by_its_error_type_not_its_words() -> None:
    from deploycc.audit.worker import _category
    from deploycc.errors import DynamicShapeError, OptionError

    assert _category(DynamicShapeError("jetson-nano needs static shapes")) == "dynamic-shape"
    assert _category(OptionError("--dynamic-batch '1:2': expected MIN:OPT:MAX")) == "backend-error"
