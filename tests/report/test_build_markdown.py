"""report.md as a reader meets it after a torch build: each file listed once, and no empty build
hash where nothing was built."""

from __future__ import annotations

from pathlib import Path

import pytest

import deploycc
from deploycc.options import BuildOptions

torch = pytest.importorskip("torch")


def test_a_torch_build_lists_each_file_once(tmp_path: Path) -> None:
    report = deploycc.build(torch.nn.Linear(4, 3), (torch.randn(2, 4),), target="ort-cpu",
                            outdir=tmp_path / "o", options=BuildOptions(bench=False))
    assert report.exit_code == 0 and len(report.files) == len(set(report.files))
    listed = (tmp_path / "o" / "report.md").read_text().split("## Files", 1)[1]
    assert listed.count("`report.json`") == 1 and listed.count("`report.md`") == 1


class Eig(torch.nn.Module):
    """No exporter writes linalg.eig for ONNX: the build fails at the export, before any build."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eig(x)[0].real


def test_a_build_that_built_nothing_shows_no_empty_build_hash(tmp_path: Path) -> None:
    report = deploycc.build(Eig(), (torch.randn(3, 3),), target="ort-cpu", outdir=tmp_path / "f",
                            options=BuildOptions(bench=False))
    assert report.exit_code == 1 and report.build_hash == ""
    text = (tmp_path / "f" / "report.md").read_text()
    assert "build hash" not in text
