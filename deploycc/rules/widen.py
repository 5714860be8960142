"""Running a node in a wider element type, where the target has the op but not for this type.

ONNX Runtime's CPU kernels mostly lack bfloat16 (Add, Mul, Expand... "Could not find an
implementation") and some lack 8/16-bit integers (Max, Min on int16). The node runs in float32
(or int32/int64) between Casts: for floats each op's result is rounded back to the narrow type,
which is what a narrow kernel computes (ml_dtypes and the ONNX reference compute bfloat16 the
same way); for integers only ops that select or compare values are widened, so no overflow
can differ; booleans are widened only through ops that move them, never compute. Tried last,
after the op's own rules and its function body, and only when the
target accepts the widened node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import ANY_OP, Builder, Decline, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

WIDER_FLOATS = {"BFLOAT16": "FLOAT", "FLOAT16": "FLOAT"}
WIDER_INTEGERS = {"INT8": "INT32", "UINT8": "INT32", "INT16": "INT32", "UINT16": "INT32", "UINT32": "INT64"}
# Integer ops whose results are among their inputs (or booleans): widening cannot overflow.
SELECTING_OPS = {"Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "TopK",
                 "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "Where", "Sort"}
# Ops that move values without computing on them, and which of their inputs carry the values:
# booleans move as int32 (0/1) where the target moves only numbers (TensorRT 8.2's Gather,
# GatherND on a transformer's causal-mask buffer). None: every input.
MOVING_OPS: dict[str, tuple[int, ...] | None] = {
    "Gather": (0,), "GatherND": (0,), "GatherElements": (0,), "Slice": (0,), "Concat": None,
    "Reshape": (0,), "Transpose": (0,), "Expand": (0,), "Tile": (0,), "Squeeze": (0,),
    "Unsqueeze": (0,), "Flatten": (0,), "Where": (1, 2),
    "NonZero": (0,)}  # not moving, but a boolean is nonzero exactly where its 0/1 is
# Integer ops some targets run only in float (TensorRT 8.2's CumSum: RoBERTa's position ids
# count a mask): float32 holds every integer below 2**24 exactly, so sums of counts, positions
# and masks come out the same; the proof checks the node.
FLOAT_ONLY_OPS = {"CumSum": (0,)}
# Integer ops some targets run only in float whose result is exact only where float32 holds every
# value: TensorRT 8.5's ArgMax, with which CLIP's text tower finds the end-of-text token as the
# largest token id. Widened only where the values are proven below 2**24 in magnitude: the same
# tensor indexes a Gather whose axis is no longer (an input out of that range makes the model
# itself fail, so none reaches the node).
FLOAT_WHERE_BOUNDED = {"ArgMax": (0,), "ArgMin": (0,)}
FLOAT_EXACT_BELOW = 2**24
INTEGERS_IN_FLOAT = {"INT32", "INT64", "INT16", "INT8", "UINT8", "UINT16"}
# The element type is the point of these ops.
TYPE_OPS = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "BitCast",
            "Constant", "Identity", "Shape", "Size", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
            "BitwiseNot"}


def _wider(site: Site, index: int) -> str | None:
    """The wider type input `index` is computed in, or None to leave it as it is."""
    dtype = site.dtype(index)
    if dtype is None:
        return None
    if dtype.name in WIDER_FLOATS:
        return WIDER_FLOATS[dtype.name]
    exponent = site.op_type == "Pow" and index == 1
    if dtype.name in WIDER_INTEGERS and (site.op_type in SELECTING_OPS or exponent):
        return WIDER_INTEGERS[dtype.name]
    if dtype.name in INTEGERS_IN_FLOAT and index in FLOAT_ONLY_OPS.get(site.op_type, ()):
        return "FLOAT"
    if (dtype.name in INTEGERS_IN_FLOAT and index in FLOAT_WHERE_BOUNDED.get(site.op_type, ())
            and _indexes_a_short_axis(site.node, index)):
        return "FLOAT"
    if dtype.name == "BOOL" and site.op_type in MOVING_OPS:
        carriers = MOVING_OPS[site.op_type]
        if carriers is not None and index not in carriers:
            return None
        return "FLOAT" if site.op_type == "NonZero" else "INT32"  # TensorRT's NonZero: floats only
    return None


def _indexes_a_short_axis(node: ir.Node, index: int) -> bool:
    """Whether the node's input `index` is also the indices of a Gather, in the node's own graph,
    along a static axis shorter than FLOAT_EXACT_BELOW: every value the model runs with then lies in
    [-axis, axis) (ONNX Runtime refuses any other), exactly representable in float32."""
    value = node.inputs[index] if index < len(node.inputs) else None
    if value is None:
        return False
    for user, position in value.uses():
        if user.op_type != "Gather" or user.domain not in ("", "ai.onnx") or position != 1:
            continue
        if user.graph is not node.graph or user.inputs[0] is None or user.inputs[0].shape is None:
            continue
        shape = user.inputs[0].shape
        axis = user.attributes.get_int("axis", 0)
        dim = shape[axis] if -len(shape) <= axis < len(shape) else None
        if isinstance(dim, int) and dim <= FLOAT_EXACT_BELOW:
            return True
    return False


@register
class ComputeWiderRule(Rule):
    """op(x: T) = Cast(op(Cast(x, W)), T): bfloat16/float16 in float32, small-integer selections in
    int32, booleans moved (Gather, Slice, Concat...) as int32."""

    name = "compute-wider"
    family = "widen"
    op_type = ANY_OP
    atol = 1e-3
    rtol = 1e-2  # a bfloat16 result has 8 significant bits

    def check(self, site: Site) -> str | None:
        if site.op_type in TYPE_OPS:
            return f"{site.op_type} is about its element type"
        if not any(_wider(site, index) for index in range(len(site.inputs))):
            return "no input is of a type this rule widens (bfloat16, float16, small integers, booleans)"
        if any(value.dtype is None for value in site.node.outputs):
            return "an output type is unknown"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import onnx_ir as ir

        inputs: list[ir.Value | None] = []
        for index, value in enumerate(site.inputs):
            wider = _wider(site, index)
            if value is None or wider is None:
                inputs.append(value)
                continue
            cast = b.op("Cast", value, to=int(ir.DataType[wider]))
            cast.type, cast.shape = ir.TensorType(ir.DataType[wider]), value.shape
            inputs.append(cast)
        domain = "" if site.node.domain == "ai.onnx" else site.node.domain
        outputs = b.ops(site.op_type, *inputs, outputs=site.output_count, domain=domain,
                        **dict(site.node.attributes.items()))
        inner = outputs[0].producer()
        if site.accepts is not None and inner is not None and not site.accepts(inner):
            raise Decline(f"the target lacks {site.op_type} in the wider type too")
        results = []
        for made, original in zip(outputs, site.node.outputs, strict=True):
            dtype = original.dtype
            narrow = dtype is not None and (dtype.name in WIDER_FLOATS or dtype.name in WIDER_INTEGERS
                                            or (dtype.name == "BOOL" and site.op_type in MOVING_OPS
                                                and site.op_type != "NonZero")
                                            or site.op_type in FLOAT_ONLY_OPS)
            results.append(b.op("Cast", made, to=int(dtype)) if narrow and dtype is not None else made)
        return results
