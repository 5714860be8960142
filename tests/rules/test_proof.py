"""A proof runs the replacement on ONNX Runtime: one that is not a valid graph at the model's
opset fails, even though the onnx reference evaluator (which checks no types) would run it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.proof import prove
from tests.rules.helpers import _node, load


class _EqualOnFloats(Rule):
    """Relu: y = Where(x == 0, 0, Max(x, 0)) (Equal takes floats only from opset 11)."""

    name = "equal-on-floats"
    family = "arithmetic"
    op_type = "Relu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        zero = b.const(np.float32(0))
        return [b.op("Where", b.op("Equal", x, zero), zero, b.op("Max", x, zero))]


def _proof(opset: int) -> str:
    model = load(f"""
        <ir_version: 8, opset_import: ["" : {opset}]>
        g (float[4,3] x) => (float[4,3] y) {{ y = Relu(x) }}
    """)
    node = _node(model, "Relu")
    return prove(_EqualOnFloats(), node, {"": opset}, opset, "relu").status


def test_a_replacement_invalid_at_the_models_opset_fails_its_proof() -> None:
    assert _proof(9) == "failed"
    assert _proof(11) == "proven"


def test_a_proof_run_before_is_recalled_and_only_the_same_proof(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The same original, replacement, feeds and tolerances: the verdict is recalled, from memory
    or (an audit's cells) from the shared folder, without running either model again."""
    from deploycc.rules import proof, proven

    monkeypatch.setenv(proven.CACHE_ENV, str(tmp_path))
    proven._kept.forget()
    first = _proof(11)
    assert first == "proven" and len(list(tmp_path.glob("*.json"))) == 1

    def must_not_run(*args, **kwargs):
        raise AssertionError("a proof run twice")

    monkeypatch.setattr(proof, "run_model_bytes", must_not_run)
    assert _proof(11) == "proven"  # from memory
    proven._kept.forget()
    assert _proof(11) == "proven"  # from the folder, as the next cell reads it
    with_other_tolerance = _EqualOnFloats()
    with_other_tolerance.atol = 0.5
    model = load("""
        <ir_version: 8, opset_import: ["" : 11]>
        g (float[4,3] x) => (float[4,3] y) { y = Relu(x) }
    """)
    ran = prove(with_other_tolerance, _node(model, "Relu"), {"": 11}, 11, "relu")
    assert "a proof run twice" in ran.detail  # another tolerance runs its own proof
