"""File digests are taken once per file version: a file replaced (by rename, as deploycc writes)
or rewritten gives its new digest, and a copy made by copy_file its own."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from deploycc.io import copy_file, sha256_file


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_digest_follows_the_file_s_replacement_and_its_copy(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"first version")
    assert sha256_file(model) == _digest(b"first version")
    staged = tmp_path / "staged"
    staged.write_bytes(b"other version")  # the same size, a new inode once renamed over
    os.replace(staged, model)
    assert sha256_file(model) == _digest(b"other version")
    copy = tmp_path / "bundle.onnx"
    copy_file(model, copy)
    assert copy.read_bytes() == b"other version" and sha256_file(copy) == _digest(b"other version")
    model.write_bytes(b"a longer third version")  # rewritten in place: another size
    assert sha256_file(model) == _digest(b"a longer third version")
    assert sha256_file(copy) == _digest(b"other version")
