"""Named predicates: the conditions under which an op is legal on a target.

Target files refer to these by name (`predicates = [{ name = "input_is_constant", input = "axes" }]`);
a target file cannot add code, and an unknown name is a load error. The names, their meanings and
their arguments are declared in targets/vocabulary.py (loading a target checks against them there);
this module implements each. Each predicate returns None when the node satisfies it, or a sentence
saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deploycc.targets.vocabulary import PREDICATES, PredicateSignature

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import PredicateRef


@dataclass(frozen=True)
class Predicate:
    signature: PredicateSignature  # its name, meaning and arguments, as target files may name it
    check: Callable[[ir.Node, PredicateRef, Any], str | None]


REGISTRY: dict[str, Predicate] = {}


def predicate(name: str):
    """Implement the predicate that targets/vocabulary.py declares as `name`."""
    if name not in PREDICATES:
        raise AssertionError(f"predicate {name!r} is not declared in deploycc/targets/vocabulary.py")

    def register(func: Callable[[ir.Node, PredicateRef, Any], str | None]):
        REGISTRY[name] = Predicate(PREDICATES[name], func)
        return func

    return register


# ---------------------------------------------------------------------------- helpers


def _input(node: ir.Node, ref: PredicateRef, schema: Any) -> tuple[int | None, ir.Value | None]:
    from deploycc.legality.onnx_schemas import input_index

    key = ref.arg("input", 0)
    index = input_index(schema, key) if schema is not None else (key if isinstance(key, int) else None)
    if index is None or index >= len(node.inputs):
        return index, None
    return index, node.inputs[index]


def constant_array(value: ir.Value | None) -> Any | None:
    """The value's contents when it is an initializer or the output of a Constant node."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        for attr in producer.attributes.values():
            if attr.name == "value" and attr.value is not None:
                return attr.value.numpy()
            if attr.name in ("value_int", "value_float"):
                return attr.value
            if attr.name in ("value_ints", "value_floats"):
                return list(attr.value)
    return None


def is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True
    if value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant"


def _label(node: ir.Node, index: int | None, ref: PredicateRef) -> str:
    return f"input '{ref.arg('input', index)}'"


# ------------------------------------------------------------------------- predicates


