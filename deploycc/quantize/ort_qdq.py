"""Q/DQ models with ONNX Runtime's static quantizer (`quantize_static`, QDQ format), in the form
each backend runs fast:

  x86 (ort-cpu)  unsigned 8-bit activations, signed per-channel weights: ORT's U8S8 kernels; with
                 reduce_range (7-bit weights) where the CPU has no VNNI, whose VPMADDUBSW path
                 saturates 8-bit products otherwise (ORT's quantization guide)
  tensorrt       signed symmetric activations and weights (zero point 0 everywhere, the only Q/DQ
                 TensorRT takes), per-channel weights on Conv/ConvTranspose/Gemm/MatMul, bias left
                 in float (TensorRT fuses it), Q/DQ only on the ops TensorRT runs in INT8

Calibration runs once per model (min/max of every activation on the calibration samples); the
accuracy guard then quantizes again with nodes excluded, from the same ranges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploycc.backends.base import QdqLayout
from deploycc.quantize.data import Sample

# ops whose inputs TensorRT quantizes (its "Q/DQ placement" recommendations): the rest run in
# float between them, or are fused by its optimizer
TRANSFORMER_OPS = ("MatMul",)
PER_CHANNEL_OPSET = 13
WIDE_RANGE = 1e6  # a float tensor reaching this cannot share an 8-bit scale with ordinary values
RANGE_SAMPLES = 8
TENSORRT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
                "Add", "Concat")


@dataclass(frozen=True)
class QdqForm:
    name: str
    unsigned_activations: bool
    symmetric_activations: bool
    reduce_range: bool
    quantize_bias: bool
    op_types: tuple[str, ...] | None = None  # None: every op ORT knows how to quantize
    # a Q/DQ pair of its own for each consumer, MatMul weights per column: TensorRT's parser
    # fuses each pair into the op it feeds
    dedicated_pairs: bool = False

    def describe(self) -> str:
        activations = "u8" if self.unsigned_activations else "s8"
        symmetric = " symmetric" if self.symmetric_activations else ""
        reduced = ", reduce_range (7-bit weights: no VNNI)" if self.reduce_range else ""
        only = f", only {'/'.join(self.op_types)} quantized" if self.op_types == TRANSFORMER_OPS else ""
        return f"QDQ, {activations}{symmetric} activations, s8 symmetric per-channel weights{reduced}{only}"

    def for_transformer(self) -> QdqForm:
        """Attention models: only the MatMuls' inputs are quantized. The residual stream carries
        a few outlier channels (BERT's reach tens where the rest are near one); a per-tensor scale
        on the residual Adds, or on MatMul+Add fused into Gemm with its output, rounds the other
        channels away (all-MiniLM-L6-v2: cosine 0.85 with the Adds quantized, 0.996 without)."""
        return dataclasses.replace(self, op_types=TRANSFORMER_OPS)


def _spread(arrays: Sequence[np.ndarray]) -> float:
    """max |x| over the 99.9th percentile of |x|: how much of an 8-bit per-tensor scale a few
    outliers take from the ordinary values (BERT's FFN inputs: 8 to 12)."""
    magnitudes = np.abs(np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays]))
    if not magnitudes.size:
        return 1.0
    ordinary = float(np.percentile(magnitudes, 99.9))
    return float(magnitudes.max() / ordinary) if ordinary > 0 else 1.0


def has_attention(model: Path) -> bool:
    """Softmax and MatMul in one graph: attention (NNCF's test for its transformer scheme too)."""
    from deploycc import io

    ops = {node.op_type for node in io.load(model, check=False).model.graph}
    return {"Softmax", "MatMul"} <= ops


def cpu_has_vnni() -> bool:
    """AVX512-VNNI or AVX-VNNI, as /proc/cpuinfo lists them (False where it cannot be read)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def x86_form() -> QdqForm:
    return QdqForm("x86", unsigned_activations=True, symmetric_activations=False,
                   reduce_range=not cpu_has_vnni(), quantize_bias=True)


def tensorrt_form() -> QdqForm:
    return QdqForm("tensorrt", unsigned_activations=False, symmetric_activations=True, reduce_range=False,
                   quantize_bias=False, op_types=TENSORRT_OPS, dedicated_pairs=True)


def form_for(layout: QdqLayout) -> QdqForm:
    """The form a backend's int8 recipe names (`Int8Recipe.qdq_layout`)."""
    return {QdqLayout.X86: x86_form, QdqLayout.TENSORRT: tensorrt_form}[layout]()


