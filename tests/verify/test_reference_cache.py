"""The original's outputs are computed once per inputs: in a process, and across an audit's cells
through the folder the audit names, for the model it names only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from deploycc import api
from deploycc.audit.run import REFERENCES, AuditOptions
from deploycc.io import sha256_file
from deploycc.verify import reference
from deploycc.verify.reference import original_outputs
from deploycc.verify.verification import reference_outputs
from examples.make_models import small_cnn


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    reference._memory.clear()
    return path


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def test_the_original_runs_once_per_inputs_in_a_process(model: Path) -> None:
    runs: list[int] = []

    def run() -> reference.Outputs:
        runs.append(1)
        return {"y": np.arange(3.0)}, "onnxruntime"

    first, _ = original_outputs(model, _feeds(0), run)
    first["y"][0] = 99.0  # a caller's change is its own
    again, kind = original_outputs(model, _feeds(0), run)
    assert len(runs) == 1 and kind == "onnxruntime" and again["y"][0] == 0.0
    original_outputs(model, _feeds(1), run)
    assert len(runs) == 2


def test_cells_share_the_audited_models_outputs_and_no_others(model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "references"
    monkeypatch.setenv(reference.CACHE_ENV, str(folder))
    monkeypatch.setenv(reference.MODEL_ENV, sha256_file(model))
    computed, kind = reference_outputs(model, _feeds(0))  # ONNX Runtime, for real
    assert len(list(folder.rglob("*.npz"))) == 1
    reference._memory.clear()  # another cell's process

    def must_not_run() -> reference.Outputs:
        raise AssertionError("the shared outputs were not used")

    shared, shared_kind = original_outputs(model, _feeds(0), must_not_run)
    assert shared_kind == kind and all(np.array_equal(shared[k], computed[k]) for k in computed)
    other = tmp_path / "other.onnx"
    onnx.save(small_cnn(), other)  # the same bytes elsewhere: a staged copy shares them too
    assert original_outputs(other, _feeds(0), must_not_run)[1] == kind
    monkeypatch.setenv(reference.MODEL_ENV, "0" * 64)  # a model the audit did not name
    reference._memory.clear()
    with pytest.raises(AssertionError, match="not used"):
        original_outputs(model, _feeds(0), must_not_run)


def test_an_audit_runs_each_original_once_for_all_its_targets(model: Path, tmp_path: Path) -> None:
    report = api.audit([model], ["ort-cpu", "openvino-cpu"], tmp_path / "audit",
                       AuditOptions(stages=("check", "legalize", "build", "verify")))
    assert {c.status for c in report.cells} == {"verified"}, [c.message for c in report.cells]
    stored = list((tmp_path / "audit" / REFERENCES).rglob("*.npz"))
    assert len(stored) == 1  # one model, one set of inputs, two targets
