"""Write each segment of a plan as its own ONNX model, and `pipeline.json` that chains them.

A segment's model is the whole graph with the other segments' nodes removed: the values it reads
from them become its inputs (named as before, typed as inferred), the values others read from it
or that are graph outputs become its outputs, and it keeps the initializers it reads, so a weight
two segments share is written into both. A graph output that is also read inside the graph is an
output of the segment that makes it and an input of the ones that read it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from deploycc import io
from deploycc.partition.plan import DEVICE, PartitionPlan, Segment, tensor_bytes

if TYPE_CHECKING:
    from pathlib import Path

    import onnx_ir as ir

PIPELINE_SCHEMA = 1


def segment_file(segment: Segment) -> str:
    return f"segment-{segment.index:02d}-{segment.placement}.onnx"


def _segment_model(model: ir.Model, segment: Segment) -> ir.Model:
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    part = io.copy_model(model)
    graph = part.graph
    nodes = list(graph)
    keep = set(segment.nodes)
    produced = {v.name: v for i in keep for v in nodes[i].outputs}
    declared = {v.name: v for v in graph.inputs}
    made_elsewhere = {v.name: v for i, node in enumerate(nodes) if i not in keep for v in node.outputs}
    outputs = [produced[name] for name in segment.outputs]
    graph.outputs.clear()  # before the inputs are cut loose: a graph output read here is one of them
    inputs = []
    for name in segment.inputs:
        if name in declared:
            inputs.append(declared[name])
            continue
        value = made_elsewhere[name]
        fed = ir.Value(name=name, type=value.type, shape=value.shape)
        value.replace_all_uses_with(fed)
        inputs.append(fed)
    graph.outputs.extend(outputs)
    graph.remove([node for i, node in enumerate(nodes) if i not in keep], safe=False)
    graph.inputs.clear()
    graph.inputs.extend(inputs)
    RemoveUnusedNodesPass()(part)  # and the initializers only other segments read
    return part


def observe_cut_shapes(model: ir.Model, plan: PartitionPlan, feeds: dict[str, Any]) -> list[str]:
    """Give every cut tensor whose shape inference could not follow (the output of an op without
    shape inference, such as ai.onnx.ml's) the rank it has when the model runs on `feeds`: static
    dims when every graph input is static, else symbolic ones. A device segment needs at least
    the rank of its inputs (OpenVINO places nothing of unknown rank). Returns the names given."""
    import onnx_ir as ir

    from deploycc.verify.runner import run_ort, serialize

    graph = model.graph
    values = {v.name: v for node in graph for v in node.outputs}
    unknown = [values[name] for name in plan.cut_bytes if name in values and values[name].shape is None]
    if not unknown:
        return []
    probe = io.copy_model(model)
    probe_values = {v.name: v for node in probe.graph for v in node.outputs}
    probe.graph.outputs.extend(probe_values[v.name] for v in unknown if v not in graph.outputs)
    observed = run_ort(serialize(probe), feeds)
    static = all(v.shape is not None and v.shape.is_static() for v in graph.inputs)
    for value in unknown:
        dims = observed[value.name or ""].shape
        value.shape = ir.Shape(list(dims) if static else [ir.SymbolicDim(f"{value.name}_{i}")
                                                          for i in range(len(dims))])
    return [v.name or "" for v in unknown]


def _tensor(value: ir.Value | None) -> dict[str, Any]:
    if value is None:
        return {"dtype": None, "shape": None, "bytes": 0}
    shape = None if value.shape is None else [d if isinstance(d, int) else str(d) for d in value.shape]
    return {"dtype": value.dtype.name.lower() if value.dtype is not None else None, "shape": shape,
            "bytes": tensor_bytes(value)}


def write_segments(model: ir.Model, plan: PartitionPlan, folder: Path, *, source: str,
                   target: str) -> dict[str, Any]:
    """Each segment's model into `folder`, and `pipeline.json`; returns the pipeline description."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {v.name: v for node in model.graph for v in node.outputs}
    values.update({v.name: v for v in model.graph.inputs})
    for segment in plan.segments:
        io.save(_segment_model(model, segment), folder / segment_file(segment))
    pipeline = {
        "schema": PIPELINE_SCHEMA, "source": source, "target": target,
        "inputs": [v.name for v in model.graph.inputs if v.name not in model.graph.initializers],
        "outputs": [v.name for v in model.graph.outputs],
        "segments": [{"index": s.index, "placement": s.placement, "file": segment_file(s),
                      "inputs": s.inputs, "outputs": s.outputs, "nodes": len(s.nodes), "ops": s.ops,
                      "flops": s.flops, "decision": s.decision} for s in plan.segments],
        "cuts": [{"name": name, **_tensor(values.get(name)), "reason": plan.cut_reasons.get(name, "")}
                 for name in plan.cut_bytes],
        "device_flops_share": round(plan.device_flops_share, 4),
        "device_segments": sum(s.placement == DEVICE for s in plan.segments),
    }
    io.write_text_atomic(folder / "pipeline.json", json.dumps(pipeline, indent=2) + "\n")
    return pipeline
