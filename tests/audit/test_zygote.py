"""Cells forked from the audit's zygote (imports done once) end as cells started as processes of
their own: the same results, and a hang, a memory hog or a broken worker still ends that cell only."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.audit.isolate import run_isolated
from deploycc.audit.run import AuditOptions
from deploycc.audit.zygote import Zygote, zygote
from deploycc.records.audit import CellSpec
from deploycc.taxonomy import Failure
from examples.make_models import small_cnn

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks (POSIX only)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    onnx.save(small_cnn(), folder / "cnn.onnx")
    (folder / "broken.onnx").write_bytes(b"not a model")
    return folder


def _cells(report) -> list[tuple[str, str, str | None, bool | None]]:
    return [(Path(c.model).name, c.status, c.category, c.legal_as_exported) for c in report.cells]


def test_forked_cells_end_as_started_ones(corpus: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    options = AuditOptions(jobs=2, stages=("check", "legalize", "build", "verify"))
    forked = api.audit([corpus], ["ort-cpu", "jetson-nano"], tmp_path / "forked", options)
    monkeypatch.setenv("DEPLOYCC_NO_ZYGOTE", "1")
    started = api.audit([corpus], ["ort-cpu", "jetson-nano"], tmp_path / "started", options)
    assert _cells(forked) == _cells(started)
    assert ("cnn.onnx", "verified", None, True) in _cells(forked)
    assert ("broken.onnx", "failed", "invalid-model") in [cell[:3] for cell in _cells(forked)]


def _spec(corpus: Path, tmp_path: Path) -> CellSpec:
    return CellSpec(model=str(corpus / "cnn.onnx"), model_sha256="0", target="ort-cpu", target_hash="0",
                    stages=("check", "legalize", "build", "verify"), workdir=str(tmp_path / "cell"))


def test_a_forked_cell_that_hangs_or_eats_memory_ends_alone(corpus: Path, tmp_path: Path) -> None:
    with zygote() as forks:
        assert forks is not None
        hung = run_isolated(_spec(corpus, tmp_path), timeout=0.05, memory_limit=None, zygote=forks)
        assert hung.category == "timeout"
        # the memory limit holds in the forked cell (and the ONNX Runtime process it starts): 1 MiB
        # on top of what the zygote had mapped, for a model of 64 MB (a small one can run in the
        # heap the zygote already has). Where the first allocation over it lands differs by
        # machine: in the cell (a MemoryError it reports) or in the ORT process the cell starts
        # (which exits without answering)
        weights = numpy_helper.from_array(np.ones((16 << 20,), np.float32), "w")
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "big",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16 << 20])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16 << 20])],
                                  [weights])
        big = tmp_path / "big.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), big)
        spec = _spec(corpus, tmp_path)
        spec.model = str(big)
        starved = run_isolated(spec, timeout=120, memory_limit=1 << 20, zygote=forks)
        assert starved.status == "failed", starved.message
        assert (starved.category == Failure.OUT_OF_MEMORY
                or "exited 1 without answering" in starved.message), (starved.category, starved.message)
        fine = run_isolated(_spec(corpus, tmp_path), timeout=300, memory_limit=None, zygote=forks)
        assert fine.status == "verified", fine.message  # the zygote goes on after both


def test_a_worker_that_fails_says_how_it_exited(corpus: Path, tmp_path: Path) -> None:
    forks = Zygote()
    try:
        folder = tmp_path / "bad"
        folder.mkdir()
        code, stdout, stderr = forks.run("not json", folder, timeout=120, memory_limit=None)
        assert code == 1 and not stdout.strip() and "JSONDecodeError" in stderr
        folder = tmp_path / "good"
        folder.mkdir()
        code, stdout, _ = forks.run(json.dumps(asdict(_spec(corpus, tmp_path))), folder, timeout=300,
                                    memory_limit=None)
        assert code == 0 and json.loads(stdout.strip().splitlines()[-1])["status"] == "verified"
    finally:
        forks.close()


def test_cells_go_on_when_the_zygote_is_gone(corpus: Path, tmp_path: Path) -> None:
    with zygote() as forks:
        assert forks is not None
        forks._process.kill()
        forks._process.wait()
        result = run_isolated(_spec(corpus, tmp_path), timeout=300, memory_limit=None, zygote=forks)
        assert result.status == "verified", result.message  # started as a process of its own


def test_cells_side_by_side_share_the_cores_in_their_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ORT session asked for every core (threads 0) takes the audit's share of them while its
    cells run side by side, and the cells' processes keep the memory they free (glibc's malloc
    settings); a user's own settings stand, and nothing is left set afterwards."""
    import subprocess
    import sys

    from deploycc.audit.run import CELL_MALLOC, _cell_environment
    from deploycc.verify.runner import THREADS_ENV, session

    monkeypatch.delenv(THREADS_ENV, raising=False)
    for name in CELL_MALLOC:
        monkeypatch.delenv(name, raising=False)
    model = small_cnn().SerializeToString()
    with _cell_environment(jobs=len(os.sched_getaffinity(0))):
        assert os.environ[THREADS_ENV] == "1"
        assert session(model, threads=0).get_session_options().intra_op_num_threads == 1
        assert session(model, threads=3).get_session_options().intra_op_num_threads == 3
        asked = "import os; print(os.environ['MALLOC_TRIM_THRESHOLD_'])"
        seen = subprocess.run([sys.executable, "-c", asked], capture_output=True, text=True,
                              check=True).stdout.strip()
        assert seen == CELL_MALLOC["MALLOC_TRIM_THRESHOLD_"]  # what a cell's process starts with
    assert THREADS_ENV not in os.environ and not any(name in os.environ for name in CELL_MALLOC)
    monkeypatch.setenv(THREADS_ENV, "5")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    with _cell_environment(jobs=2):
        assert os.environ[THREADS_ENV] == "5" and os.environ["MALLOC_TRIM_THRESHOLD_"] == "0"
        assert os.environ["MALLOC_TOP_PAD_"] == CELL_MALLOC["MALLOC_TOP_PAD_"]
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "0" and "MALLOC_TOP_PAD_" not in os.environ


def test_cells_end_with_an_audit_that_died(tmp_path: Path) -> None:
    """An audit killed or interrupted lets go of its zygote with cells still running: nobody would
    end them at their timeout, so the zygote kills them (and what they started)."""
    import threading
    import time

    factory = tmp_path / "hangs.py"
    factory.write_text("import time\n\n\ndef model():\n    time.sleep(600)\n")  # a cell that runs on
    spec = CellSpec(model=f"{factory}:model", model_sha256="0", target="ort-cpu", target_hash="0",
                    stages=("check",), workdir=str(tmp_path / "cell"))
    forks = Zygote()
    ended: list[tuple[int, str, str]] = []
    folder = tmp_path / "run"
    folder.mkdir()
    runner = threading.Thread(target=lambda: ended.append(
        forks.run(json.dumps(asdict(spec)), folder, timeout=600, memory_limit=None)))
    runner.start()
    deadline = time.monotonic() + 60
    while not forks._by_pid and time.monotonic() < deadline:  # the cell has started
        time.sleep(0.05)
    assert forks._by_pid, "the cell did not start"
    time.sleep(1.0)  # and reached the factory
    started = time.monotonic()
    forks.close()  # what the audit's death does to the zygote's requests
    runner.join(timeout=60)
    assert ended and ended[0][0] == -9, ended  # SIGKILL
    assert time.monotonic() - started < 30
