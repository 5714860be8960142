""""Verified" from a torch module means what it says (issue 48): a trace that fixed what the
inputs' data decides is refused (or kept only when the user accepts it, and then said), an export
whose outputs depend on no input is not proven, and the export's output names and the board's
batch do not depend on the exporter or the target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch (make test installs it)")

from deploycc import api  # noqa: E402
from deploycc.errors import OptionError  # noqa: E402
from deploycc.options import BuildOptions  # noqa: E402
from deploycc.records.export import DATA_DEPENDENT, NOT_PROVEN  # noqa: E402
from deploycc.taxonomy import BuildStatus, Stage  # noqa: E402
from tests.frontend import torch_models as models  # noqa: E402

MODELS = Path(models.__file__)
QUICK = BuildOptions(bench=False)


def _positive() -> tuple[torch.Tensor]:
    return (torch.rand(2, 3) + 0.1,)


@pytest.mark.parametrize("target", ["ort-cpu", "jetson-nano"])
def test_a_branch_on_the_inputs_values_is_refused_with_the_line_that_took_it(tmp_path: Path,
                                                                              target: str) -> None:
    """Before: TorchScript traced the branch of the example (positive sums), both proofs drew
    positive inputs, and the build said verified; on negative inputs the engine was off by 2."""
    report = api.build(models.Branch(), _positive(), target=target, outdir=tmp_path / "o", options=QUICK)
    assert report.status == BuildStatus.FAILED and report.stage == Stage.EXPORT and report.exit_code == 1
    traced = next(a for a in report.export.attempts if a.exporter == "torchscript")
    assert traced.failure is not None and traced.failure.kind == DATA_DEPENDENT
    assert "torch_models.py:42 in forward: if x.sum() > 0:" in traced.failure.message
    assert "--accept-trace-warnings" in traced.failure.hint
    assert not (tmp_path / "o" / "model.legalized.onnx").exists()


def test_an_accepted_trace_builds_and_says_so_with_torchs_own_warning(tmp_path: Path) -> None:
    report = api.build(models.Branch(), _positive(), target="ort-cpu", outdir=tmp_path / "o", options=QUICK,
                       accept_trace_warnings=True)
    assert report.status == BuildStatus.VERIFIED, report.summary
    traced = next(a for a in report.export.attempts if a.exporter == "torchscript")
    assert traced.guards_accepted and any("--accept-trace-warnings" in note for note in traced.notes)
    written = json.loads((tmp_path / "o" / "report.json").read_text())
    kept = next(a for a in written["export"]["attempts"] if a["exporter"] == "torchscript")
    assert any("Converting a tensor to a Python boolean" in text for text in kept["trace_warnings"])
    assert "the inputs' data decides at torch_models.py:42" in (tmp_path / "o" / "report.md").read_text()
    # and what it accepted is real: the engine computes the other branch wrong
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.legalized.onnx"))
    negative = -_positive()[0]
    got = session.run(None, {session.get_inputs()[0].name: negative.numpy()})[0]
    assert not np.allclose(got, models.Branch()(negative).numpy())


class SizeBranch(torch.nn.Module):
    """A branch on a size: torch warns alike, but the size is no value of the data."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            x = x + 1
        return torch.relu(x) * 3


class NumpyTanh(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.tanh(x.numpy()))


