"""A proof runs the replacement on ONNX Runtime: one that is not a valid graph at the model's
opset fails, even though the onnx reference evaluator (which checks no types) would run it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

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
