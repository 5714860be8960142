"""Half precision emulated on ONNX Runtime CPU: the model with every layer's float output rounded
through float16 (or bfloat16) and back, as an engine that stores activations in half does
between layers, and its weights rounded (clamped to the half range first, as TensorRT clamps
weights it converts). A layer kept in fp32 keeps its output and its weights as they are.

Arithmetic inside a layer stays fp32: TensorRT's half kernels accumulate convolutions and matrix
products in fp32, so what half changes is what is stored between layers, and that is what
overflows (T5's feed-forward outputs, an unnormalised variance).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import onnx_ir as ir

ROUNDED_SUFFIX = "__deploycc_wide"  # the unrounded tensor, renamed; the rounded one takes its name
RANGE_SUFFIX = "__deploycc_range_"  # an activation's largest or smallest value (HalfEmulation.ranges)
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
        return np.asarray(_half_to_float()[values.astype(np.float16).view(np.uint16)])


@functools.cache
def _half_to_float() -> np.ndarray:
    """Every float16 bit pattern's float32 value. NumPy's float16 -> float32 conversion takes
    a slow path (88 M weights of a ConvNeXt-B: 2.1 s); reading this table gives the same bits in
    0.17 s."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


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


def _round_value(graph: ir.Graph, node: ir.Node, value: ir.Value, half: ir.DataType,
                 keep: ir.Value | None = None) -> None:
    """Cast the value to half and back after its node; its readers (and the graph's outputs) read
    the rounded value, which takes its name. With `keep`, a switch: Where(keep, wide, rounded)."""
    import onnx_ir as ir

    name = value.name or ""
    uses = list(value.uses())
    down = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", int(half))], name=f"{name}__to_half")
    down.outputs[0].name, down.outputs[0].type = f"{name}__half", ir.TensorType(half)
    up = ir.Node("", "Cast", [down.outputs[0]], attributes=[ir.AttrInt64("to", int(ir.DataType.FLOAT))],
                 name=f"{name}__to_float")
    added = [down, up]
    rounded = up.outputs[0]
    if keep is not None:
        up.outputs[0].name, up.outputs[0].type = f"{name}__rounded", ir.TensorType(ir.DataType.FLOAT)
        select = ir.Node("", "Where", [keep, value, up.outputs[0]], name=f"{name}__select")
        added.append(select)
        rounded = select.outputs[0]
    rounded.type, rounded.shape = ir.TensorType(ir.DataType.FLOAT), value.shape
    value.name, rounded.name = name + ROUNDED_SUFFIX, name
    for use in uses:
        use[0].replace_input_with(use[1], rounded)
    for index, output in enumerate(graph.outputs):
        if output is value:
            graph.outputs[index] = rounded
    graph.insert_after(node, added)


# Where (a layer's switch) came in opset 9; below it every emulation is a model of its own
SWITCHED_FROM_OPSET = 9


def add_range_reducers(model: ir.Model) -> None:
    """A ReduceMax and a ReduceMin right after each layer's activation, their scalars graph
    outputs after the model's own (in place): each activation's range measured inside the run,
    so ORT frees the activation once its readers are done. Fetching every activation instead held
    them all to the end and copied them out (HaloNet: 2 GB, 10.7 s against 2.6 s)."""
    import onnx_ir as ir

    graph = model.graph
    for node in float_layers(graph):
        added = []
        for value in activations(node):
            for op in ("ReduceMax", "ReduceMin"):
                reduced = ir.Node("", op, [value], attributes=[ir.AttrInt64("keepdims", 0)],
                                  name=f"{value.name}__{op}")
                out = reduced.outputs[0]
                out.name, out.shape = f"{value.name}{RANGE_SUFFIX}{op}", ir.Shape([])
                out.type = ir.TensorType(ir.DataType.FLOAT)
                graph.outputs.append(out)
                added.append(reduced)
        if added:
            graph.insert_after(node, added)


def without_range_reducers(model: ir.Model, written: int) -> ir.Model:
    """The model as it was before add_range_reducers (in place): its own `written` outputs."""
    graph = model.graph
    del graph.outputs[written:]
    graph.remove([node for node in graph if any(RANGE_SUFFIX in (v.name or "") for v in node.outputs)])
    return model