class NumpyOnWeights(torch.nn.Module):
    """NumPy on a weight alone: a constant, rightly."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 3), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.from_numpy(np.cos(self.weight.numpy()))


class ScaleByItem(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().max().item()


class Heads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.layer(x)
        return {"logits": logits, "probs": torch.softmax(logits, -1)}


def test_a_branch_on_a_size_is_kept_with_torchs_warning_in_the_report(tmp_path: Path) -> None:
    report = api.build(SizeBranch(), _positive(), target="jetson-xavier", outdir=tmp_path / "o",
                       options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    attempt = report.export.attempts[0]
    assert attempt.exporter == "torchscript" and not attempt.data_guards and attempt.trace_warnings


@pytest.mark.parametrize("target", ["ort-cpu", "jetson-xavier"])
def test_an_export_whose_outputs_depend_on_no_input_is_not_proven(tmp_path: Path, target: str) -> None:
    """Before: one Constant, "verified the engine on generated (seed 0, )" and exit 0. (dynamo
    may translate np.tanh into torch, rightly, or refuse it: the tracer is the one asked here.)"""
    source = api.torch_source(NumpyTanh(), _positive())
    source.exporters = ("torchscript",)
    report = api.build(source, target=target, outdir=tmp_path / "o", options=QUICK)
    assert report.status == BuildStatus.FAILED and report.exit_code == 1
    traced = next(a for a in report.export.attempts if a.exporter == "torchscript")
    assert traced.failure is not None and traced.failure.kind == NOT_PROVEN
    assert "depends on an input" in traced.failure.message


def test_numpy_on_weights_and_a_value_taken_by_item_are_told_apart(tmp_path: Path) -> None:
    built = api.build(NumpyOnWeights(), _positive(), target="jetson-xavier", outdir=tmp_path / "w",
                      options=QUICK)
    assert built.status == BuildStatus.PENDING_ON_DEVICE, built.summary
    refused = api.build(ScaleByItem(), _positive(), target="jetson-xavier", outdir=tmp_path / "i",
                        options=QUICK)
    traced = refused.export.attempts[0]
    assert refused.status == BuildStatus.FAILED and traced.failure is not None
    assert traced.failure.kind == DATA_DEPENDENT and ".item()" in traced.failure.message


def test_output_names_are_the_modules_own_on_every_target_and_exporter(tmp_path: Path) -> None:
    """Before: layer_norm_1 on ort-cpu (dynamo), 172 on jetson-xavier and 192 on the Nano."""
    import onnx

    for target in ("ort-cpu", "jetson-xavier", "jetson-nano"):
        report = api.build(Heads(), _positive(), target=target, outdir=tmp_path / target, options=QUICK)
        assert report.status in (BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE), report.summary
        model = onnx.load(str(tmp_path / target / "model.legalized.onnx"))
        assert [output.name for output in model.graph.output] == ["logits", "probs"], target


def test_a_jetson_builds_the_module_at_batch_1_and_says_so(tmp_path: Path) -> None:
    module, _ = models.small_net()
    report = api.build(module, (torch.rand(2, 3, 16, 16),), target="jetson-xavier", outdir=tmp_path / "x",
                       options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    assert report.export.example_shapes == {"image": [1, 3, 16, 16]}
    assert any("batch 1" in note and "2 -> 1" in note for note in report.export.notes)
    import onnx

    exported = onnx.load(str(tmp_path / "x" / "model.legalized.onnx")).graph.input[0]
    assert exported.type.tensor_type.shape.dim[0].dim_value == 1


def test_only_the_exporter_that_reads_an_archive_is_tried(tmp_path: Path) -> None:
    module, inputs = models.small_net()
    script = tmp_path / "net.pt"
    torch.jit.save(torch.jit.trace(module, inputs), str(script))
    np.savez(tmp_path / "inputs.npz", image=inputs[0].numpy())
    report = api.build(str(script), str(tmp_path / "inputs.npz"), target="ort-cpu", outdir=tmp_path / "s",
                       options=QUICK)
    assert [a.exporter for a in report.export.attempts] == ["torchscript"]  # dynamo takes no ScriptModule
    assert report.status == BuildStatus.VERIFIED, report.summary
    with pytest.raises(OptionError, match="does not apply"):
        api.build(str(script), str(tmp_path / "inputs.npz"), target="ort-cpu", outdir=tmp_path / "d",
                  options=QUICK, exporters=["dynamo"])


def test_a_factory_beside_the_current_directory_and_a_truncated_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodels_i48.py").write_text(
        "import torch\n\ndef cnn():\n    return torch.nn.Conv2d(3, 4, 3), (torch.rand(1, 3, 8, 8),)\n")
    monkeypatch.chdir(tmp_path)
    source = api.torch_source("mymodels_i48:cnn")
    assert source.names and source.inputs[0].shape == (1, 3, 8, 8)
    module, inputs = models.small_net()
    archive = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(module, inputs), str(archive))
    (tmp_path / "cut.pt2").write_bytes(archive.read_bytes()[:2000])
    done = subprocess.run([sys.executable, "-m", "deploycc.cli", "check", "cut.pt2", "-t", "ort-cpu"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "not a torch.export archive" in done.stderr


def test_the_command_line_refuses_a_traced_branch_unless_accepted(tmp_path: Path) -> None:
    spec = f"{MODELS}:branch"
    refused = subprocess.run([sys.executable, "-m", "deploycc.cli", "build", spec, "-t", "ort-cpu", "-o",
                              str(tmp_path / "r"), "--no-bench"], capture_output=True, text=True)
    assert refused.returncode == 1 and "data-dependent-guard" in refused.stdout + refused.stderr
    accepted = subprocess.run([sys.executable, "-m", "deploycc.cli", "build", spec, "-t", "ort-cpu", "-o",
                               str(tmp_path / "a"), "--no-bench", "--accept-trace-warnings"],
                              capture_output=True, text=True)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "accepted with --accept-trace-warnings" in accepted.stdout


def test_check_of_a_torch_model_runs_the_fp16_analysis_on_its_example_inputs() -> None:
    """Before: `check module -t jetson-xavier` judged the graph and said nothing of half precision,
    which an ONNX file's check analyses where the target builds in fp16."""
    module, _ = models.small_net()
    report = api.check(module, (torch.rand(2, 3, 16, 16),), targets=["ort-cpu", "jetson-xavier"],
                       precision="target")
    assert report.half is not None and not report.skipped_steps
    assert report.half.inputs  # the example inputs, at the board's batch
