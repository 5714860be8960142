"""What a rewrite rule is: a pattern (one op), a check that can decline, and a replacement.

Every rule in the catalog roots at one node: the op a target lacks. That keeps matching linear
in the graph size (the onnxscript matcher is quadratic for multi-output patterns) and makes the
proof simple: the node and its replacement are two tiny graphs over the same inputs.

A rule sees the node through a `Site` (attributes, inputs, constant values, the model's opset)
and builds its replacement through a `Builder`, which knows the opset so it can emit the right
form of ops whose signature changed (ReduceMean axes became an input at 18, Squeeze at 13).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

    from deploycc.targets.schema import Target


class Site:
    """One node as a rule sees it: attributes, inputs (maybe re-homed for a proof), opset."""

    def __init__(self, node: ir.Node, inputs: Sequence[ir.Value | None], opset: int,
                 accepts: Callable[[ir.Node], bool] | None = None) -> None:
        self.node = node
        self.inputs = list(inputs)
        self.opset = opset
        # Whether the target runs a node (the legalizer passes its judge): a rule whose
        # replacement is only worth it when the target takes it asks here. None: not known.
        self.accepts = accepts

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def output_count(self) -> int:
        return len(self.node.outputs)

    def output_used(self, index: int) -> bool:
        if index >= len(self.node.outputs):
            return False
        value = self.node.outputs[index]
        return bool(value.uses()) or value.is_graph_output()

    def attr(self, name: str, default: Any = None) -> Any:
        attr = self.node.attributes.get(name)
        if attr is None:
            return default
        value = attr.value
        if isinstance(value, (list, tuple)):
            return list(value)
        return value

    def input(self, index: int) -> ir.Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def has_input(self, index: int) -> bool:
        return self.input(index) is not None

    def constant(self, index: int) -> np.ndarray | None:
        """The input's value when it is a constant (initializer or Constant node), else None."""
        from deploycc.graph.graphs import constant_tensor

        return constant_tensor(self.input(index))

    def rank(self, index: int) -> int | None:
        value = self.input(index)
        return None if value is None or value.shape is None else len(value.shape)

    def shape(self, index: int) -> list[int | None] | None:
        value = self.input(index)
        if value is None or value.shape is None:
            return None
        return [d if isinstance(d, int) else None for d in value.shape]

    def dtype(self, index: int) -> ir.DataType | None:
        value = self.input(index)
        return None if value is None else value.dtype


class Builder:
    """Emits replacement nodes on an onnx-ir Tape, in the forms valid at the model's opset."""

    def __init__(self, opset: int, name_prefix: str) -> None:
        import onnx_ir as ir

        self.tape = ir.tape.Tape()
        self.opset = opset
        self._prefix = name_prefix
        self._count = 0

    @property
    def prefix(self) -> str:
        """The names of the nodes this builder emits start so (a Loop body's builder extends it)."""
        return self._prefix

    @property
    def nodes(self) -> list[ir.Node]:
        return list(self.tape.nodes)

    def _name(self) -> str:
        self._count += 1
        return f"{self._prefix}/{self._count}"

    def op(self, op_type: str, *inputs: ir.Value | None, domain: str = "",
           **attributes: Any) -> ir.Value:
        attrs = {k: v for k, v in attributes.items() if v is not None}
        name = self._name()
        value = self.tape.op(op_type, list(inputs), attrs or None, domain=domain, name=name)
        value.name = name
        return value

    def ops(self, op_type: str, *inputs: ir.Value | None, outputs: int, domain: str = "",
            **attributes: Any) -> Sequence[ir.Value]:
        attrs = {k: v for k, v in attributes.items() if v is not None}
        name = self._name()
        values = self.tape.op_multi_out(op_type, list(inputs), attrs or None,
                                        num_outputs=outputs, domain=domain, name=name)
        for i, value in enumerate(values):
            value.name = f"{name}:{i}"
        return values

    def const(self, array: Any, dtype: Any = None) -> ir.Value:
        """A Constant node holding `array` (lifted to an initializer after the pass)."""
        import numpy as np
        import onnx_ir as ir

        data = np.asarray(array, dtype=dtype)
        return self.op("Constant", value=ir.tensor(data, name=self._prefix + f"/c{self._count}"))

    def scalar_like(self, value: float, dtype: ir.DataType | None) -> ir.Value:
        """A scalar constant in the dtype of the tensor it combines with (float32 if unknown)."""
        import numpy as np

        np_dtype = dtype.numpy() if dtype is not None else np.float32
        return self.const(np.array(value, dtype=np_dtype))

    def ints(self, values: Sequence[int]) -> ir.Value:
        import numpy as np

        return self.const(np.array(list(values), dtype=np.int64))

    # Ops whose signature moved an attribute to an input at some opset.
    def reduce(self, op_type: str, x: ir.Value, axes: Sequence[int] | None,
               keepdims: int = 1) -> ir.Value:
        axes_as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes is None:
            return self.op(op_type, x, keepdims=keepdims)
        if axes_as_input:
            return self.op(op_type, x, self.ints(axes), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.ints(axes))
        return self.op("Unsqueeze", x, axes=list(axes))

    def squeeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        if self.opset >= 13:
            return self.op("Squeeze", x, self.ints(axes))
        return self.op("Squeeze", x, axes=list(axes))

    def softmax(self, x: ir.Value, axis: int = -1) -> ir.Value:
        """Softmax along one axis (before opset 13 Softmax flattened from `axis` on)."""
        if self.opset >= 13 or axis == -1:
            return self.op("Softmax", x, axis=axis)
        shifted = self.op("Sub", x, self.reduce("ReduceMax", x, [axis]))
        exp = self.op("Exp", shifted)
        return self.op("Div", exp, self.reduce("ReduceSum", exp, [axis]))


