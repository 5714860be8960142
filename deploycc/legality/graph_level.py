"""What a target refuses or notes about a graph as a whole rather than one node: a model opset
outside its range, dynamic inputs on a static-shape target (or one whose engines need profiles),
int64 initializers a target carries as int32 that do not fit. Judged from the target's data
(opset range, shape policy, dtype policy) and its backend's facts, beside the node verdicts of
`conversion_target.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.graph.graphs import all_graphs, dynamic_dims
from deploycc.records.check import GraphFinding  # re-exported: a record, in records/
from deploycc.taxonomy import Refusal, Severity

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import Target

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
NARROWING_READ_LIMIT = 1 << 20  # int64 initializers up to this many elements are range-checked


def graph_findings(model: ir.Model, target: Target, *, legalized: bool = False) -> list[GraphFinding]:
    """`legalized`: the model is legalize's result, so an opset outside the range is no longer
    something legalize will convert but a model the target refuses."""
    findings: list[GraphFinding] = []
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is not None and not target.opset.contains(opset):
        outside = (f"model opset {opset} is outside {target.name}'s range "
                   f"{target.opset.min}..{target.opset.max}")
        if legalized:
            findings.append(GraphFinding(Severity.ILLEGAL, Refusal.OPSET, outside))
        else:
            direction = "down" if opset > target.opset.max else "up"
            findings.append(GraphFinding(
                Severity.NOTE, Refusal.OPSET,
                f"{outside}; legalize converts it {direction} to {target.opset.preferred}"))
    graph = model.graph
    dynamic_inputs = []
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        dims = dynamic_dims(value)
        if dims:
            dynamic_inputs.append(f"{value.name}[{', '.join(f'{i}:{d}' for i, d in dims)}]")
    if dynamic_inputs:
        if target.shapes.policy == "static":
            findings.append(GraphFinding(
                Severity.ILLEGAL, Refusal.DYNAMIC_SHAPE,
                f"{target.name} needs static shapes, but inputs are dynamic: "
                f"{'; '.join(dynamic_inputs)} (fix them with --shape NAME:DIMS or --batch N)"))
        elif target.backend.fixed_shape_engines:
            findings.append(GraphFinding(
                Severity.NOTE, Refusal.DYNAMIC_SHAPE,
                f"dynamic inputs need a TensorRT optimization profile (min/opt/max): "
                f"{'; '.join(dynamic_inputs)}"))
    findings.extend(_narrowing_findings(model, target))
    return findings


def _only_slice_bounds(value: ir.Value) -> bool:
    """Read only as Slice starts or ends (in any subgraph): INT64_MAX there means "to the end",
    and clamped to INT32_MAX it still does, since no dim reaches 2**31 (onnx-tensorrt's
    convertINT64 clamps; the research note in the 8.x targets)."""
    uses = list(value.uses())
    return bool(uses) and all(node.op_type == "Slice" and index in (1, 2) for node, index in uses)


def _narrowing_findings(model: ir.Model, target: Target) -> list[GraphFinding]:
    """int64 carried as int32 (TensorRT 8.x): legal only where every value fits."""
    if target.dtypes.computed_as_dtype("int64") != "int32":
        return []
    import numpy as np

    overflowing, unchecked, count = [], [], 0
    for graph in all_graphs(model.graph):
        for name, value in graph.initializers.items():
            tensor = value.const_value
            if tensor is None or tensor.dtype.name != "INT64":
                continue
            count += 1
            if tensor.size > NARROWING_READ_LIMIT:
                unchecked.append(name)
                continue
            array = tensor.numpy()
            if array.size and (array.min() < INT32_MIN or array.max() > INT32_MAX) and \
                    not _only_slice_bounds(value):
                overflowing.append(f"{name} [{int(np.min(array))}, {int(np.max(array))}]")
    findings = []
    if overflowing:
        findings.append(GraphFinding(
            Severity.ILLEGAL, Refusal.DTYPE,
            f"{target.name} carries int64 as int32; these int64 initializers hold values outside "
            f"int32 and would be clamped: {'; '.join(overflowing)}"))
    if count:
        findings.append(GraphFinding(
            Severity.NOTE, Refusal.DTYPE,
            f"{count} int64 initializer(s) will be carried as int32 on {target.name} "
            f"({target.backend.kind} {target.backend.version})"
            + (f"; not range-checked (too large): {', '.join(unchecked)}" if unchecked else "")))
    return findings