class HalfEmulation:
    """The runs of an analysis. The reference and the all-half run are models of their own, as
    written or rounded whole. The search's runs (each keeps other layers in fp32) share one ORT
    session: each layer's rounding is switched by a boolean input (Where(keep, wide, rounded)),
    and each weight reads its rounded copy the same way, so another set of kept layers is another
    feed, not another model built, saved, loaded and compiled. That had been 70% of a search's
    time (CoaT, 1,900 layers, 15 runs: 30 s, now 10). Where costs a pass over each activation:
    ConvMixer, few layers with large activations, takes as long as before (13 runs, 25 s).
    The rounding is that of the model rebuilt per run: the same Casts, the same rounded weights.
    A weight read through Where is not prepacked by ORT's convolution, whose other summation order
    moves an error by about 1e-3 of itself (CoaT: 0.01866 against 0.01853); the layers kept, the
    flagged tensors and the runs were the same on the ten models compared. Below opset 9 (no
    Where) every run is rebuilt.

    `prepared`: the model file with its range reducers (add_range_reducers) after its own
    `written` outputs: the fp32 run that measures the ranges loads it as it is. `model`: that
    model in memory, which the first run rebuilt (the all-half one) rounds in place rather than
    read the file again; the caller reads it no more once it has run."""

    def __init__(self, prepared: Path, precision: Precision, written: int,
                 model: ir.Model | None = None) -> None:
        from deploycc.verify.exact import has_integer_ops

        self.prepared, self.precision, self.written = prepared, precision, written
        self.model = model
        self.integer_ops = model is None or has_integer_ops(model)  # else no session searches its file
        self.switched: Any = None  # the search's session, made on its first run
        self.unswitched = False  # below opset 9: every run rebuilt
        self.layer_flags: dict[str, str] = {}
        self.weight_readers: dict[str, list[str]] = {}

    def run(self, feeds: dict[str, np.ndarray], kept: set[str] | None, *,
            every_activation: bool) -> dict[str, np.ndarray]:
        """The outputs (and with `every_activation` each layer's activation) with every layer but
        those in `kept` rounded through half; `kept` None: nothing rounded, the fp32 reference.
        `feeds` as given (the caller rounds them for an emulation)."""
        if kept is not None and every_activation and self._switch():
            flags = {flag: np.array(layer in kept) for layer, flag in self.layer_flags.items()}
            flags.update({flag: np.array(any(reader in kept for reader in readers))
                          for flag, readers in self.weight_readers.items()})
            return _ran(self.switched, {**feeds, **flags})
        model = self.prepared_model(every_activation)
        if kept is not None:
            round_between_layers(model, kept, self.precision)
        return _ran(_as_written(model, self.prepared.parent, self.integer_ops), feeds)

    def ranges(self, feeds: dict[str, np.ndarray]
               ) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
        """The fp32 model's own outputs, and each layer's activation as its largest and smallest
        value (the prepared file as it is)."""
        found = _ran(_as_written(self.prepared, integer_ops=self.integer_ops), feeds)
        own = {name: array for name, array in found.items() if RANGE_SUFFIX not in name}
        reduced: dict[str, dict[str, float]] = {}
        for name, array in found.items():
            if RANGE_SUFFIX in name:
                activation, op = name.split(RANGE_SUFFIX)
                reduced.setdefault(activation, {})[op] = float(array)
        return own, {name: (pair["ReduceMax"], pair["ReduceMin"]) for name, pair in reduced.items()}

    def activations_named(self, feeds: dict[str, np.ndarray], names: Iterable[str]) -> dict[str, np.ndarray]:
        """The fp32 model's own outputs and the named activations (a few, not all)."""
        model = self.prepared_model(False)
        exposed(model, names)
        return _ran(_as_written(model, self.prepared.parent, self.integer_ops), feeds)

    def prepared_model(self, every_activation: bool) -> ir.Model:
        """The prepared model without its range reducers, every activation a graph output with
        `every_activation`: the one in memory the first time, read from the file after."""
        from deploycc import io

        model = self.model if self.model is not None else io.load(self.prepared, check=False).model
        self.model = None
        without_range_reducers(model, self.written)
        if every_activation:
            exposed(model, [v.name or "" for node in float_layers(model.graph) for v in activations(node)])
        return model

    def _switch(self) -> bool:
        """The search's session, every activation a graph output (made once; False below opset
        9)."""
        if self.switched is not None or self.unswitched:
            return not self.unswitched
        model = self.prepared_model(True)
        if model.opset_imports.get("", 1) < SWITCHED_FROM_OPSET:
            self.unswitched = True
            return False
        self.layer_flags, self.weight_readers = _switch_rounding(model, self.precision)
        self.switched = _as_written(model, self.prepared.parent, self.integer_ops)
        return True


