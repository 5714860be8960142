"""ONNX Runtime with GPU providers, for `build`: where ORT will run each node of the legalized
model (written beside the bundle's model for the board's runner to hold its measured placement
to), and the fewest nodes a TensorRT fragment needs to be worth its launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploycc.targets.schema import Target

PREDICTED_PLACEMENT = "placement-predicted.json"  # in the device folder: the runner compares


def _worth_a_launch(model_path: Path, target: Target, notes: list[str]) -> int | None:
    """On a target whose runtime builds an engine per fragment it takes (ORT's TensorRT provider):
    the fewest nodes a fragment must have, so that the fragments the partition cost model finds
    not worth their launch (fewer FLOPs than the bytes they move plus one more launch) stay with
    the provider behind, while every fragment worth it is kept. None where all are worth it."""
    if not target.fallback:
        return None
    from deploycc.analysis.placement import predict_placement
    from deploycc.graph.shapes import load_inferred
    from deploycc.partition.plan import FLOPS_PER_BYTE, LAUNCH_FLOPS, flops, tensor_bytes

    model = load_inferred(model_path).model
    graph = model.graph
    prediction = predict_placement(model, target)
    if prediction is None or len(prediction.runs) < 2:
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


def _predicted_placement(model_path: Path, staging: Path, folder: str | None, target: Target,
                        notes: list[str]) -> None:
    """Where ORT will run each node of the legalized model on a target with providers behind its
    own (check's prediction), written beside the bundle's model for the runner to hold the
    measured placement to, and said in a note."""
    if not target.fallback or folder is None:
        return
    from deploycc.analysis.placement import predict_placement
    from deploycc.graph.shapes import load_inferred

    prediction = predict_placement(load_inferred(model_path).model, target)
    if prediction is None:
        return
    notes.append(f"placement predicted: {prediction.line()}")
    nodes = {item.node: item.provider for item in prediction.off_primary}
    (staging / folder / PREDICTED_PLACEMENT).write_text(json.dumps(
        {"primary": prediction.primary, "counts": prediction.counts, "off_primary": nodes,
         "subgraphs": prediction.subgraphs, "memcpy": prediction.memcpy}, indent=1) + "\n")


def predicted_placement(model_path: Path, staging: Path, folder: str | None, target: Target,
                        notes: list[str]) -> None:
    """_predicted_placement, as advice: a prediction that fails is a note, never a failed build."""
    try:
        _predicted_placement(model_path, staging, folder, target, notes)
    except Exception as error:
        notes.append(f"no placement prediction: {type(error).__name__}: {str(error).strip()[:200]}")


def worth_a_launch(model_path: Path, target: Target, notes: list[str]) -> int | None:
    """_worth_a_launch, as advice: where it fails, the runtime's own default (a note says why)."""
    try:
        return _worth_a_launch(model_path, target, notes)
    except Exception as error:
        notes.append(f"no fragment cost estimate: {type(error).__name__}: {str(error).strip()[:200]}")
        return None
