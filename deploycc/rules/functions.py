"""ONNX function ops into their function bodies: the spec's own definition, inlined.

Many ONNX ops (SwiGLU, Celu, CausalConvWithState, Attention, Range, HardSwish...) are defined by
a function body in the spec. A runtime without a kernel for one may expand the body itself, but
only for the ops its own copy of onnx knows: OpenVINO 2026.4's frontend does not know SwiGLU-28 or
CausalConvWithState, and ORT expands SwiGLU into Swish-24, for which it has no kernel. deploycc
expands the body itself, at the model's opset, so the checker sees every op inside it and the next
round rewrites what the target still lacks there.

The body comes from `onnx.defs` (static, or built for this node's attributes and input types),
with the node's unset attributes at their schema defaults, inlined by `onnx.inliner` as the
conformance suite does for its `_expanded` cases. A body may hold subgraphs (LinearAttention's
Scan) that read values computed outside them; those references are rewired onto the model's own
values. The preview domain (FlexAttention) has bodies too, and no runtime kernel at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deploycc.rules.base import ANY_OP, Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

CALL_DOMAIN = "deploycc.function"


def _input_type(value: ir.Value | None) -> onnx.TypeProto:
    import onnx

    proto = onnx.TypeProto()
    if value is None or value.dtype is None:
        return proto
    proto.tensor_type.elem_type = int(value.dtype)
    if value.shape is not None:
        shape = proto.tensor_type.shape
        for dim in value.shape:
            entry = shape.dim.add()
            if isinstance(dim, int):
                entry.dim_value = dim
            elif dim.value is not None:
                entry.dim_param = str(dim.value)
    return proto


def _node_proto(site: Site, schema: Any) -> onnx.NodeProto:
    """The node as a NodeProto, every attribute the schema defaults spelled out (bodies refer to
    attributes by name and find nothing for one left unset)."""
    import onnx
    import onnx_ir as ir

    proto = ir.serde.serialize_node(site.node)
    proto.input[:] = [f"in{i}" if value is not None else "" for i, value in enumerate(site.inputs)]
    proto.output[:] = [f"out{i}" for i in range(site.output_count)]
    present = {attr.name for attr in proto.attribute}
    for name, attr in schema.attributes.items():
        if name not in present and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            proto.attribute.append(attr.default_value)
            proto.attribute[-1].name = name
    return proto


def _newest_at(versions: Sequence[int], opset: int) -> int | None:
    """Bodies are registered per opset (LogSoftmax's at 13 and 18): the one in force at `opset`."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def function_body(site: Site, schema: Any, node: onnx.NodeProto) -> onnx.FunctionProto:
    import onnx

    body: Any = None
    if schema.has_function:
        version = _newest_at(schema.function_opset_versions, site.opset)
        body = schema.get_function_with_opset_version(version) if version is not None else None
    elif schema.has_context_dependent_function:
        if any(value is not None and value.dtype is None for value in site.inputs):
            raise Decline("an input has no known type, which this op's body is built from")
        version = _newest_at(schema.context_dependent_function_opset_versions, site.opset)
        types = [_input_type(value).SerializeToString() for value in site.inputs]
        if version is not None:
            body = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(),
                                                                            types)
    else:
        raise Decline(f"{site.op_type} has no function body in the ONNX spec")
    if isinstance(body, bytes):
        body = onnx.FunctionProto.FromString(body)
    if body is None or not body.node:
        raise Decline(f"ONNX gives no function body for this {site.op_type} node at opset {site.opset}")
    return body


def inlined(site: Site, opset: int) -> onnx.GraphProto:
    """The node's function body inlined into a graph whose inputs are in0..inN, outputs out0..outM."""
    import onnx
    import onnx.inliner

    from deploycc.legality import onnx_schemas as schemas

    domain = "" if site.node.domain == "ai.onnx" else site.node.domain
    schema = schemas.get_schema(site.op_type, domain, site.opset)
    if schema is None:
        raise Decline(f"onnx has no schema for {site.op_type} at opset {site.opset}")
    node = _node_proto(site, schema)
    body = function_body(site, schema, node)
    function = onnx.FunctionProto()
    function.CopyFrom(body)
    function.domain, function.name = CALL_DOMAIN, site.op_type
    # A body registered at an older opset reads its ops at the model's (the inliner refuses a
    # mismatch); the proof catches any op whose meaning changed in between.
    for entry in function.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    node.domain = CALL_DOMAIN
    graph = onnx.GraphProto(name="call", node=[node])
    for index, value in enumerate(site.inputs):
        if value is not None:
            graph.input.append(onnx.ValueInfoProto(name=f"in{index}", type=_input_type(value)))
    graph.output.extend(onnx.ValueInfoProto(name=f"out{i}") for i in range(site.output_count))
    imports = {entry.domain: entry.version for entry in body.opset_import}
    imports.update({"": opset, CALL_DOMAIN: 1})
    model = onnx.ModelProto(ir_version=10, graph=graph, functions=[function], opset_import=[
        onnx.OperatorSetIdProto(domain=domain, version=version) for domain, version in imports.items()])
    result = onnx.inliner.inline_local_functions(model)
    if any(n.domain == CALL_DOMAIN for n in result.graph.node):
        raise Decline("onnx's inliner left the call in place")
    if any(n.domain not in ("", "ai.onnx") for n in result.graph.node):
        raise Decline("the body uses ops outside the default ONNX domain")
    return result.graph


@register
class FunctionBodyRule(Rule):
    """op -> its ONNX function body: the spec defines the op as exactly this graph of other ops."""

    name = "function-body"
    family = "functions"
    op_type = ANY_OP

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import onnx_ir as ir

        graph = ir.serde.deserialize_graph(inlined(site, b.opset))
        # Rewire the body onto the model's values with replace_all_uses_with, which also reaches
        # the subgraphs (a Scan body) that read outer values by reference.
        graph.outputs.clear()  # outputs are found by name (out0...) below; the call graph is dropped
        known = {id(value) for value in site.inputs if value is not None}
        for formal in graph.inputs:
            actual = site.inputs[int(formal.name[2:])]  # type: ignore[index]
            formal.replace_all_uses_with(actual)  # type: ignore[arg-type]
        produced: dict[str, ir.Value] = {}
        for node in list(graph):
            if any(v is not None and id(v) not in known for v in node.inputs):
                raise Decline("the inlined body reads a value it does not define")
            attributes: dict[str, Any] = dict(node.attributes.items())
            outputs = b.ops(node.op_type, *node.inputs, outputs=len(node.outputs), **attributes)
            for body_value, made in zip(node.outputs, outputs, strict=True):
                body_value.replace_all_uses_with(made)
                known.add(id(made))
                produced[body_value.name or ""] = made
        defined: list[ir.Value] = []  # in order; the engine declines when a used output is missing
        for index in range(site.output_count):
            if f"out{index}" not in produced:
                break
            defined.append(produced[f"out{index}"])
        return defined


@register
class PreviewFunctionBodyRule(FunctionBodyRule):
    """op -> its ONNX function body, for the preview domain (FlexAttention): no runtime knows these yet."""

    name = "function-body-preview"
    domain = "ai.onnx.preview"