# A rule whose op_type is ANY_OP is tried, after the op's own rules, for every op of its domain.
ANY_OP = "*"


class Decline(Exception):
    """Raised from inside `expand` when a rule finds, late, that it cannot rewrite this node."""


class Rule:
    """A rewrite for one op. Subclasses give the math in their docstring.

    `since`/`until` bound the op versions (the model's opset for the op's domain) the rule
    understands; `check` returns None to accept or a sentence saying why it declines; `expand`
    returns the values that replace the node's outputs, in order.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    op_type: ClassVar[str]
    domain: ClassVar[str] = ""
    since: ClassVar[int] = 1
    until: ClassVar[int | None] = None
    # The lowest default-domain opset the replacement can be written at (the opset pass converts
    # a model inside the target's range up to it where that is what the target needs)
    min_default_opset: ClassVar[int] = 1
    # Proof tolerances for float32; rules that approximate (none should) would say so here.
    atol: ClassVar[float] = 1e-4
    rtol: ClassVar[float] = 1e-4

    def check(self, site: Site) -> str | None:
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        raise NotImplementedError

    def proof_values(self, site: Site, seed: int) -> dict[int, Any]:
        """Values for inputs that random data would put outside the op's domain (repeated axes),
        by input index, for the rule's proof; most rules need none."""
        return {}

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else cls.name

    def applies_at(self, opset: int) -> str | None:
        if opset < self.since or (self.until is not None and opset > self.until):
            upper = self.until if self.until is not None else "newest"
            return f"handles {self.op_type} at opsets {self.since}..{upper}, the model has {opset}"
        return None

    def writes_at(self, default_opset: int) -> str | None:
        """Why the replacement cannot be written at the model's default-domain opset, if it cannot
        (the opset pass converts a model up to min_default_opset where the target needs the rule)."""
        if default_opset < self.min_default_opset:
            return (f"writes its replacement at opset {self.min_default_opset} or later, the model has "
                    f"{default_opset}: `--opset {self.min_default_opset}` converts the model first")
        return None


class GraphRule:
    """A rewrite of the whole graph, for what no single node can change alone: every float64
    tensor together (the signature's types follow), or a quantized form whose nodes share their
    scales. `refused` picks what the target refuses; `apply` rewrites them and says how many it
    changed. The legalize pass proves the result by running the graph before and after it, and
    undoes a change whose proof fails."""

    name: ClassVar[str]
    family: ClassVar[str]
    op_type: ClassVar[str] = "<graph>"
    domain: ClassVar[str] = ""
    since: ClassVar[int] = 1
    until: ClassVar[int | None] = None
    done: ClassVar[str] = "changed"  # how the report says what was done to the nodes
    # The tolerances its proof compares the graph before and after with: a rewrite of a quantized
    # form moves outputs by a step of the quantization grid where ORT's integer kernels round in
    # fixed point and the float form rounds once, as verification of a quantized model allows.
    proof_precision: ClassVar[Precision] = Precision.FP32

    def refused(self, model: ir.Model, target: Target) -> list[ir.Node] | None:
        """The nodes to rewrite (an empty list: the whole graph), or None when nothing is refused."""
        raise NotImplementedError

    def blockers(self, model: ir.Model) -> list[str]:
        """Why the rewrite cannot be made here (empty when it can)."""
        return []

    def apply(self, model: ir.Model, nodes: list[ir.Node]) -> int:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else cls.name
