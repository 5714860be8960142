"""ONNX Runtime with GPU providers, for `build`: where ORT will run each node of the legalized
model (written beside the bundle's model for the board's runner to hold its measured placement
to), and the fewest nodes a TensorRT fragment needs to be worth its launch. One prediction serves
both; as advice, a prediction that fails is a note, never a failed build."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.analysis.placement import PlacementPrediction
    from deploycc.targets.schema import Target

PREDICTED_PLACEMENT = "placement-predicted.json"  # in the device folder: the runner compares


@dataclass
class PlacementPlan:
    prediction: PlacementPrediction | None = None
    min_segment_nodes: int | None = None  # None: the runtime's own default


def plan_placement(model_path: Path, target: Target, notes: list[str]) -> PlacementPlan:
    """The legalized model's predicted placement on a target with providers behind its own, and
    the fragment size worth a launch; an empty plan elsewhere, or where the prediction fails."""
    if not target.fallback:
        return PlacementPlan()
    from deploycc.analysis.placement import predict_placement
    from deploycc.graph.shapes import load_inferred

    try:
        model = load_inferred(model_path).model
        prediction = predict_placement(model, target)
        if prediction is None:
            return PlacementPlan()
        return PlacementPlan(prediction, _worth_a_launch(model.graph, prediction, notes))
    except Exception as error:
        notes.append(f"no placement prediction: {type(error).__name__}: {str(error).strip()[:200]}")
        return PlacementPlan()


def _worth_a_launch(graph: ir.Graph, prediction: PlacementPrediction, notes: list[str]) -> int | None:
    """On a target whose runtime builds an engine per fragment it takes (ORT's TensorRT provider):
    the fewest nodes a fragment must have, so that the fragments the partition cost model finds
    not worth their launch (fewer FLOPs than the bytes they move plus one more launch) stay with
    the provider behind, while every fragment worth it is kept. None where all are worth it."""
    from deploycc.partition.plan import FLOPS_PER_BYTE, LAUNCH_FLOPS, flops, tensor_bytes

    if len(prediction.runs) < 2:
        return None
    nodes = list(graph)
    worth: list[int] = []
    not_worth: list[int] = []
    for run in prediction.runs:
        members = [nodes[i] for i in run]
        member_ids = {id(node) for node in members}
        inside = {id(v) for node in members for v in node.outputs}
        crossing = {id(v): v for node in members for v in node.inputs
                    if v is not None and id(v) not in inside and v.const_value is None}
        crossing.update({id(v): v for node in members for v in node.outputs
                         if any(id(use[0]) not in member_ids for use in v.uses()) or v in graph.outputs})
        moved = sum(tensor_bytes(v) for v in crossing.values())
        cost = sum(flops(node) for node in members)
        (worth if cost >= FLOPS_PER_BYTE * moved + LAUNCH_FLOPS else not_worth).append(len(members))
    if not not_worth:
        return None
    threshold = min(max(not_worth) + 1, min(worth)) if worth else max(not_worth) + 1
    if threshold <= 1:
        return None
    provider = prediction.primary.removesuffix("ExecutionProvider")
    notes.append(f"{len(not_worth)} of {len(prediction.runs)} {provider} fragment(s) are not worth a launch "
                 f"by the partition cost model: fragments of fewer than {threshold} nodes are left to the "
                 "provider behind it (trt_min_subgraph_size)")
    return threshold


def write_prediction(plan: PlacementPlan, staging: Path, folder: str | None, notes: list[str]) -> None:
    """The prediction beside the bundle's model (placement-predicted.json), said in a note."""
    prediction = plan.prediction
    if prediction is None or folder is None:
        return
    notes.append(f"placement predicted: {prediction.line()}")
    nodes = {item.node: item.provider for item in prediction.off_primary}
    (staging / folder / PREDICTED_PLACEMENT).write_text(json.dumps(
        {"primary": prediction.primary, "counts": prediction.counts, "off_primary": nodes,
         "subgraphs": prediction.subgraphs, "memcpy": prediction.memcpy}, indent=1) + "\n")
