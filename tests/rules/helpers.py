"""Rule tests: rewrite one node of a tiny model, then run the original and the rewritten graph
on ONNX Runtime (the onnx reference evaluator where ORT lacks the original op) and compare.

The comparison here is the test's own, independent of the certificate the rule engine made.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from deploycc.graph.graphs import opset_map
from deploycc.graph.shapes import infer_shapes
from deploycc.rules.engine import Decision, decide
from deploycc.verify.inputs import generate
from deploycc.verify.runner import run_model_bytes, run_ort, serialize


def load(text: str) -> ir.Model:
    model = ir.from_onnx_text(text)
    infer_shapes(model)
    return model


def _node(model: ir.Model, op: str) -> ir.Node:
    return next(n for n in model.graph if n.op_type == op)


def rewritten_by(model: ir.Model, op: str, rule: str, proof: str = "proven") -> Decision:
    """Decide the first `op` node of `model` with the catalog; assert `rule` rewrote it (gone from
    the graph) with a certificate of status `proof`."""
    node = _node(model, op)
    decision = decide(node, model.graph, opset_map(model))
    assert decision.rewrite is not None, decision.explain()
    assert decision.rewrite.rule == rule
    certificate = decision.rewrite.certificate
    assert certificate is not None and certificate.status == proof, certificate
    assert node not in list(model.graph)
    return decision


def rewrite_and_compare(text: str, op: str, rule: str, *, atol: float = 1e-4, rtol: float = 1e-4,
                        seeds: tuple[int, ...] = (11, 12), feeds: dict[str, np.ndarray] | None = None,
                        int_high: int | None = None) -> Decision:
    """Rewrite the `op` node with the catalog; assert `rule` fired, was proven, and that the
    whole graph computes the same before and after on several seeded inputs with edge values."""
    model = load(text)
    before = serialize(model)
    decision = rewritten_by(model, op, rule)
    after = serialize(model)
    signature = [v for v in model.graph.inputs if v.name not in model.graph.initializers]
    for seed in seeds:
        inputs = feeds if feeds is not None else generate(signature, seed=seed, edges=True, int_high=int_high)
        expected = run_model_bytes(before, inputs).outputs
        actual = run_ort(after, inputs)  # the rewritten graph must run on ORT itself
        assert expected.keys() == actual.keys()
        for name in expected:
            np.testing.assert_allclose(actual[name], expected[name], atol=atol, rtol=rtol,
                                       err_msg=f"output {name}, seed {seed}")
    return decision


def declines(text: str, op: str, expected_reason: str) -> Decision:
    """The catalog must leave the `op` node alone and say why."""
    model = load(text)
    node = _node(model, op)
    decision = decide(node, model.graph, opset_map(model))
    assert decision.rewrite is None
    assert any(expected_reason in reason for _, reason in decision.declined), decision.declined
    assert node in list(model.graph)
    return decision
