"""Map outputs: a ZipMap graph output becomes the probability tensor it was made from.

scikit-learn classifiers exported by skl2onnx end in ZipMap, whose output is a sequence of
maps {label: probability}, one per row. No engine returns such a value (TensorRT and OpenVINO
have no ZipMap; no rule can write a map in tensor ops), so on a target without ZipMap the
output becomes the float [rows, classes] tensor ZipMap read, with its columns in ascending label
order: the order in which the maps' keys sort, and what skl2onnx writes with
`options={'zipmap': False}`. The output keeps its name; the report lists the change.
`--keep-map-outputs` keeps ZipMap (then the target refuses it, or `--partition` runs it on the
host). On a target that has ZipMap nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deploycc.passes.base import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    import onnx_ir as ir

ML = "ai.onnx.ml"


def _labels(node: ir.Node) -> list[int] | list[str] | None:
    for name in ("classlabels_int64s", "classlabels_strings"):
        attribute = node.attributes.get(name)
        if attribute is not None:
            values = list(attribute.value)
            return [v.decode() if isinstance(v, bytes) else v for v in values]
    return None


def _constant(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    import onnx_ir as ir

    value = ir.Value(name=name, const_value=ir.tensor(array))
    graph.register_initializer(value)
    return value


def _insert_after(graph: ir.Graph, anchor: ir.Node, op_type: str, inputs: list[ir.Value],
                  **attributes: int) -> ir.Node:
    import onnx_ir as ir

    node = ir.Node("", op_type, inputs, attributes=[ir.AttrInt64(k, v) for k, v in attributes.items()],
                   name=f"{anchor.name}_{op_type.lower()}")
    graph.insert_after(anchor, node)
    return node


def _tensor_output(graph: ir.Graph, node: ir.Node) -> str | None:
    """Replace a graph-output ZipMap by its input, columns in key order; the change, or None
    when this ZipMap cannot become a tensor (it then stays for the final check to name)."""
    import onnx_ir as ir

    from deploycc.graph.graphs import dims_of

    output, probabilities = node.outputs[0], node.inputs[0]
    labels = _labels(node)
    if probabilities is None or output not in graph.outputs or output.uses() or not labels:
        return None
    dims = dims_of(probabilities)
    if dims is not None and (len(dims) not in (1, 2)
                             or (isinstance(dims[-1], int) and dims[-1] != len(labels))):
        return None
    rows = dims[0] if dims is not None and len(dims) == 2 else (None if dims is None else 1)
    replacement, anchor = probabilities, node
    if dims is None or len(dims) != 2:  # ZipMap reads a [classes] tensor as one row
        shape = _constant(graph, f"{output.name}_rows", np.array([-1, len(labels)], np.int64))
        anchor = _insert_after(graph, anchor, "Reshape", [replacement, shape])
        replacement = anchor.outputs[0]
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    if order != list(range(len(labels))):
        indices = _constant(graph, f"{output.name}_key_order", np.array(order, np.int64))
        anchor = _insert_after(graph, anchor, "Gather", [replacement, indices], axis=1)
        replacement = anchor.outputs[0]
    if replacement.is_graph_output() or replacement.is_graph_input():
        anchor = _insert_after(graph, anchor, "Identity", [replacement])
        replacement = anchor.outputs[0]
    replacement.dtype = ir.DataType.FLOAT
    replacement.shape = ir.Shape([rows if rows != "?" else None, len(labels)])
    name = str(output.name)
    graph.outputs[graph.outputs.index(output)] = replacement
    graph.remove(node, safe=True)
    replacement.name = name
    return (f"output {name}: a sequence of maps -> a float tensor (rows, {len(labels)}) of "
            f"probabilities, columns in label order {sorted(labels)} (ZipMap removed)")


class MapOutputsPass(Pass):
    name = "map-outputs"
    summary = "a ZipMap output becomes its probability tensor where the target has no ZipMap"

    def wanted(self, options) -> bool:
        return not options.keep_map_outputs

    def changes_signature(self, options) -> bool:
        return not options.keep_map_outputs

    def run(self, state: PipelineState) -> PassOutcome:
        from deploycc.io import MAP_TYPES

        graph = state.model.graph
        if state.target.ops.lookup(ML, "ZipMap"):
            return PassOutcome(False)
        changes: dict[str, str] = {}
        for node in list(graph):
            if node.op_type == "ZipMap" and node.domain == ML:
                name, change = str(node.outputs[0].name), _tensor_output(graph, node)
                if change:
                    changes[name] = change
        kept = state.model.meta.get(MAP_TYPES) or {}
        for name in changes:
            kept.pop(name, None)  # written as the tensor it now is, not as the map it was
        state.signature_changes.extend(changes.values())
        state.retyped_outputs.update(changes)
        return PassOutcome(bool(changes), list(changes.values()))
