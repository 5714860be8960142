"""Half precision emulated on ONNX Runtime CPU: the model with every layer's float output rounded
through float16 (or bfloat16) and back, as an engine that stores activations in half does
between layers, and its weights rounded (clamped to the half range first, as TensorRT clamps
weights it converts). A layer kept in fp32 keeps its output and its weights as they are.

Arithmetic inside a layer stays fp32: TensorRT's half kernels accumulate convolutions and matrix
products in fp32, so what half changes is what is stored between layers, and that is what
overflows (T5's feed-forward outputs, an unnormalised variance).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import onnx_ir as ir

ROUNDED_SUFFIX = "__deploycc_wide"  # the unrounded tensor, renamed; the rounded one takes its name
FP16_MAX = float(np.finfo(np.float16).max)  # 65504
# The input slots that read a float tensor as sizes, scales or bounds: an engine computes them on
# the host in fp32 (TensorRT's shape tensors), never in half, so they are not rounded.
SHAPE_SLOTS = {"Resize": {1, 2, 3}, "Upsample": {1}, "Reshape": {1}, "Expand": {1}, "Tile": {1},
               "Slice": {1, 2, 3, 4}, "Range": {0, 1, 2}, "ConstantOfShape": {0}, "Pad": {1}}
INTEGER_TYPES = {6, 7, 2, 3, 4, 5, 12, 13, 9}  # Cast targets that read a float as a count


def half_type(precision: Precision) -> ir.DataType:
    import onnx_ir as ir

    return ir.DataType.BFLOAT16 if precision == Precision.BF16 else ir.DataType.FLOAT16


def round_array(array: np.ndarray, precision: Precision, *, clamp: bool) -> np.ndarray:
    """float32 values through the half type and back (clamped to its range first with `clamp`)."""
    if precision == Precision.BF16:
        import ml_dtypes

        return np.asarray(array, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    values = np.asarray(array, np.float32)
    if clamp:
        values = np.clip(values, -FP16_MAX, FP16_MAX)
    with np.errstate(over="ignore"):
        return values.astype(np.float16).astype(np.float32)


def _is_float32(value: ir.Value | None) -> bool:
    import onnx_ir as ir

    return value is not None and value.type is not None and value.dtype == ir.DataType.FLOAT


def on_shape_path(value: ir.Value) -> bool:
    """Whether every reader of a float tensor reads it as sizes or counts (not an activation)."""
    uses = list(value.uses())
    if not uses:
        return False
    for use in uses:
        node, index = use[0], use[1]
        if node.op_type == "Cast":
            to = node.attributes.get("to")
            if to is None or to.as_int() not in INTEGER_TYPES:
                return False
        elif index not in SHAPE_SLOTS.get(node.op_type, ()):
            return False
    return True


def float_layers(graph: ir.Graph) -> list[ir.Node]:
    """The nodes a half engine runs in half: those that write a float32 activation."""
    return [node for node in graph if node.op_type != "Constant" and node.name
            and any(_is_float32(v) and not on_shape_path(v) for v in node.outputs)]


def activations(node: ir.Node) -> list[ir.Value]:
    return [v for v in node.outputs if _is_float32(v) and v.name and not on_shape_path(v)]


def name_layers(graph: ir.Graph) -> bool:
    """Give every nameless node a name (the engines' layer names come from them); whether any
    was nameless."""
    taken = {node.name for node in graph if node.name}
    named = False
    for index, node in enumerate(graph):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name, named = name, True
            taken.add(name)
    return named


def name_nodes_in_file(path: Path) -> None:
    """Name the nameless nodes of a model file in place (rewritten only when one was)."""
    from deploycc import io

    model = io.load(path, check=False).model
    if name_layers(model.graph):
        io.save(model, path)


def exposed(model: ir.Model, names: Iterable[str]) -> None:
    """Make the named float tensors graph outputs too (in place)."""
    graph = model.graph
    present = {v.name for v in graph.outputs}
    wanted = set(names) - present
    for node in graph:
        for value in node.outputs:
            if value.name in wanted:
                graph.outputs.append(value)
                wanted.discard(value.name)


def round_between_layers(model: ir.Model, kept: set[str], precision: Precision) -> None:
    """Round every layer's activation and every weight through half, in place, except those of
    the layers in `kept` (a weight read by a kept layer stays as it is)."""
    import onnx_ir as ir

    graph = model.graph
    half = half_type(precision)
    for initializer in list(graph.initializers.values()):
        if not _is_float32(initializer) or initializer.const_value is None:
            continue
        if any(node.name in kept for node, *_ in initializer.uses()):
            continue
        rounded = round_array(initializer.const_value.numpy(), precision, clamp=True)
        initializer.const_value = ir.tensor(rounded, name=initializer.name)
    for node in list(graph):
        if node.name in kept or node.op_type == "Constant":
            continue
        for value in activations(node):
            _round_value(graph, node, value, half)


def _round_value(graph: ir.Graph, node: ir.Node, value: ir.Value, half: ir.DataType) -> None:
    import onnx_ir as ir

    name = value.name or ""
    uses = list(value.uses())
    down = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", int(half))], name=f"{name}__to_half")
    down.outputs[0].name, down.outputs[0].type = f"{name}__half", ir.TensorType(half)
    up = ir.Node("", "Cast", [down.outputs[0]], attributes=[ir.AttrInt64("to", int(ir.DataType.FLOAT))],
                 name=f"{name}__to_float")
    rounded = up.outputs[0]
    rounded.type, rounded.shape = ir.TensorType(ir.DataType.FLOAT), value.shape
    value.name, rounded.name = name + ROUNDED_SUFFIX, name
    for use in uses:
        use[0].replace_input_with(use[1], rounded)
    for index, output in enumerate(graph.outputs):
        if output is value:
            graph.outputs[index] = rounded
    graph.insert_after(node, [down, up])


def run_model(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs on ORT CPU as written (graph optimizations off: ORT would take a Cast
    pair out)."""
    from deploycc import io
    from deploycc.verify.runner import RunError, run_ort

    with tempfile.TemporaryDirectory(prefix="deploycc-fp16-") as folder:
        path = Path(folder) / "model.onnx"
        io.save(model, path)
        try:
            return run_ort(path, feeds, optimize=False, threads=0)
        except Exception as error:  # ORT raises its own types: the analysis says why in one line
            lines = str(error).strip().splitlines()
            raise RunError(f"onnxruntime: {lines[0] if lines else type(error).__name__}") from None


def rounded_feeds(feeds: dict[str, np.ndarray], precision: Precision) -> dict[str, np.ndarray]:
    """The inputs as a half engine reads them: float32 inputs rounded through half."""
    return {name: round_array(array, precision, clamp=False) if array.dtype == np.float32 else array
            for name, array in feeds.items()}
