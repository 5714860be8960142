"""Whether a node means the same at two opsets, and the attributes to mend after converting.

onnx's converter lacks adapters for many ops whose version changed without changing what a node
computes (Sub 14 -> 13, BatchNormalization 15 -> 14): such nodes are held back from it and pass
as they are. Three kinds of change need more than the schemas say: an attribute added with a
default that computes otherwise than the op did before (RoiAlign 16), attribute values spelled
anew (GridSample 20), and a rule between parameters that no formal states (Split 18).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir


def drop_stale_attributes(model: ir.Model, source: int, version: int) -> None:
    """Attributes the converter carried over that the op does not have at `version` (ReduceMean
    18 -> 17 keeps noop_with_empty_axes, an invalid model), or that a rewrite wrote in its newest
    form (onnxscript's Reshape rules write allowzero=0 at opset 11): dropped where they say
    nothing, at the source opset's default or, for noop_with_empty_axes, beside non-empty axes."""
    from deploycc.graph.graphs import all_graphs
    from deploycc.legality import onnx_schemas as schemas

    for graph in all_graphs(model.graph):
        for node in graph:
            if node.domain not in ("", "ai.onnx"):
                continue
            schema = schemas.get_schema(node.op_type, "", version)
            if schema is None:
                continue
            said = attributes_said(node, source, version)
            for name in [n for n in node.attributes if n not in schema.attributes]:
                said_nothing = (said is not None and name not in said) or (
                    name == "noop_with_empty_axes" and bool(node.attributes.get("axes")))
                if said_nothing:
                    del node.attributes[name]


def unchanged_between(node: ir.Node, current: int, version: int) -> bool:
    """The node, as it is set, means the same at both opsets (schemas.valid_at_both)."""
    from deploycc.legality import onnx_schemas as schemas

    said = attributes_said(node, current, version)
    if said is None:
        return False
    rule = PARAMETER_RULES.get(node.op_type)
    if rule is not None and current < rule[0] <= version and rule[1](node):  # going up past it
        return False
    respelled = frozenset(name for (op, name), (since, spelling, rank) in RESPELLED_VALUES.items()
                          if op == node.op_type and version < since <= current
                          and _respellable(node, name, current, spelling, rank))
    return schemas.valid_at_both(node.op_type, "", current, version, said - respelled,
                                 len(node.inputs), len(node.outputs), respelled)


# Rules between an op's parameters from `since` on that its schema's formals do not state, and
# the nodes they concern: converted up past `since`, those go through onnx's converter, whose
# adapter mends them. Split 18 takes num_outputs where no 'split' input is given (without it ORT
# refuses to load the model); deploycc had passed Split 13 -> 21 as unchanged.
PARAMETER_RULES: dict[str, tuple[int, Callable[[ir.Node], bool]]] = {
    "Split": (18, lambda node: len(node.inputs) < 2 or node.inputs[1] is None),
}


# Attribute values an op spells otherwise from `since` on, and the input rank the op took before:
# GridSample 20 calls bilinear and bicubic linear and cubic, and takes N-D inputs where 16 took 4-D
# (RAFT's dynamo export at opset 20). Going below `since`, a node is the same op spelled the old way.
RESPELLED_VALUES: dict[tuple[str, str], tuple[int, dict[str, str], int]] = {
    ("GridSample", "mode"): (20, {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}, 4),
}


def _respellable(node: ir.Node, name: str, current: int, spelling: dict[str, str], rank: int) -> bool:
    """Whether the node's value of `name` (set or default at `current`) has an old spelling, and
    its first input the rank the op took before."""
    shape = node.inputs[0].shape if node.inputs and node.inputs[0] is not None else None
    return shape is not None and len(shape) == rank and _value(node, name, current) in spelling


def _value(node: ir.Node, name: str, opset: int) -> object:
    """The node's attribute `name`, or its schema default at `opset` (strings decoded)."""
    from deploycc.legality import onnx_schemas as schemas

    attr = node.attributes.get(name)
    if attr is not None:
        return attr.value
    schema = schemas.get_schema(node.op_type, "", opset)
    formal = schema.attributes.get(name) if schema is not None else None
    return formal.default_value.s.decode() if formal is not None else None


def respell_values(model: ir.Model, source: int, version: int) -> None:
    """Write RESPELLED_VALUES the way `version` spells them, on the nodes converted from `source`."""
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs

    for graph in all_graphs(model.graph):
        for node in graph:
            for (op, name), (since, spelling, _) in RESPELLED_VALUES.items():
                if node.op_type != op or node.domain not in ("", "ai.onnx") or not version < since <= source:
                    continue
                value = _value(node, name, source)
                if value in spelling:
                    node.attributes[name] = ir.AttrString(name, spelling[str(value)])


# Attributes an op gained with a default that computes otherwise than the op did before: below
# `since` the op computed what the value `before` asks for. RoiAlign 16's default, half_pixel,
# shifts every box by half a pixel; RoiAlign 10 computes output_half_pixel, which torchvision's
# roi_align(aligned=False) writes at opset 16 (its Faster, Mask and Keypoint R-CNN exports).
CHANGED_DEFAULTS: dict[tuple[str, str], tuple[int, str]] = {
    ("RoiAlign", "coordinate_transformation_mode"): (16, "output_half_pixel"),
}


def attributes_said(node: ir.Node, current: int, version: int) -> frozenset[str] | None:
    """The attributes whose value the node at `current` says (non_default), less those set to what
    the op computed at `version` before they existed; None where the node relies on a default whose
    meaning changed between the two (a RoiAlign 16 at half_pixel going below 16, any RoiAlign
    going up across 16: onnx's converter has the adapter that says what it meant)."""
    said = set(non_default(node, current))
    for (op, name), (since, before) in CHANGED_DEFAULTS.items():
        if node.op_type != op or not min(current, version) < since <= max(current, version):
            continue
        if current < version:
            return None
        if _value(node, name, current) != before:
            return None
        said.discard(name)
    return frozenset(said)


def non_default(node: ir.Node, opset: int) -> frozenset[str]:
    """Names of the attributes a node sets to something other than the schema default."""
    import onnx_ir as ir

    from deploycc.legality import onnx_schemas as schemas

    schema = schemas.get_schema(node.op_type, "", opset)
    names = set()
    for name, attr in node.attributes.items():
        formal = schema.attributes.get(name) if schema is not None else None
        if formal is None or not formal.default_value.name:
            names.add(name)
            continue
        if ir.serde.serialize_attribute(attr).SerializeToString() != formal.default_value.SerializeToString():
            names.add(name)
    return frozenset(names)
