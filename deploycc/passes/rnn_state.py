"""A recurrent op's initial state that is all zeros, for tidy: the input is left out, as the ONNX
spec says it then is zero (RNN, GRU, LSTM: initial_h; LSTM: initial_c and the peepholes).

PyTorch exports `nn.GRU(x, torch.zeros(...))` with the zeros computed at run time from the input's
batch: Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape -> Slice per layer, six or seven
nodes for a value the op would assume anyway (a name romanizer's encoder: 29 nodes, 23 without).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir

RECURRENT = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6, 7)}  # op -> inputs that default to zeros
# Ops whose output is all zeros when their first input is: they only move, pick or retype elements.
MOVES_ZEROS = {"Slice", "Reshape", "Expand", "Transpose", "Squeeze", "Unsqueeze", "Cast", "Identity",
               "Flatten", "Tile", "Gather", "Split", "Concat"}


def known_zero(value: ir.Value | None, depth: int = 0) -> bool:
    """Whether every element of `value` is zero, whatever the model's inputs (a finite chain of
    element moves from a zero constant or ConstantOfShape)."""
    import numpy as np

    if value is None or depth > 16:
        return False
    tensor = value.const_value
    if tensor is not None:
        array = tensor.numpy()
        return array.size > 0 and not np.any(array)
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "ConstantOfShape":
        fill = node.attributes.get("value")
        return fill is None or not np.any(fill.as_tensor().numpy())
    if node.op_type == "Concat":
        return all(known_zero(part, depth + 1) for part in node.inputs)
    if node.op_type in MOVES_ZEROS:
        return known_zero(node.inputs[0] if node.inputs else None, depth + 1)
    return False


def drop_zero_initial_states(graph: ir.Graph) -> int:
    """Leave out every recurrent op's state input that is all zeros. Returns the inputs left out."""
    from deploycc.graph.graphs import all_graphs

    dropped = 0
    for sub in all_graphs(graph):
        for node in sub:
            positions = RECURRENT.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            for index in positions or ():
                if index < len(node.inputs) and node.inputs[index] is not None \
                        and known_zero(node.inputs[index]):
                    node.replace_input_with(index, None)
                    dropped += 1
    return dropped
