"""The PyTorch front end on small modules: both exporters, the fallback from one to the other,
each failure class, and the .pt2 / .pt / factory inputs, built for real targets (ORT, OpenVINO,
and a Jetson bundle) with every export proven against torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch (make test installs it)")

from deploycc import api  # noqa: E402
from deploycc.errors import ExportFailed, ModelInputError, OptionError  # noqa: E402
from deploycc.options import BuildOptions  # noqa: E402
from deploycc.records.export import (  # noqa: E402
    DATA_DEPENDENT,
    OPSET_CEILING,
    TORCH_FAILURE,
    UNSUPPORTED_OP,
)
from deploycc.records.shapes import ShapeProfile  # noqa: E402
from deploycc.taxonomy import BuildStatus, Stage  # noqa: E402
from tests.frontend import torch_models as models  # noqa: E402

MODELS = Path(models.__file__)
QUICK = BuildOptions(bench=False)


def test_module_builds_on_ort_with_dynamo_and_a_proven_dynamic_batch(tmp_path: Path) -> None:
    module, inputs = models.small_net()
    report = api.build(module, inputs, target="ort-cpu", outdir=tmp_path / "out", options=QUICK)
    assert report.status == BuildStatus.VERIFIED, report.summary
    export = report.export
    assert export is not None and export.chosen == "dynamo" and len(export.attempts) == 1
    attempt = export.attempts[0]
    assert attempt.opset_written is not None and attempt.opset_written >= 18
    assert attempt.dynamic == {"image": {"0": attempt.dynamic["image"]["0"]}}  # the batch, and only it
    assert [p.shapes["image"][0] for p in attempt.proofs] == [1, 2]  # the example, then a second batch
    assert all(p.verification.passed for p in attempt.proofs)
    assert export.final is not None and export.final.passed and export.final_against == "the engine"
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written["export"]["chosen"] == "dynamo" and "model.exported.onnx" in written["files"]
    import onnxruntime  # what the exporter wrote is kept, weights and all (torch writes them beside it)

    exported = onnxruntime.InferenceSession(str(tmp_path / "out" / "model.exported.onnx"))
    assert exported.run(None, {"image": inputs[0].numpy()})[0].shape == (1, 5)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no attempt left behind


def test_jetson_exports_with_torchscript_at_its_ceiling_and_a_static_batch(tmp_path: Path) -> None:
    module, inputs = models.small_net()
    report = api.build(module, inputs, target="jetson-xavier", outdir=tmp_path / "x", options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    attempt = report.export.attempts[0]
    assert attempt.exporter == "torchscript" and attempt.opset_written == 17  # TensorRT 8.5 reads <= 17
    assert attempt.dynamic == {}  # the board builds batch 1: exported static
    assert report.export.final is not None and report.export.final.passed
    assert "legalized model" in report.export.final_against


def test_a_dynamic_range_becomes_the_engine_profile_beside_the_batch(tmp_path: Path) -> None:
    module, inputs = models.small_net()
    report = api.build(module, inputs, target="gpu-trt10", outdir=tmp_path / "t", options=QUICK,
                       dynamic=["image:2:8:16:32"])
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    attempt = report.export.attempts[0]
    assert set(attempt.dynamic["image"]) == {"0", "2"}  # the batch opened by default, and the height asked
    assert [p.shapes["image"] for p in attempt.proofs] == [[1, 3, 16, 16], [2, 3, 32, 16]]  # the range's max
    profile = report.shapes.inputs[0].profile
    assert profile == ShapeProfile("image", [1, 3, 8, 16], [1, 3, 16, 16], [1, 3, 32, 16])


def test_dynamo_without_a_translation_falls_back_to_torchscript(tmp_path: Path) -> None:
    report = api.build(models.MinMax(), (torch.randn(2, 6),), target="ort-cpu", outdir=tmp_path / "o",
                       options=QUICK)
    assert report.status == BuildStatus.VERIFIED, report.summary
    first, second = report.export.attempts
    assert first.exporter == "dynamo" and first.failure is not None
    assert first.failure.kind == UNSUPPORTED_OP and "amin" in (first.failure.op or "")  # aminmax decomposed
    assert second.exporter == "torchscript" and report.export.chosen == "torchscript"
    assert "dynamo" in report.export.reason and report.export.second_exporter_needed


def test_torchscript_without_a_translation_falls_back_to_dynamo_on_a_jetson(tmp_path: Path) -> None:
    report = api.build(models.Differences(), (torch.randn(1, 6),), target="jetson-xavier",
                       outdir=tmp_path / "x", options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    first, second = report.export.attempts
    assert first.failure is not None and first.failure.kind == UNSUPPORTED_OP
    assert "diff" in first.failure.message
    assert second.exporter == "dynamo" and report.export.chosen == "dynamo"
    assert report.legalize is not None and report.legalize.opset["after"] == 17  # dynamo wrote 18+


def test_data_dependent_guard_is_classified_by_both_exporters(tmp_path: Path) -> None:
    """dynamo stops at the guard; the tracer would record the branch the example took, so it is
    refused too (tests/frontend/test_trace_trust.py has the rest)."""
    report = api.build(models.Branch(), (torch.ones(2, 3),), target="ort-cpu", outdir=tmp_path / "o",
                       options=QUICK)
    first, second = report.export.attempts
    assert first.failure is not None and first.failure.kind == DATA_DEPENDENT
    assert "--dynamic" not in first.failure.hint  # none was given
    assert first.failure.module_path is not None and "torch_models.py" in first.failure.module_path
    assert second.failure is not None and second.failure.kind == DATA_DEPENDENT
    assert report.status == BuildStatus.FAILED and report.exit_code == 1


def test_an_op_no_exporter_has_names_the_op_and_the_module(tmp_path: Path) -> None:
    report = api.build(models.Nested(), (torch.randn(1, 3, 3),), target="ort-cpu", outdir=tmp_path / "o",
                       options=QUICK)
    assert report.status == BuildStatus.FAILED and report.stage == Stage.EXPORT
    assert report.exit_code == 1 and "\n" not in report.summary
    failures = {a.exporter: a.failure for a in report.export.attempts}
    assert all(f is not None and f.kind == UNSUPPORTED_OP for f in failures.values())
    assert "linalg_eig" in (failures["torchscript"].op or "")
    assert failures["torchscript"].module_path == "inner.1"  # from the IR TorchScript prints
    assert failures["dynamo"].module_path == "inner.1"  # found by one eager run
    table = [row for row in (tmp_path / "o" / "report.md").read_text().splitlines() if row.startswith("| ")]
    assert sum("unsupported-op" in line for line in table) == 2  # one row per exporter


def test_an_op_above_the_nano_opset_ceiling_says_which_targets_read_it(tmp_path: Path) -> None:
    inputs = (torch.randn(1, 2, 6, 6), torch.rand(1, 3, 3, 2) * 2 - 1)
    report = api.build(models.Grid(), inputs, target="jetson-nano", outdir=tmp_path / "n", options=QUICK)
    assert report.stage == Stage.EXPORT and report.exit_code == 1
    kinds = [a.failure.kind for a in report.export.attempts if a.failure]
    assert kinds == [OPSET_CEILING, OPSET_CEILING]  # TorchScript refuses; dynamo's 18 cannot go down to 13
    torchscript = report.export.attempts[0].failure
    assert torchscript.needs_opset == 16 and "jetson-xavier" in torchscript.hint
    # the same module on the Xavier (opset 17) builds
    xavier = api.build(models.Grid(), inputs, target="jetson-xavier", outdir=tmp_path / "x", options=QUICK)
    assert xavier.status == BuildStatus.PENDING_ON_DEVICE, xavier.summary
    # bilinear sampling is written out as gathers, and so goes down to the Nano's opset
    bilinear = api.build(models.Grid("bilinear"), inputs, target="jetson-nano", outdir=tmp_path / "b",
                         options=QUICK)
    assert bilinear.status == BuildStatus.PENDING_ON_DEVICE, bilinear.summary


@pytest.mark.parametrize("causal", [False, True], ids=["windows", "causal"])
def test_attention_reaches_the_nano_through_the_back_ported_translation(tmp_path: Path, causal: bool) -> None:
    inputs = (torch.randn(1, 2, 3, 5, 8),)
    report = api.build(models.WindowAttention(causal), inputs, target="jetson-nano", outdir=tmp_path / "n",
                       options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    torchscript = report.export.attempts[0]
    assert torchscript.exporter == "torchscript" and torchscript.failure is None
    assert torchscript.opset_written == 13 and report.export.chosen == "torchscript"
    assert report.export.final is not None and report.export.final.passed  # torch against the legalized model
    # the back-port lives only as long as its export: torch's own registry refuses opset 13 again
    with pytest.raises(Exception, match="opset version 13 is not supported"):
        torch.onnx.export(models.WindowAttention(), inputs, str(tmp_path / "plain.onnx"), dynamo=False,
                          opset_version=13)


def test_a_failure_of_torch_itself(tmp_path: Path) -> None:
    with pytest.raises(ExportFailed) as raised:
        api.legalize(models.Broken(), (torch.randn(2, 4),), target="ort-cpu", output=tmp_path / "m.onnx")
    assert TORCH_FAILURE in str(raised.value) and "\n" not in str(raised.value)
    assert raised.value.exit_code == 1 and not (tmp_path / "m.onnx").exists()


def test_a_batch_traced_as_a_constant_is_caught_at_a_second_size_and_exported_static(tmp_path: Path) -> None:
    report = api.build(models.FlattenByNumber(), (torch.randn(2, 3, 4),), target="ort-cpu",
                       outdir=tmp_path / "o", options=QUICK, exporters=["torchscript"])
    attempt = report.export.attempts[0]
    assert any("exported static" in note for note in attempt.notes), attempt.notes
    assert attempt.dynamic == {} and report.status == BuildStatus.VERIFIED, report.summary


def test_pt2_archive_keeps_its_own_dims(tmp_path: Path) -> None:
    module, _ = models.small_net()
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(module, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"image": {0: batch}})
    archive = tmp_path / "net.pt2"
    torch.export.save(program, str(archive))
    report = api.build(str(archive), "openvino-cpu", tmp_path / "ov", QUICK)
    assert report.status == BuildStatus.VERIFIED, report.summary
    assert report.export.kind == "pt2" and report.export.attempts[0].dynamic  # its batch stayed dynamic
    assert report.model == str(archive)


def test_torchscript_archive_and_factory_from_the_command_line(tmp_path: Path) -> None:
    scripted = torch.jit.trace(models.small_net_alone(), torch.randn(1, 3, 16, 16))
    archive = tmp_path / "net.pt"
    torch.jit.save(scripted, str(archive))
    run = _cli("build", str(archive), "--input", "image:1x3x16x16", "-o", str(tmp_path / "pt"), "--no-bench")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "pt" / "report.json").read_text())["export"]["kind"] == "torchscript"
    # a factory returning only the module takes its inputs from an .npz keyed by forward's names
    np.savez(tmp_path / "x.npz", image=np.random.default_rng(0).standard_normal((1, 3, 16, 16), np.float32))
    run = _cli("build", f"{MODELS}:small_net_alone", "--example-inputs", str(tmp_path / "x.npz"),
               "-t", "openvino-cpu", "-o", str(tmp_path / "f"), "--no-bench", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["export"]["kind"] == "factory"


def test_command_line_errors_are_one_line_with_their_exit_codes(tmp_path: Path) -> None:
    no_inputs = _cli("build", f"{MODELS}:small_net_alone", "-o", str(tmp_path / "a"))
    assert no_inputs.returncode == 2 and "no example inputs" in no_inputs.stderr
    assert "Traceback" not in no_inputs.stderr and len(no_inputs.stderr.strip().splitlines()) == 1
    not_module = _cli("build", f"{MODELS}:not_a_module", "-o", str(tmp_path / "b"))
    assert not_module.returncode == 2 and "not an nn.Module" in not_module.stderr
    failed = _cli("check", f"{MODELS}:small_net", "-t", "ort-cpu", "--dynamic", "image:7")
    assert failed.returncode == 2 and "axis out of range" in failed.stderr
    eigen = _cli("legalize", f"{MODELS}:small_net", "--dynamic", "nothing:0", "-o", str(tmp_path / "c.onnx"))
    assert eigen.returncode == 2 and "no input named 'nothing'" in eigen.stderr
    onnx_with_torch_flag = _cli("check", str(tmp_path / "m.onnx"), "--input", "x:1")
    assert onnx_with_torch_flag.returncode == 2 and "is for a PyTorch model" in onnx_with_torch_flag.stderr


def test_check_exports_per_target(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)  # numpy arrays are taken as example inputs too
    inputs = (rng.standard_normal((1, 2, 6, 6), np.float32),
              rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32))
    report = api.check(models.Grid(), inputs, targets=["jetson-xavier", "ort-cpu"])
    assert report.exit_code == 0 and [t.target for t in report.targets] == ["jetson-xavier", "ort-cpu"]
    assert any("torchscript" in note for note in report.notes)
    assert any("dynamo" in note for note in report.notes)


def test_bad_sources_are_refused_before_any_export(tmp_path: Path) -> None:
    (tmp_path / "weights.pt").write_bytes(b"not an archive")
    with pytest.raises(ModelInputError, match="not a TorchScript archive"):
        api.torch_source(str(tmp_path / "weights.pt"), input_specs=["x:1x3"])
    with pytest.raises(OptionError, match="NAME:DIMS"):
        api.torch_source(models.SmallNet(), input_specs=["image=1x3"])


def test_audit_takes_modules_and_factories_and_classifies_export_failures(tmp_path: Path) -> None:
    """The audit's cells run in their own processes: a module is saved for them (a .pt2, or a trace
    where torch.export stops at a guard), a factory is imported there; a failed export is a cell
    failed at the export stage with the front end's class, and a rerun reuses every cell."""
    listing = tmp_path / "models.txt"
    listing.write_text(f"{MODELS}:nested\n")
    entries = [models.small_net(), (models.Branch(), (torch.ones(2, 3),)), listing]
    report = api.audit(entries, ["ort-cpu"], tmp_path / "audit")
    cells = {Path(c.model).name: c for c in report.cells}
    assert set(cells) == {"SmallNet.pt2", "Branch.pt", "torch_models.py:nested"}
    assert cells["SmallNet.pt2"].status == "verified" and cells["SmallNet.pt2"].legal_as_exported
    # torch.export stops at its guard, so the module is saved as a trace, which fixed the branch
    # the example took: the cell refuses it as a build of the module would
    refused = cells["Branch.pt"]
    assert refused.status == "failed" and refused.stage == Stage.EXPORT, refused.message
    assert refused.category == "dynamic-shape" and DATA_DEPENDENT in refused.message
    assert "torch_models.py:42" in refused.message
    failed = cells["torch_models.py:nested"]
    assert failed.status == "failed" and failed.stage == Stage.EXPORT and failed.category == "unsupported-op"
    assert "linalg_eig" in failed.message and not failed.regressed
    assert (tmp_path / "audit" / failed.details["report"]).is_file()
    again = api.audit(entries, ["ort-cpu"], tmp_path / "audit")
    assert again.reused == 3


