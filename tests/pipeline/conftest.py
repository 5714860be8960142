"""The demo models as fixtures, saved to the test's folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
import pytest

from examples.make_models import encoder_block, small_cnn


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    return path


@pytest.fixture
def encoder(tmp_path: Path) -> Path:
    path = tmp_path / "encoder.onnx"
    onnx.save(encoder_block(), path)
    return path
