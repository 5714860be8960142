"""Which quantized layers hurt most: layer-wise SQNR between the fp32 model's activations and the
Q/DQ model's, on a few validation samples.

A layer's damage is the SQNR it loses: the SQNR of its output less that of the float tensors it
quantizes on the way in (its producers' outputs, before their Q/DQ). That is what keeping it in
float gives back: its input quantization (a range a few outliers stretch) and its weights'. Error
that arrives from upstream is not charged to it.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploycc.quantize.data import Sample

RANKING_SAMPLES = 4
# ORT's quantizer renames a tensor it quantizes that is also a graph output: the producer writes
# NAME_QuantizeLinear_Input and the graph output NAME comes out of the Q/DQ pair.
RENAMED = "_QuantizeLinear_Input"


def fp32_name(name: str) -> str:
    """The fp32 model's name for a float tensor of the Q/DQ model."""
    return name[:-len(RENAMED)] if name.endswith(RENAMED) else name


def with_outputs(model: Path, names: set[str] | None, out: Path) -> set[str]:
    """The model with the named float tensors (None: every float node output whose type is known)
    as extra graph outputs; the names it has."""
    import onnx_ir as ir

    from deploycc import io

    loaded = io.load(model, check=False)
    graph = loaded.model.graph
    present = {v.name or "" for v in graph.outputs}
    found = set()
    for node in graph:
        for value in node.outputs:
            if (value.name in names if names is not None else value.type is not None) and \
                    value.name not in present:
                if value.type is None:
                    value.type = ir.TensorType(ir.DataType.FLOAT)
                if value.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
                    continue
                graph.outputs.append(value)
                found.add(value.name or "")
    io.save(loaded.model, out)
    return found | (present & names if names is not None else present)


def run_outputs(model: Path, samples: Sequence[Sample], inputs: Sequence[str],
                names: set[str]) -> dict[str, list]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs() if o.name in names]
    gathered: dict[str, list] = {name: [] for name in wanted}
    for sample in samples:
        for name, array in zip(wanted, session.run(wanted, {n: sample[n] for n in inputs}), strict=True):
            gathered[name].append(np.asarray(array, dtype=np.float64))
    return gathered


def _sqnr(reference: list, actual: list) -> float:
    """SQNR in dB over the finite entries (a mask's -inf or float minimum matches itself or is
    left out: it is not a value quantization can keep)."""
    signal = noise = 0.0
    for a, b in zip(reference, actual, strict=True):
        usable = np.isfinite(a) & np.isfinite(b) & (np.abs(a) < 1e30)
        signal += float(np.sum(a[usable] ** 2))
        noise += float(np.sum((a[usable] - b[usable]) ** 2))
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal else -math.inf


def _dequantized_copy(value: Any) -> str | None:
    """The name of the dequantized copy of a tensor (its Q -> DQ pair's output), if it has one."""
    for consumer in value.consumers():
        if consumer.op_type == "QuantizeLinear" and consumer.outputs:
            for dequantize in consumer.outputs[0].consumers():
                if dequantize.op_type == "DequantizeLinear" and dequantize.outputs:
                    return dequantize.outputs[0].name
    return None


def rank_layers(fp32_model: Path, qdq_model: Path, candidates: Sequence[str], samples: Sequence[Sample],
                inputs: Sequence[str]) -> list[tuple[str, float]]:
    """(node name, dB lost) for the candidate nodes, the most damaging first.

    A node is charged what it loses computing (its output's SQNR below that of the float tensors
    it quantizes on the way in) and what the quantization of its own output loses: ONNX Runtime's
    quantizer puts that Q/DQ pair in for the producer, so keeping the producer in float is what
    takes it away."""
    from deploycc import io

    graph = io.load(qdq_model, check=False).model.graph
    wanted = set(candidates)
    # node -> (the float tensors it quantizes on the way in, its output, that output's dequantized copy)
    edges: dict[str, tuple[list[str], str, str | None]] = {}
    for node in graph:
        if node.name not in wanted or not node.outputs or node.outputs[0].name is None:
            continue
        sources = []
        for value in node.inputs:
            dequantize = value.producer() if value is not None else None
            if dequantize is None or dequantize.op_type != "DequantizeLinear" or dequantize.inputs[0] is None:
                continue
            quantize = dequantize.inputs[0].producer()
            original = quantize.inputs[0] if quantize is not None and quantize.op_type == "QuantizeLinear" \
                else None
            if original is not None:
                sources.append(original.name or "")
        output = node.outputs[0]
        edges[node.name or ""] = (sources, output.name or "", _dequantized_copy(output))
    names = {name for sources, out, copy in edges.values() for name in [*sources, out, copy] if name}
    used = list(samples[:RANKING_SAMPLES])
    with tempfile.TemporaryDirectory(prefix="deploycc-rank-") as folder:
        fp32_path, qdq_path = Path(folder) / "fp32.onnx", Path(folder) / "qdq.onnx"
        in_fp32 = with_outputs(fp32_model, {fp32_name(n) for n in names}, fp32_path)
        in_qdq = with_outputs(qdq_model, names, qdq_path)
        by_fp32_name = run_outputs(fp32_path, used, inputs, in_fp32)
        actual = run_outputs(qdq_path, used, inputs, in_qdq)
    for name in inputs:  # graph inputs: the same in both models
        by_fp32_name[name] = actual[name] = [np.asarray(sample[name], dtype=np.float64) for sample in used]

    def sqnr(qdq_name: str, fp32: str) -> float:
        if fp32 not in by_fp32_name or qdq_name not in actual:
            return math.inf
        return _sqnr(by_fp32_name[fp32], actual[qdq_name])

    ranked = []
    for node_name, (sources, out, copy) in edges.items():
        upstream = min((sqnr(s, fp32_name(s)) for s in sources), default=math.inf)
        own = sqnr(out, fp32_name(out))
        # a first layer (its inputs exact): what it loses below 60 dB, a practical ceiling
        lost = upstream - own if math.isfinite(upstream) else 60.0 - min(own, 60.0)
        if copy is not None and math.isfinite(own):
            lost += max(0.0, own - sqnr(copy, fp32_name(out)))
        elif copy is not None:
            lost += 60.0 - min(sqnr(copy, fp32_name(out)), 60.0)
        ranked.append((node_name, round(lost, 2)))
    return sorted(ranked, key=lambda item: -item[1])