def test_an_audit_exports_once_per_export_policy_and_never_across_weights(tmp_path: Path) -> None:
    """ort-cpu and openvino-cpu export alike (dynamo, the same opset and axes): the second cell
    takes the first's proven export; the same module with other weights exports again."""
    from deploycc.frontend import shared_exports
    from deploycc.frontend.build import build_from_torch
    from deploycc.targets.registry import resolve

    report = api.audit([f"{MODELS}:small_net"], ["ort-cpu", "openvino-cpu"], tmp_path / "audit")
    assert [c.status for c in report.cells] == ["verified", "verified"], [c.message for c in report.cells]
    shared = [c for c in report.cells if shared_exports.SHARED_NOTE in
              (tmp_path / "audit" / c.details["report"]).read_text()]
    assert len(shared) == 1  # one cell exported, the other took its export
    # and the model's exports went with its last cell (a large model's take GBs)
    assert list((tmp_path / "audit" / "exports").iterdir()) == []

    env = {shared_exports.CACHE_ENV: str(tmp_path / "cache"), shared_exports.MODEL_ENV: "small-net"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        target, notes = resolve("ort-cpu"), []
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            source = api.torch_source(models.SmallNet(), (torch.ones(1, 3, 16, 16),))
            built = build_from_torch(source, target, tmp_path / f"b{len(notes)}", QUICK)
            assert built.status == BuildStatus.VERIFIED, built.summary  # proven against its own torch
            notes.append(shared_exports.SHARED_NOTE in built.export.attempts[0].notes)
    assert notes == [False, True, False]


def test_an_audit_tries_the_exporters_in_the_order_it_is_given(tmp_path: Path) -> None:
    """--exporters puts one exporter first on every target (how a target's own order is measured
    against the other); the cells are not the default order's cells."""
    from deploycc.records.audit import AuditOptions

    entry = [f"{MODELS}:small_net"]
    default = api.audit(entry, ["ort-cpu"], tmp_path / "audit")
    swapped = api.audit(entry, ["ort-cpu"], tmp_path / "audit",
                        AuditOptions(exporters=("torchscript", "dynamo")))
    assert swapped.reused == 0
    chosen = [cell.details["export"]["chosen"] for cell in (*default.cells, *swapped.cells)]
    assert chosen == ["dynamo", "torchscript"]  # ort-cpu's own order puts dynamo first
    assert swapped.cells[0].status == "verified"
    refused = _cli("audit", *entry, "-t", "ort-cpu", "-o", str(tmp_path / "bad"), "--exporters", "onnx")
    assert refused.returncode == 2 and "unknown exporter 'onnx'" in refused.stderr
    assert "Traceback" not in refused.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploycc.cli", *args], capture_output=True, text=True,
                          timeout=600)
