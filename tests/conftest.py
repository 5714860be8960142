"""Shared helpers: tiny models written in ONNX text syntax, saved to a temp folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import onnx.parser
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_CAPABILITIES = REPO.parent / "shared" / "capabilities"


@pytest.fixture(autouse=True, scope="session")
def _own_precision_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`--precision auto` remembers its choices in ~/.cache: the tests keep theirs in a folder of
    this session, so no earlier run's choice stands in for a measurement."""
    import os

    from deploycc.pipeline.precision_cache import CACHE_ENV

    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("precision-cache"))


def parse(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


@pytest.fixture
def write_model(tmp_path: Path) -> Callable[..., Path]:
    """write_model(text_or_proto, name='m.onnx') -> path of the saved model."""

    def write(model: str | onnx.ModelProto, name: str = "m.onnx") -> Path:
        proto = parse(model) if isinstance(model, str) else model
        path = tmp_path / name
        onnx.save(proto, path)
        return path

    return write