@predicate("input_is_constant")
def _input_is_constant(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    index, value = _input(node, ref, schema)
    if value is None or is_constant(value):
        return None
    return f"{_label(node, index, ref)} must be a constant (initializer), but is computed at run time"


@predicate("input_is_zero")
def _input_is_zero(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    import numpy as np

    index, value = _input(node, ref, schema)
    if value is None:
        return None
    array = constant_array(value)
    if array is None:
        return f"{_label(node, index, ref)} must be a constant zero, but is computed at run time"
    if np.any(np.asarray(array, dtype=np.float64) != 0):
        return f"{_label(node, index, ref)} must be zero"
    return None


def _rank(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


@predicate("spatial_rank_in")
def _spatial_rank_in(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    rank = _rank(node.inputs[0] if node.inputs else None)
    allowed = list(ref.arg("ranks"))
    if rank is None or rank - 2 in allowed:
        return None
    return f"{rank - 2}D {node.op_type} (only {'/'.join(f'{r}D' for r in allowed)} supported)"


@predicate("input_rank_in")
def _input_rank_in(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    index, value = _input(node, ref, schema)
    rank = _rank(value)
    allowed = list(ref.arg("ranks"))
    if rank is None or rank in allowed:
        return None
    return f"{_label(node, index, ref)} has rank {rank} (supported ranks: {allowed})"


@predicate("output_unused")
def _output_unused(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    index = int(ref.arg("output"))
    if index >= len(node.outputs):
        return None
    value = node.outputs[index]
    if value.uses() or value.is_graph_output():
        return f"output {index} ('{value.name}') is used, but the target cannot produce it"
    return None


@predicate("static_input_shapes")
def _static_input_shapes(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    for value in node.inputs:
        if value is None:
            continue
        if value.shape is None or not all(isinstance(d, int) for d in value.shape):
            return f"input '{value.name}' has a dynamic shape ({value.shape}); static shapes required"
    return None


@predicate("einsum_no_ellipsis_or_diagonal")
def _einsum_plain(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    attr = node.attributes.get("equation")
    equation = str(attr.value) if attr is not None else ""
    if "..." in equation:
        return f"Einsum equation {equation!r} uses an ellipsis"
    for operand in equation.split("->")[0].split(","):
        letters = operand.strip()
        if len(set(letters)) != len(letters):
            return f"Einsum equation {equation!r} takes a diagonal (repeated subscript)"
    return None


@predicate("attribute_in")
def _attribute_in(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    name = ref.arg("attribute")
    attr = node.attributes.get(name)
    value = attr.value if attr is not None else ref.arg("default")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    allowed = list(ref.arg("values"))
    if value is None or value in allowed:
        return None
    return f"{name}={value!r} is not supported (supported: {', '.join(map(str, allowed))})"


@predicate("input_dtype_in")
def _input_dtype_in(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    from deploycc.dtypes import type_name

    index, value = _input(node, ref, schema)
    found = type_name(value) if value is not None else None
    allowed = list(ref.arg("dtypes"))
    if found is None or found in allowed:
        return None
    return f"{_label(node, index, ref)} is {found} (supported: {', '.join(allowed)})"


@predicate("saturating_cast_not_to")
def _saturating_cast_not_to(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    attr = node.attributes.get("saturate")
    if attr is not None and int(attr.value) == 0:
        return None
    from deploycc.dtypes import dtype_name
    from deploycc.graph.graphs import cast_destination

    destination = dtype_name(cast_destination(node))
    if destination is None or destination not in list(ref.arg("dtypes")):
        return None
    return f"a saturating cast to {destination} does not saturate out-of-range values on this target"


@predicate("empty_constant_not_an_output")
def _empty_constant_not_an_output(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    from deploycc.graph.graphs import reaches_graph_output

    attr = node.attributes.get("value")
    if attr is None or not node.outputs:
        return None
    tensor = attr.value
    if 0 not in tuple(tensor.shape) or not reaches_graph_output(node.outputs[0]):
        return None
    return (f"an empty constant (shape {list(tensor.shape)}) that is its graph's output (an If branch's "
            "empty result) is read with one element")


@predicate("float_mod_is_fmod")
def _float_mod_is_fmod(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    value = node.inputs[0] if node.inputs else None
    attr = node.attributes.get("fmod")
    if value is None or value.dtype is None or not value.dtype.is_floating_point():
        return None
    if attr is not None and int(attr.value) == 1:
        return None
    return "Mod with fmod=0 (Python's sign rule) on floating-point inputs is not supported"



@predicate("reduction_rank_is_static")
def _reduction_rank_is_static(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    attr = node.attributes.get("keepdims")
    if attr is None or int(attr.value) == 1:  # keepdims defaults to 1: the rank stays
        return None
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None or is_constant(axes):
        return None
    if axes.shape is not None and len(axes.shape) == 1 and axes.shape[0] == 1:
        return None  # one axis: rank - 1, whatever its value (OpenVINO's plugin manages this one)
    return "keepdims=0 with several axes computed at run time gives an output of dynamic rank"


def spatial_scale(node: ir.Node) -> tuple[int, Any] | None:
    """(the data input's index, the constant aligned to the data's rank) when the node scales a
    tensor by a constant that varies along its axes from 2 on (the spatial axes of NC... data):
    Mul by a constant on either side, or Div by a constant divisor."""
    import numpy as np

    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    constant_sides = [index for index, value in enumerate(node.inputs) if constant_array(value) is not None]
    if len(constant_sides) != 1 or (node.op_type == "Div" and constant_sides != [1]):
        return None
    data_index = 1 - constant_sides[0]
    rank = _rank(node.inputs[data_index])
    scale = np.asarray(constant_array(node.inputs[constant_sides[0]]))
    if rank is None or rank < 3 or scale.ndim > rank:
        return None
    shape: tuple[int, ...] = (1,) * (rank - scale.ndim) + tuple(int(dim) for dim in scale.shape)
    if all(dim == 1 for dim in shape[2:]):
        return None
    return data_index, scale.reshape(shape)


def spatial_scale_into_conv(node: ir.Node) -> str | None:
    """Why OpenVINO would fold this node into the Conv that reads it, wrongly (None: it would not).
    Its MultiplyConvolutionFusion takes a constant scale that broadcasts onto the weights' shape
    for a per-channel one, so a scale over H x W positions before a kernel of the same H x W
    scales kernel taps instead of pixels (openvino 2026.4)."""
    scaled = spatial_scale(node)
    output = node.outputs[0]
    uses = list(output.uses())
    if scaled is None or output.is_graph_output() or len(uses) != 1:
        return None
    consumer, index = uses[0].node, uses[0].idx
    if consumer.op_type != "Conv" or consumer.domain not in ("", "ai.onnx") or index != 0:
        return None
    data = node.inputs[scaled[0]]
    dims = list(data.shape) if data is not None and data.shape is not None else []
    if any(dim == 1 and int(scale) != 1 for dim, scale in zip(dims, scaled[1].shape, strict=False)):
        return None  # the scale widens the tensor: the fusion leaves that alone
    weights = constant_array(consumer.inputs[1]) if len(consumer.inputs) > 1 else None
    spatial = scaled[1].shape[2:]
    if weights is not None and any(dim not in (1, kernel) for dim, kernel in zip(spatial, weights.shape[2:],
                                                                                 strict=False)):
        return None  # the scale does not fit the kernel's shape, so it cannot be folded into it
    return (f"{node.op_type} by a constant of shape {list(scaled[1].shape)} that varies over spatial "
            "positions, read by a Conv: folded into the Conv's weights as if it were per channel")


@predicate("not_spatial_scale_into_conv")
def _not_spatial_scale_into_conv(node: ir.Node, ref: PredicateRef, schema: Any) -> str | None:
    return spatial_scale_into_conv(node)


_unimplemented = set(PREDICATES) - set(REGISTRY)
if _unimplemented:  # a target file could name it and pass loading, then fail the check
    raise AssertionError(f"declared in deploycc/targets/vocabulary.py without an implementation: "
                         f"{sorted(_unimplemented)}")
