"""An atheris (libFuzzer) harness for deploycc's model loader, run by hand, not by CI:

    pip install atheris
    python tests/fuzz/fuzz_loader.py -max_total_time=600 -rss_limit_mb=4096 tests/fuzz/corpus

Every input is written to a file and loaded as deploycc loads models (validation, checker,
onnx-ir). The only acceptable outcomes are a model or a ModelInputError; any other exception
is a finding, and libFuzzer keeps the input that caused it. Seed the corpus with a few small
models (examples/make_models.py writes two).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from deploycc.errors import ModelInputError
    from deploycc.graph.shapes import load_inferred

FOLDER = Path(tempfile.mkdtemp(prefix="deploycc-fuzz-"))


def test_one_input(data: bytes) -> None:
    path = FOLDER / "m.onnx"
    path.write_bytes(data)
    try:
        load_inferred(path)
    except ModelInputError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
