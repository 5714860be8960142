"""Where ONNX Runtime will run each node with a GPU provider, predicted before the GPU is reached.

ORT offers the graph to its providers in priority order: each takes the nodes it has a kernel
for (TensorRT: the nodes its ONNX parser reads), and the CPU provider takes what is left. A
target names the providers behind its own (`[placement] fallback`, as targets); each node goes to
the first whose table accepts it. Then:

- the primary provider's subgraphs: the runs of nodes placed on it, in topological order (the
  TensorRT EP builds one engine per run; many small ones are slower than CUDA, onnxruntime #17434);
- the borders between a GPU provider and the CPU: ORT inserts a Memcpy for every tensor that
  crosses one, and the bytes of each, at the shapes the graph has (a dynamic dim at 1: a floor);
- every node left off the primary provider, with the reason its table gives.

The prediction is the tables' word: ORT's CUDA provider also leaves some small shape arithmetic
on the CPU on purpose, which no table says (the target's placement note).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from deploycc.legality.conversion_target import ConversionTarget
from deploycc.records.check import CPU, Border, OffPrimary
from deploycc.records.check import PlacementPrediction as PlacementPrediction  # re-exported: a record
from deploycc.taxonomy import Legality

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import Target


def predict_placement(model: ir.Model, target: Target) -> PlacementPrediction | None:
    """The placement of the main graph's nodes on `target`'s providers; None for a target with no
    providers behind its own."""
    from deploycc.targets.registry import resolve

    if not target.fallback:
        return None
    primary = target.backend.execution_provider or CPU
    judges = [(primary, ConversionTarget(target))]
    for name in target.fallback:
        behind = resolve(name)
        judges.append((behind.backend.execution_provider or CPU, ConversionTarget(behind)))
    opsets = {("" if k == "ai.onnx" else k): v for k, v in model.opset_imports.items()}
    prediction = PlacementPrediction(target=target.name, primary=primary)
    placed: dict[int, str] = {}
    for node in model.graph:
        provider, reason = CPU, ""
        for index, (candidate, judge) in enumerate(judges):
            verdict = judge.judge(node, opsets)
            if verdict.status != Legality.ILLEGAL:
                provider = candidate
                break
            if index == 0:
                reason = "; ".join(r.summary for r in verdict.reasons)
        placed[id(node)] = provider
        prediction.counts[provider] = prediction.counts.get(provider, 0) + 1
        if provider != primary:
            prediction.off_primary.append(OffPrimary(node.name or node.op_type, node.op_type, provider,
                                                     reason))
    prediction.runs = _runs(model.graph, placed, primary)
    prediction.subgraph_sizes = sorted((len(run) for run in prediction.runs), reverse=True)
    prediction.subgraphs = len(prediction.runs)
    prediction.borders = _borders(model.graph, placed)
    return prediction


def _runs(graph: ir.Graph, placed: dict[int, str], primary: str) -> list[list[int]]:
    """The runs of nodes on `primary` in the graph's topological order (node indices): as the
    TensorRT parser's supportsModel and ORT's GetCapability cut them, a node elsewhere ends a run
    (joining the nodes around it into one engine would make a cycle through it)."""
    runs: list[list[int]] = [[]]
    for index, node in enumerate(graph):
        if placed[id(node)] == primary:
            runs[-1].append(index)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _borders(graph: ir.Graph, placed: dict[int, str]) -> list[Border]:
    """One Border per tensor and direction that crosses between the CPU and a GPU provider."""
    borders: dict[tuple[str, bool], Border] = {}
    for node in graph:
        reader = placed[id(node)]
        for value in node.inputs:
            producer = value.producer() if value is not None else None
            if producer is None or value is None:
                continue
            writer = placed[id(producer)]
            if (writer == CPU) == (reader == CPU):
                continue
            key = (value.name or "", reader == CPU)
            borders.setdefault(key, Border(value.name or "", writer, reader, _bytes(value)))
    return list(borders.values())


def _bytes(value: ir.Value) -> int:
    if value.shape is None or value.dtype is None:
        return 0
    elements = math.prod(d if isinstance(d, int) else 1 for d in value.shape)
    return math.ceil(elements * value.dtype.itemsize)
