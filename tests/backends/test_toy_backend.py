"""Adding a backend is one module and one registry line: the toy backend (toy_backend.py, ONNX
Runtime's CPU under a kind of its own) and its target file get check, legalize, build with
verification, `--precision int8` through its int8 recipe, and the audit, with nothing else
told about it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from deploycc import api
from deploycc.backends.base import BackendStages
from deploycc.errors import OptionError, TargetError
from deploycc.options import BuildOptions, QuantizeOptions
from deploycc.records.audit import AuditOptions
from deploycc.targets import registry
from deploycc.targets.schema import BACKENDS
from deploycc.taxonomy import BuildStatus, CellStatus, Precision
from examples.make_models import small_cnn
from tests.backends import toy_backend


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The toy registered (one line in BACKENDS) and its target file on DEPLOYCC_TARGET_PATH."""
    monkeypatch.setitem(BACKENDS, toy_backend.TOY_KIND, toy_backend.ENTRY)
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "toy-cpu.toml").write_text(toy_backend.TOY_TARGET)
    monkeypatch.setenv(registry.TARGET_PATH_ENV, str(folder))
    return "toy-cpu"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("toy") / "cnn.onnx"
    onnx.save(small_cnn(), path)
    return path


def test_a_target_of_an_unregistered_kind_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "toy-cpu.toml").write_text(toy_backend.TOY_TARGET)
    monkeypatch.setenv(registry.TARGET_PATH_ENV, str(tmp_path))
    with pytest.raises(TargetError, match=r"'backend\.kind'"):
        registry.resolve("toy-cpu")


def test_check_legalize_and_build_reach_the_toy(toy: str, cnn: Path, tmp_path: Path) -> None:
    checked = api.check(cnn, [toy])
    assert checked.targets[0].target == toy and checked.targets[0].backend == "toy"
    legalized = api.legalize(cnn, toy, tmp_path / "legal.onnx")
    assert legalized.success and (tmp_path / "legal.onnx").is_file()
    report = api.build(cnn, toy, tmp_path / "built", BuildOptions(bench=False))
    assert report.status == BuildStatus.VERIFIED, report.summary
    assert report.artifact is not None and report.artifact.kind == "toy-onnx"
    assert (tmp_path / "built" / "model.toy.onnx").is_file()
    assert report.verification is not None and report.verification.passed


def test_int8_goes_through_the_toys_recipe(toy: str, cnn: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    samples = [{"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(20)]
    options = BuildOptions(bench=False, precision=Precision.INT8, quantize=QuantizeOptions(samples=samples))
    report = api.build(cnn, toy, tmp_path / "int8", options)
    assert report.status == BuildStatus.VERIFIED, report.summary
    quantized = report.quantization
    assert quantized is not None and quantized.within_budget
    # the recipe's quantizer and layout, timed here against fp32 (int8 kept only where faster)
    assert quantized.method.startswith("onnxruntime quantize_static: QDQ, u8 activations")
    assert quantized.method.endswith("(timed on ONNX Runtime)") and quantized.speed is not None
    assert report.precision == quantized.decision
    if quantized.decision == Precision.INT8:
        assert (tmp_path / "int8" / "model.int8.onnx").is_file()
    monkeypatch.setattr(toy_backend.ToyBackend, "stages", BackendStages())  # a backend without a recipe
    with pytest.raises(OptionError, match="no INT8 path for the toy backend"):
        api.build(cnn, toy, tmp_path / "none", options)


def test_the_audit_runs_the_toy_in_its_cells(toy: str, cnn: Path, tmp_path: Path) -> None:
    worker = (sys.executable, str(Path(toy_backend.__file__)))  # the cell worker, toy registered
    report = api.audit([cnn], [toy], tmp_path / "audit", AuditOptions(worker=worker))
    (cell,) = report.cells
    assert cell.target == toy and cell.status == CellStatus.VERIFIED, cell.message


def test_the_backend_interface_stays_small() -> None:
    """Build and load, its environment and options, and what it contributes (`stages`, `runners`):
    what the engine is belongs to the target (targets.schema.BackendSpec), not to a hook here."""
    from deploycc.backends.base import Backend

    members = {name for name in {*vars(Backend), *Backend.__annotations__} if not name.startswith("_")}
    assert members == {"kind", "unavailable_reason", "environment", "backend_options", "build", "load",
                       "stages", "runners"}