def _ran(loaded: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from deploycc.budget import TooLarge
    from deploycc.verify.runner import run_session

    try:
        return run_session(loaded, feeds)
    except TooLarge:
        raise
    except Exception as error:  # ORT raises its own types: the analysis says why in one line
        raise _run_error(error) from None


def _as_written(model: ir.Model | Path, folder: Path | None = None, integer_ops: bool = True) -> Any:
    """An ORT CPU session of the model (or model file) as written (graph optimizations off: ORT
    would take a Cast pair out). Through a file: ORT took serialized bytes slower (ConvNeXt-B:
    11 s against 7); written in `folder` (the analysis' scratch folder, in memory where it fits),
    and gone once the session has read it. `integer_ops` False: the model has none that
    verify.exact rewrites, and its file is not searched for one."""
    from deploycc import io
    from deploycc.verify.runner import session

    if isinstance(model, Path):
        try:
            return session(model, optimize=False, threads=0, integer_ops=integer_ops)
        except Exception as error:
            raise _run_error(error) from None
    path = Path(tempfile.mkdtemp(prefix="run-", dir=folder)) / "model.onnx"
    try:
        io.save(model, path)
        return _as_written(path, integer_ops=integer_ops)
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def _switch_rounding(model: ir.Model, precision: Precision) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Round every weight and every layer's activation behind a switch (in place): returns the
    switch input of each layer, and each weight switch's readers (a weight stays fp32 when any
    of them is kept, as round_between_layers keeps it)."""
    import onnx_ir as ir

    graph = model.graph
    half = half_type(precision)
    layer_flags: dict[str, str] = {}
    weight_readers: dict[str, list[str]] = {}
    selects: list[ir.Node] = []
    for initializer in list(graph.initializers.values()):
        if not _is_float32(initializer) or initializer.const_value is None:
            continue
        wide = initializer.const_value.numpy()
        rounded = round_array(wide, precision, clamp=True)
        if np.array_equal(rounded, wide):  # zeros, small integers: rounding changes nothing
            continue
        name = initializer.name or ""
        half_copy = ir.Value(name=f"{name}__half", shape=initializer.shape, type=initializer.type,
                             const_value=ir.tensor(rounded, name=f"{name}__half"))
        graph.register_initializer(half_copy)
        flag = _flag(graph, f"keep_weight::{name}")
        uses = list(initializer.uses())
        weight_readers[flag.name or ""] = [node.name or "" for node, *_ in uses]
        select = ir.Node("", "Where", [flag, initializer, half_copy], name=f"{name}__select")
        select.outputs[0].name, select.outputs[0].type = f"{name}__selected", initializer.type
        select.outputs[0].shape = initializer.shape
        for node, index in uses:
            node.replace_input_with(index, select.outputs[0])
        selects.append(select)
    layers = list(graph)
    if selects:  # they read only initializers and inputs: first, in topological order
        graph.insert_before(layers[0], selects) if layers else graph.extend(selects)
    for node in layers:
        if node.op_type == "Constant":
            continue
        values = activations(node)
        if not values:
            continue
        flag = _flag(graph, f"keep::{node.name}")
        layer_flags[node.name or ""] = flag.name or ""
        for value in values:
            _round_value(graph, node, value, half, keep=flag)
    return layer_flags, weight_readers


def _flag(graph: ir.Graph, name: str) -> ir.Value:
    import onnx_ir as ir

    flag = ir.Value(name=name, shape=ir.Shape([]), type=ir.TensorType(ir.DataType.BOOL))
    graph.inputs.append(flag)
    return flag


def _run_error(error: Exception) -> Exception:
    from deploycc.verify.runner import RunError

    lines = str(error).strip().splitlines()
    return RunError(f"onnxruntime: {lines[0] if lines else type(error).__name__}")


def rounded_feeds(feeds: dict[str, np.ndarray], precision: Precision) -> dict[str, np.ndarray]:
    """The inputs as a half engine reads them: float32 inputs rounded through half."""
    return {name: round_array(array, precision, clamp=False) if array.dtype == np.float32 else array
            for name, array in feeds.items()}
