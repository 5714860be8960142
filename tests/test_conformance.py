"""The ONNX backend conformance cases (shipped in the onnx wheel) as a broad input set.

About 1,880 single-op models: inspect and check must give a result on every one, for every
target, and the verdicts must agree with the vendor tables where those are unambiguous.
"""

from __future__ import annotations

from functools import lru_cache

import onnx
import onnx_ir as ir
import pytest

from deploycc.analysis.check import judge_model
from deploycc.analysis.inspect import redundancy_findings
from deploycc.audit.probe import all_cases
from deploycc.graph.shapes import infer_shapes
from deploycc.targets import registry

ALL_TARGETS = ["ort-cpu", "openvino-cpu", "jetson-nano", "jetson-xavier", "jetson-orin", "gpu-trt10"]


def cases() -> list:
    return all_cases()


@lru_cache(maxsize=1)
def judged() -> dict[str, dict[str, object]]:
    targets = [registry.resolve(name) for name in ALL_TARGETS]
    results: dict[str, dict[str, object]] = {}
    for case in cases():
        model = ir.serde.deserialize_model(case.model)
        infer_shapes(model)
        redundancy_findings(model)
        results[case.name] = {t.name: judge_model(model, t) for t in targets}
    return results


def test_there_are_about_1880_cases():
    assert len(cases()) > 1800


def test_check_and_inspect_give_a_verdict_on_every_case_for_every_target():
    results = judged()
    assert len(results) == len(cases())
    for name, per_target in results.items():
        assert set(per_target) == set(ALL_TARGETS), name


def test_ops_tensorrt_lists_as_unsupported_are_refused():
    """Spot-check against the vendor table: every case whose op TRT 8.5 marks N is illegal."""
    table = registry.resolve("jetson-xavier").ops
    refused = {e.op for e in table.entries if e.status == "unsupported"}
    checked = 0
    for case in cases():
        ops = {n.op_type for n in case.model.graph.node}
        if len(ops) == 1 and ops <= refused:
            verdict = judged()[case.name]["jetson-xavier"]
            assert not verdict.legal, case.name
            checked += 1
    assert checked > 20


def test_float64_cases_are_refused_on_tensorrt_and_accepted_by_ort():
    double_cases = [c for c in cases() if c.name.endswith("_double") and "test_cast" not in c.name]
    assert double_cases
    for case in double_cases:
        verdict = judged()[case.name]["gpu-trt10"]
        assert not verdict.legal, case.name
        assert any(g.category == "dtype" for g in verdict.illegal), case.name


@pytest.mark.parametrize("op", ["Relu", "Conv", "MatMul", "Softmax", "Add"])
def test_everyday_ops_are_legal_everywhere_in_float32(op: str):
    seen = 0
    for case in cases():
        nodes = case.model.graph.node
        inputs = case.model.graph.input
        if len(nodes) != 1 or nodes[0].op_type != op:
            continue
        if any(i.type.tensor_type.elem_type != onnx.TensorProto.FLOAT for i in inputs):
            continue
        seen += 1
        for target, verdict in judged()[case.name].items():
            assert verdict.legal, (case.name, target, verdict.illegal)
    assert seen
