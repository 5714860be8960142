"""Shape values: the small integer tensors exporters compute shapes with (Shape -> Gather ->
Unsqueeze -> Concat -> Reshape), told apart or found equal through ONNX Runtime's symbolic shape
inference, and merged (equal ones become one value, fully known ones initializers).

ORT's inference is believed only where it is right; see _Trust for where it is not.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_ir as ir

SHAPE_VALUE_MAX_ELEMENTS = 16
SYMBOLIC_BUDGET_S = 12.0  # SSDlite (dynamic height and width) needs about 7 s once
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}


@functools.cache
def _symbolic_shape_inference() -> Any:
    """onnxruntime's SymbolicShapeInference, loaded from its file: importing it the usual way runs
    onnxruntime/tools/__init__.py, which imports torch wherever torch is installed (half a GB
    and a second and a half, for a helper deploycc never calls)."""
    import importlib.util
    import sys

    import onnxruntime

    path = Path(onnxruntime.__file__).parent / "tools" / "symbolic_shape_infer.py"
    spec = importlib.util.spec_from_file_location("deploycc_ort_symbolic_shape_infer", path)
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.sympy = _SympyWithQuickSimplify()  # this copy's own name for sympy; sympy is untouched
    # Printing a tower of floors costs a millisecond, and ORT prints a dim again for every value
    # that carries it; here each dim is printed once.
    printed: dict[Any, str] = {}

    def text(dim: Any) -> str:
        if dim not in printed:
            printed[dim] = str(dim)
        return printed[dim]

    module.get_shape_from_sympy_shape = lambda shape: [
        None if dim is None else (int(dim) if module.is_literal(dim) else text(dim)) for dim in shape]

    class Inference(module.SymbolicShapeInference):  # type: ignore[misc]
        printed_dims = printed  # emptied before each model (symbolic_contents), so it never grows

        def _infer_Concat(self, node: Any) -> None:
            # It asserts axis == 0 when it follows a shape's content; PaddlePaddle concatenates
            # 1-D shape pieces on axis -1, which is axis 0 of a vector (this is a private copy).
            for attribute in node.attribute:
                if attribute.name == "axis" and attribute.i < 0 and node.input:
                    try:
                        attribute.i += len(self._get_shape(node, 0))
                    except Exception:  # rank unknown: its own handling follows
                        pass
            super()._infer_Concat(node)

        def _update_computed_dims(self, new_sympy_shape: list) -> None:
            # Its own, with each dim printed once (above).
            for index, dim in enumerate(new_sympy_shape):
                if module.is_literal(dim) or isinstance(dim, str):
                    continue
                name = text(dim)
                if name in self.suggested_merge_:
                    if not module.is_literal(self.suggested_merge_[name]):
                        new_sympy_shape[index] = self.symbolic_dims_[self.suggested_merge_[name]]
                elif name not in self.symbolic_dims_:
                    self.symbolic_dims_[name] = dim

    return Inference


class _SympyWithQuickSimplify:
    """sympy, but simplify() first tries the cheap way. ORT's inference simplifies floor(dim *
    2.0) for a Resize and floor((end - start) / step) for a Slice; on an image model with dynamic
    height and width the dim is a deep tower of Conv floors, and sympy.simplify spends seconds on
    each (YOLOv8n's three Resizes: 6 s of the 10 s its clean-up took). Written with whole
    numbers in place of whole floats, sympy evaluates the outer floor away by itself where the
    argument is an integer, and the result is already in sympy's canonical form (2*floor(h/2) + 2,
    which a Mul of the same dim also gives; simplify left floor(2.0*floor(h/2)) + 2). Only what
    keeps an outer floor or ceiling, or a float that is not whole, goes to simplify as before."""

    def __getattr__(self, name: str) -> Any:
        import sympy

        return getattr(sympy, name)

    @staticmethod
    def simplify(expression: Any) -> Any:
        import sympy

        expression = sympy.sympify(expression)
        whole = {number: sympy.Integer(int(number)) for number in expression.atoms(sympy.Float)
                 if float(number).is_integer()}
        if whole:
            expression = expression.xreplace(whole)
        if isinstance(expression, (sympy.floor, sympy.ceiling)) or expression.atoms(sympy.Float):
            return sympy.simplify(expression)
        return expression


class _OutOfTime(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the Python code inside after `seconds` (sympy on an image model with dynamic
    height and width: SSDlite's inference takes 10 s). Only in the main thread, where signals are
    delivered; elsewhere the code runs to its end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def symbolic_contents(model: ir.Model) -> tuple[dict[str, object], dict[str, tuple[list, int]]]:
    """Value name -> what ONNX Runtime's symbolic shape inference knows the value holds, for the
    small integer tensors that carry shapes: a dim, a list of dims, sums and products of them
    ('batch', ['batch', 'sequence', 768], '12*sequence'). Weights stay out of it (onnx-ir's
    C-API helper hands it the graph without large initializers). Inference that stops part way
    keeps what it found: nodes are visited in order, so every value found is final.

    auto_merge assumes two symbolic dims a broadcast or an elementwise op meets are equal (a
    position table's Min(512, sequence) and sequence): where they are not, the original model
    itself fails on that input."""
    import logging

    from deploycc.graph.private_api import call_onnx_api

    SymbolicShapeInference = _symbolic_shape_inference()

    def infer(proto) -> tuple[dict[str, object], dict[str, tuple[list, int]]]:
        SymbolicShapeInference.printed_dims.clear()
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        quiet = logging.getLogger("deploycc_ort_symbolic_shape_infer")  # the name it is loaded under
        level, quiet.level = quiet.level, logging.ERROR
        try:
            with _time_limit(SYMBOLIC_BUDGET_S):
                inference._preprocess(proto)
                while inference.run_:
                    inference._infer_impl()
        except Exception:  # an op it does not know, or out of time: what it found before stands
            pass
        finally:
            quiet.level = level
        types = {name: ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                         for d in info.type.tensor_type.shape.dim], info.type.tensor_type.elem_type)
                 for name, info in inference.known_vi_.items()
                 if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape")}
        return dict(inference.sympy_data_), types

    try:
        return call_onnx_api(infer, model)
    except Exception:
        return {}, {}


def _content_key(content: object, rank: int) -> tuple | None:
    """A hashable, printable form of a value's symbolic content; None when it does not fit the
    value's rank or is not a small integer tensor's."""
    import numpy as np

    listed = isinstance(content, (list, tuple, np.ndarray))
    items = list(np.asarray(content, dtype=object).reshape(-1)) if listed else [content]
    # ORT keeps an unsqueezed scalar as the scalar: one element, of rank 1.
    if rank not in (0, 1) or (rank == 0 and (listed and len(items) != 1)):
        return None
    if len(items) > SHAPE_VALUE_MAX_ELEMENTS:
        return None
    parts: list[int | str] = []
    for item in items:  # ints, or sympy expressions (onnxruntime's inference works in sympy)
        if isinstance(item, (int, np.integer)) or getattr(item, "is_Integer", False):
            parts.append(int(item))  # type: ignore[arg-type]
        elif getattr(item, "free_symbols", None):
            if "?" in str(item):  # ORT's name for a dim it knows nothing of: two are not one
                return None
            parts.append(str(item))
        else:
            return None
    return (rank, *parts)


# ORT's symbolic inference is right about shapes that follow from shapes, and about the small
# integer arithmetic exporters do on them; it is wrong elsewhere, found on Silero VAD: it gives an
# If the shapes of one branch (the branches of `squeeze(0)` differ in rank), it reverses a 2-D
# Slice with step -1 as if it were flat (torch's F.pad reverses its pads so), and it calls
# Equal(floor(...) + 1, 1) false because the two sympy expressions differ in form. So its word
# is taken only along the ops below, from graph inputs and constants.
# Inputs whose *content* decides an op's output shape: that content must be trusted too.
SHAPE_FROM_CONTENT = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "OneHot": (1,), "CenterCropPad": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL2": (1,), "ReduceL1": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
    "ReduceLogSum": (1,), "GridSample": (), "Col2Im": (1, 2), "STFT": (2, 3), "DFT": (1,),
}
# Ops whose integer results ORT's inference computes right from trusted inputs.
CONTENT_OPS = {"Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Add", "Sub", "Mul",
               "Div", "Identity", "Min", "Max", "Reshape", "Constant", "ConstantOfShape", "Where", "Equal",
               "Slice"}


class _Trust:
    """Which values' shapes, and which small integer values' contents, ORT's inference may be
    believed about, walking the graph in order."""

    def __init__(self, graph: ir.Graph, contents: dict[str, object],
                 types: dict[str, tuple[list, int]]) -> None:
        self.contents, self.types = contents, types
        self.shape: set[int] = {id(v) for v in graph.inputs} | {id(v) for v in graph.initializers.values()}
        self.content: set[int] = {id(v) for v in graph.initializers.values()}

    def visit(self, node: ir.Node) -> None:
        inputs = list(node.inputs)
        if node.op_type == "Constant":
            self.shape.update(id(v) for v in node.outputs)
            self.content.update(id(v) for v in node.outputs)
            return
        if node.domain not in ("", "ai.onnx") or node.op_type in CONTROL_FLOW:
            return
        shaped = all(v is None or id(v) in self.shape for v in inputs)
        if node.op_type not in ("Shape", "Size") and not shaped:
            return
        # A shape-deciding input whose content ORT's inference does not know is fine: it then
        # gives the output fresh dims of its own (opaque, never wrong); one it knows must be trusted.
        by_content = SHAPE_FROM_CONTENT.get(node.op_type, ())
        if not all(i >= len(inputs) or inputs[i] is None or id(inputs[i]) in self.content
                   or (inputs[i].name or "") not in self.contents for i in by_content):  # type: ignore[union-attr]
            return
        if node.op_type in ("Shape", "Size") and not (inputs and inputs[0] is not None
                                                      and id(inputs[0]) in self.shape):
            return
        self.shape.update(id(v) for v in node.outputs)
        if node.op_type in CONTENT_OPS and (node.op_type in ("Shape", "Size") or all(
                v is None or id(v) in self.content for v in inputs)):
            # Contents of rank 0 and 1 only: the 2-D Slice above went wrong.
            flat = all(self.rank(v) in (0, 1) for v in node.outputs) and (
                node.op_type in ("Shape", "Size") or all(v is None or self.rank(v) in (0, 1) for v in inputs))
            if flat and (node.op_type != "Equal" or self._decided(inputs)):
                self.content.update(id(v) for v in node.outputs)

    def rank(self, value: ir.Value) -> int | None:
        """The value's rank, as the IR has it or else as ORT's inference found it."""
        if value.shape is not None:
            return value.shape.rank()
        return len(self.types[value.name][0]) if value.name in self.types else None

    def dtype(self, value: ir.Value) -> ir.DataType | None:
        import onnx_ir as ir

        if value.dtype is not None:
            return value.dtype
        return ir.DataType(self.types[value.name][1]) if value.name in self.types else None

    def _decided(self, inputs: list) -> bool:
        """Whether Equal's answer follows from its inputs' contents: two numbers, or a dim
        expression (never negative) against a negative number (the -1 of `expand(-1, ...)`).
        Two expressions that differ in form may still be equal, and sympy says False."""
        import numpy as np

        sides = []
        for value in inputs[:2]:
            content = self.contents.get(value.name) if value is not None else None
            if content is None:
                if value is None or value.const_value is None:
                    return False
                content = value.const_value.numpy()
            sides.append(list(np.asarray(content, dtype=object).reshape(-1)))
        if len(sides) != 2:
            return False
        a, b = sides
        if len(a) != len(b) and 1 not in (len(a), len(b)):
            return False
        width = max(len(a), len(b))
        for left, right in zip(a * width if len(a) == 1 else a, b * width if len(b) == 1 else b, strict=True):
            numbers = [isinstance(x, (int, np.integer)) or getattr(x, "is_Integer", False)
                       for x in (left, right)]
            if all(numbers):
                continue
            number, expression = (left, right) if numbers[0] else (right, left)
            if not any(numbers) or int(number) >= 0 or not getattr(expression, "is_nonnegative", False):
                return False
        return True

    def annotate(self, node: ir.Node) -> int:
        """Give the node's outputs the shapes ORT's inference found where the IR has none and the
        shape is trusted: onnx's inference stops at a Reshape whose target it cannot read, and
        then x + 0 and x * 1 (MobileBERT's NoNorm with its initial weights) cannot be told from
        a broadcast. Returns how many outputs got one."""
        import onnx_ir as ir

        given = 0
        for value in node.outputs:
            if value.shape is None and id(value) in self.shape and value.name in self.types:
                dims, elem_type = self.types[value.name]
                if value.type is None:  # a shape without a type is not written out (onnx-ir warns)
                    if not elem_type:
                        continue
                    value.type = ir.TensorType(ir.DataType(elem_type))
                value.shape = ir.Shape(dims)
                given += 1
        return given

    def content_of(self, node: ir.Node) -> bool:
        return all(id(v) in self.content for v in node.outputs)


def _reshape_keeps(node: ir.Node, trust: _Trust) -> bool:
    """Whether a Reshape's trusted target is, dim by dim, the trusted shape its input already
    has: the same symbol or number, 0 copying the dim (without allowzero), or the one -1. The
    transformers' attention does `view(batch, -1, seq, head)` on what already has that shape."""
    x, shape = (node.inputs[0], node.inputs[1]) if len(node.inputs) == 2 else (None, None)
    if x is None or shape is None or id(x) not in trust.shape or id(shape) not in trust.content:
        return False
    dims = trust.types[x.name][0] if x.name in trust.types else None
    content = trust.contents.get(shape.name or "")
    if content is None and shape.const_value is not None:
        content = shape.const_value.numpy()
    key = _content_key(content, 1) if content is not None else None
    if dims is None or key is None or len(key) - 1 != len(dims):
        return False
    from deploycc.passes.prune import reshape_keeps

    return reshape_keeps(list(key[1:]), dims, bool(node.attributes.get_int("allowzero")))


# The shape arithmetic's types: integers, and the booleans an Equal on a shape gives (the -1 test
# of a transformer's mask expansion, [False, True, False, False] however dynamic the batch).
SHAPE_VALUE_TYPES = {"INT64", "INT32", "BOOL"}


def merge_equal_shape_values(model: ir.Model) -> tuple[int, int]:
    """Shape values whose content is known to be equal become one value; those fully known become
    initializers; a Reshape to the shape its input is known to have is passed by. Returns
    (merged or passed by, made constant). Of equal values the first in graph order stays:
    every reader of a later one comes after it, so the graph stays acyclic and sorted."""
    import numpy as np
    import onnx_ir as ir

    contents, types = symbolic_contents(model)
    if not contents:
        return 0, 0
    graph = model.graph
    first: dict[tuple, ir.Value] = {}
    merged = constant = 0
    trust = _Trust(graph, contents, types)
    for node in list(graph):
        trust.visit(node)
        trust.annotate(node)
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and _reshape_keeps(node, trust) \
                and not node.outputs[0].is_graph_output():
            node.outputs[0].replace_all_uses_with(node.inputs[0])  # type: ignore[arg-type]
            merged += 1
            continue
        if not trust.content_of(node):
            continue
        for value in node.outputs:
            rank, dtype = trust.rank(value), trust.dtype(value)
            if value.name not in contents or value.is_graph_output() or rank is None \
                    or dtype is None or dtype.name not in SHAPE_VALUE_TYPES or not value.uses():
                continue
            key = _content_key(contents[value.name], rank)
            if key is None:
                continue
            if all(isinstance(part, int) for part in key[1:]) and node.op_type != "Constant":
                if model.ir_version < 4:  # an IR-3 initializer must also be a graph input
                    continue
                array = np.array(key[1:], dtype=dtype.numpy())
                array = array.reshape(()) if key[0] == 0 else array
                name = f"{value.name}_known"
                while name in graph.initializers:
                    name += "_"
                known = ir.Value(name=name, shape=ir.Shape(list(array.shape)), type=ir.TensorType(dtype),
                                 const_value=ir.tensor(array, name=name))
                graph.register_initializer(known)
                trust.shape.add(id(known))
                trust.content.add(id(known))
                value.replace_all_uses_with(known)
                constant += 1
                continue
            typed = (dtype, *key)
            if typed in first:
                value.replace_all_uses_with(first[typed])
                merged += 1
            else:
                first[typed] = value
    return merged, constant