class SampleReader:
    """ONNX Runtime's CalibrationDataReader protocol over the samples (model inputs only)."""

    def __init__(self, samples: Sequence[Sample], inputs: Sequence[str]) -> None:
        self.samples, self.inputs = samples, list(inputs)
        self._iterator: Iterator[Sample] = iter(())
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        sample = next(self._iterator, None)
        return None if sample is None else {name: sample[name] for name in self.inputs}

    def rewind(self) -> None:
        self._iterator = iter(self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._iterator = iter(self.samples[start_index:end_index])


@dataclass
class QdqQuantizer:
    """Quantizes one fp32 model in one form, calibrating once."""

    model: Path
    form: QdqForm
    samples: Sequence[Sample]
    inputs: Sequence[str]
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="deploycc-qdq-")))
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.spread: dict[str, float] = {}
        self.transformer = has_attention(self.model)
        if self.transformer:
            self.form = self.form.for_transformer()
        self.prepared = self._preprocess()
        self._cache = self.work / "ranges.json"
        self._caches = "calibration_cache_path" in inspect.signature(_quantize_static()).parameters
        self.wide = self._wide_range_nodes()
        if self.wide:
            self.notes.append(f"{len(self.wide)} node(s) kept in float: their inputs reach "
                              f"{WIDE_RANGE:.0e} or beyond (an attention mask filled with the float "
                              "minimum), which no 8-bit scale holds beside ordinary values: "
                              f"{', '.join(self.wide[:6])}" + (" ..." if len(self.wide) > 6 else ""))

    def _wide_range_nodes(self) -> list[str]:
        """The nodes that read a float tensor reaching WIDE_RANGE on the calibration samples: every
        int8 step of that tensor would be wider than its ordinary values (BERT's additive mask
        holds -3.4e38; quantizing the Add that applies it zeroes the attention scores)."""
        from deploycc import io
        from deploycc.quantize.sensitivity import run_outputs, with_outputs

        probe = self.work / "ranges-probe.onnx"
        try:
            names = with_outputs(self.prepared, None, probe) | set(self.inputs)
            values = run_outputs(probe, self.samples[:RANGE_SAMPLES], self.inputs, names)
        except Exception as error:  # a model ORT cannot run with extra outputs: no such check
            self.notes.append(f"no range check ({str(error).splitlines()[0][:100] if str(error) else error})")
            return []
        for name in self.inputs:
            if np.asarray(self.samples[0][name]).dtype.kind == "f":
                values[name] = [np.asarray(s[name], dtype=np.float64) for s in self.samples[:RANGE_SAMPLES]]
        wide = {name for name, arrays in values.items()
                if any(a.size and not (np.isfinite(a).all() and np.abs(a).max() < WIDE_RANGE)
                       for a in arrays)}
        graph = io.load(self.prepared, check=False).model.graph
        for node in graph:  # how far each node's widest input reaches past its ordinary values
            spreads = [_spread(values[v.name]) for v in node.inputs
                       if v is not None and v.name in values and v.name not in wide]
            if node.name and spreads:
                self.spread[node.name] = max(spreads)
        return sorted({node.name for node in graph for value in node.inputs
                       if node.name and value is not None and value.name in wide})

    def _preprocess(self) -> Path:
        """ORT's pre-processing (symbolic shape inference, its basic graph optimizations), which the
        quantizer needs to see every tensor's type; a model it cannot process goes in as it is."""
        from onnxruntime.quantization import quant_pre_process

        out = self.work / "preprocessed.onnx"
        source = self._per_channel_opset()
        try:
            # attention models: no MatMul+Add -> Gemm fusion, whose output would be quantized
            quant_pre_process(str(source), str(out), skip_symbolic_shape=False,
                              skip_optimization=self.transformer)
        except Exception as error:
            first = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
            self.notes.append(f"ORT's quantization pre-processing failed ({first}); quantized the model as "
                              "legalized")
            return source
        return out

    def _per_channel_opset(self) -> Path:
        """The model at opset 13 or newer: per-channel DequantizeLinear (its axis) arrived in 13,
        and ORT's quantizer writes it into an older model regardless, which no runtime loads
        (paddle2onnx's opset-11 PP-OCR detector)."""
        from deploycc import io
        from deploycc.passes.opset import convert_opset

        loaded = io.load(self.model, check=False)
        opset = loaded.model.opset_imports.get("", loaded.model.opset_imports.get("ai.onnx", 13))
        if opset >= PER_CHANNEL_OPSET:
            return self.model
        converted = self.work / f"opset{PER_CHANNEL_OPSET}.onnx"
        io.save(convert_opset(loaded.model, PER_CHANNEL_OPSET), converted)
        self.notes.append(f"converted from opset {opset} to {PER_CHANNEL_OPSET} for per-channel weights")
        return converted

    def quantize(self, output: Path, exclude: Sequence[str] = ()) -> Path:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType

        extra: dict[str, Any] = {
            "ActivationSymmetric": self.form.symmetric_activations, "WeightSymmetric": True,
            "QuantizeBias": self.form.quantize_bias,
        }
        if self.form.dedicated_pairs:
            extra.update(DedicatedQDQPair=True, QDQOpTypePerChannelSupportToAxis={"MatMul": 1})
        kwargs: dict[str, Any] = {"calibration_cache_path": self._cache} if self._caches else {}
        with quiet():  # the calibrator prints its progress
            _quantize_static()(
                str(self.prepared), str(output), SampleReader(self.samples, self.inputs),
                quant_format=QuantFormat.QDQ, op_types_to_quantize=list(self.form.op_types or []) or None,
                per_channel=True, reduce_range=self.form.reduce_range,
                activation_type=QuantType.QUInt8 if self.form.unsigned_activations else QuantType.QInt8,
                weight_type=QuantType.QInt8, nodes_to_exclude=sorted({*exclude, *self.wide}),
                calibrate_method=CalibrationMethod.MinMax, extra_options=extra, **kwargs)
        return output


_SINK: Any = None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The quantizers' own progress prints and bars kept off deploycc's output (stdout may be
    the JSON a caller parses). The sink stays open: a logging handler made in here keeps it."""
    global _SINK
    if _SINK is None:
        _SINK = open(os.devnull, "w")
    # a logger whose handler holds the real stderr (ORT's MatMulNBits quantizer made its own at
    # import, and logged each of a decoder's 169 weights past the redirect): its info and warnings off
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(_SINK), contextlib.redirect_stderr(_SINK):
            yield
    finally:
        logging.disable(disabled)


def _quantize_static() -> Any:
    from onnxruntime.quantization import quantize_static

    return quantize_static


def quantized_nodes(qdq_model: Path, op_types: Sequence[str] | None = None) -> list[str]:
    """The nodes that compute from dequantized activations, of the quantized op types: what the
    guard may keep in float."""
    from deploycc import io

    graph = io.load(qdq_model, check=False).model.graph
    names = []
    for node in graph:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") or not node.name or \
                (op_types and node.op_type not in op_types):
            continue
        if any(value is not None and _dequantized(value) and not _is_weight(value) for value in node.inputs):
            names.append(node.name)
    return names


def _dequantized(value: Any) -> bool:
    producer = value.producer() if value is not None else None
    return producer is not None and producer.op_type == "DequantizeLinear"


def _is_weight(value: Any) -> bool:
    """A DequantizeLinear output whose quantized input is a constant (a weight, not an activation)."""
    producer = value.producer()
    source = producer.inputs[0] if producer is not None and producer.inputs else None
    if source is None:
        return False
    maker = source.producer()
    return source.const_value is not None or (maker is not None and maker.op_type == "Constant")


QUANTIZED_OPERATORS = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearAveragePool",
                       "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
                       "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QGemm")


def _output_channel_axis(consumer: Any, rank: int) -> int | None:
    """The axis of a weight that holds the consumer's output channels."""
    if consumer.op_type == "Conv":
        return 0
    if consumer.op_type == "ConvTranspose":
        return 1
    if consumer.op_type == "Gemm":
        trans_b = next((a.i for a in consumer.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if consumer.op_type == "MatMul":
        return rank - 1
    return None


def tensorrt_form_problems(model: Any, opset_range: tuple[int, int]) -> list[str]:
    """What TensorRT's ONNX parser would refuse in a Q/DQ model (an onnx.ModelProto): zero points
    other than int8 zeros (it quantizes symmetrically, signed), per-channel weight scales across
    another axis than the consumer's output channels, QOperator/Integer ops, an opset outside the
    target's range. Empty when it is in TensorRT's form."""
    from onnx import numpy_helper

    problems = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if not opset_range[0] <= opset <= opset_range[1]:
        problems.append(f"opset {opset} outside the target's {opset_range[0]}-{opset_range[1]}")
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in model.graph.node:
        if node.op_type in QUANTIZED_OPERATORS or node.domain not in ("", "ai.onnx"):
            problems.append(f"{node.name or node.output[0]}: {node.op_type} is not Q/DQ")
            continue
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        where = node.name or node.output[0]
        zero = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if zero is None:
            problems.append(f"{where}: no zero point (uint8 by default); TensorRT takes int8 zeros")
        elif zero.dtype != np.int8 or np.any(zero != 0):
            problems.append(f"{where}: zero point {zero.dtype} {np.unique(zero)[:3].tolist()}, "
                            "TensorRT takes int8 zeros only")
        scale = constants.get(node.input[1])
        weight = constants.get(node.input[0])
        if node.op_type != "DequantizeLinear" or scale is None or scale.size <= 1 or weight is None:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        for consumer in consumers.get(node.output[0], []):
            if list(consumer.input).index(node.output[0]) != 1:  # a bias, not the weight
                continue
            wanted = _output_channel_axis(consumer, weight.ndim)
            if wanted is not None and (axis % weight.ndim != wanted or scale.size != weight.shape[wanted]):
                problems.append(f"{where}: per-channel scales on axis {axis} of a {consumer.op_type} weight "
                                f"{list(weight.shape)}; its output channels are axis {wanted}")
    return problems
