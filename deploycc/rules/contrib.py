"""ONNX Runtime contrib ops (com.microsoft) left by exporters and ORT's transformer optimizer.

Targets other than ORT do not know them; each has an exact standard-ONNX form:
- FusedConv(X, W, B, Z) = activation(Conv(X, W, B) + Z)
- Gelu(x) = 0.5 x (1 + erf(x / sqrt 2)); BiasGelu(a, b) = Gelu(a + b)
- FastGelu(x, bias) = tanh-approximated Gelu of x + bias
- QuickGelu(x) = x * sigmoid(alpha x), alpha = 1.702 by default
- SkipLayerNormalization(x, skip, gamma, beta, bias): s = x + skip + bias, LayerNorm(s) over the
  last axis; its fourth output is s itself
- SkipSimplifiedLayerNormalization / SimplifiedLayerNormalization: the same with RMS norm
- EmbedLayerNormalization: the embedding lookups (word, position, segment) summed, LayerNorm, and
  the mask's token count per row
- Attention (without past state): one projection split into q, k, v, scaled dot-product attention
  per head with ORT's additive mask
- DynamicQuantizeLSTM: the LSTM on its dequantized weights (ORT's quantize_dynamic writes it)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deploycc.rules.activations import gelu_erf, gelu_tanh, hard_sigmoid
from deploycc.rules.base import Builder, Decline, Rule, Site
from deploycc.rules.catalog import register
from deploycc.rules.normalization import normalize, rms_normalize

if TYPE_CHECKING:
    import onnx_ir as ir

MS = "com.microsoft"
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class _Contrib(Rule):
    family = "contrib"
    domain = MS


def _activation(site: Site, b: Builder, y: ir.Value) -> ir.Value:
    kind = site.attr("activation", "")
    params = site.attr("activation_params", []) or []
    dtype = site.dtype(0)
    if kind in ("", "Identity"):
        return y
    if kind in ("Relu", "Tanh", "Sigmoid"):
        return b.op(kind, y)
    if kind == "LeakyRelu":
        return b.op("LeakyRelu", y, alpha=params[0] if params else 0.01)
    if kind == "Clip" and len(params) == 2:
        return b.op("Min", b.op("Max", y, b.scalar_like(params[0], dtype)), b.scalar_like(params[1], dtype))
    if kind == "HardSigmoid" and len(params) == 2:
        return hard_sigmoid(b, y, params[0], params[1], dtype)
    raise Decline(f"activation {kind!r} with parameters {params} is not rewritten")


@register
class FusedConvRule(_Contrib):
    """com.microsoft FusedConv: activation(Conv(X, W, B) + Z)."""

    name = "ms-fused-conv"
    op_type = "FusedConv"

    def check(self, site: Site) -> str | None:
        kind = site.attr("activation", "")
        if kind not in ("", "Identity", "Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid"):
            return f"activation {kind!r} is not rewritten"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        conv_attributes = {k: site.attr(k) for k in CONV_ATTRIBUTES if site.attr(k) is not None}
        y = b.op("Conv", *site.inputs[:3], **conv_attributes)
        if site.has_input(3):
            y = b.op("Add", y, site.inputs[3])
        return [_activation(site, b, y)]


@register
class MsGeluRule(_Contrib):
    """com.microsoft Gelu: 0.5 x (1 + erf(x / sqrt 2))."""

    name = "ms-gelu"
    op_type = "Gelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [gelu_erf(b, site.inputs[0], site.dtype(0))]  # type: ignore[arg-type]


@register
class BiasGeluRule(_Contrib):
    """com.microsoft BiasGelu: Gelu(a + b), erf form."""

    name = "ms-bias-gelu"
    op_type = "BiasGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [gelu_erf(b, b.op("Add", site.inputs[0], site.inputs[1]), site.dtype(0))]


@register
class FastGeluRule(_Contrib):
    """com.microsoft FastGelu: tanh-approximated Gelu of x (+ bias)."""

    name = "ms-fast-gelu"
    op_type = "FastGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        if site.has_input(1):
            x = b.op("Add", x, site.inputs[1])
        return [gelu_tanh(b, x, site.dtype(0))]  # type: ignore[arg-type]


@register
class QuickGeluRule(_Contrib):
    """com.microsoft QuickGelu: x * sigmoid(alpha x), alpha = 1.702 by default."""

    name = "ms-quick-gelu"
    op_type = "QuickGelu"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        scaled = b.op("Mul", x, b.scalar_like(site.attr("alpha", 1.702), site.dtype(0)))
        return [b.op("Mul", x, b.op("Sigmoid", scaled))]


def _skip_sum(site: Site, b: Builder, bias_index: int) -> ir.Value:
    total = b.op("Add", site.inputs[0], site.inputs[1])
    if site.has_input(bias_index):
        total = b.op("Add", total, site.inputs[bias_index])
    return total


def _only_first_outputs(site: Site, supported: Sequence[int]) -> str | None:
    used = [i for i in range(1, site.output_count) if site.output_used(i) and i not in supported]
    return f"output {used[0]} (statistics) is used and not rewritten" if used else None


@register
class SkipLayerNormalizationRule(_Contrib):
    """com.microsoft SkipLayerNormalization: s = x + skip (+ bias); LayerNorm(s) * gamma + beta; s."""

    name = "ms-skip-layer-normalization"
    op_type = "SkipLayerNormalization"

    def check(self, site: Site) -> str | None:
        return _only_first_outputs(site, [3])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _skip_sum(site, b, 4)
        normalized, mean, inv_std = normalize(b, total, [-1], site.attr("epsilon", 1e-12), site.dtype(0))
        y = b.op("Mul", normalized, site.inputs[2])
        if site.has_input(3):
            y = b.op("Add", y, site.inputs[3])
        return [y, mean, inv_std, total][:site.output_count]


@register
class SkipSimplifiedLayerNormalizationRule(_Contrib):
    """com.microsoft SkipSimplifiedLayerNormalization: s = x + skip (+ bias); RMSNorm(s) * gamma; s."""

    name = "ms-skip-simplified-layer-normalization"
    op_type = "SkipSimplifiedLayerNormalization"

    def check(self, site: Site) -> str | None:
        return _only_first_outputs(site, [3])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _skip_sum(site, b, 3)
        normalized, inv_rms = rms_normalize(b, total, [-1], site.attr("epsilon", 1e-12), site.dtype(0))
        y = b.op("Mul", normalized, site.inputs[2])
        return [y, inv_rms, inv_rms, total][:site.output_count]


@register
class SimplifiedLayerNormalizationRule(Rule):
    """ORT's SimplifiedLayerNormalization (default domain, contrib): RMSNorm over the last axes."""

    name = "ms-simplified-layer-normalization"
    family = "contrib"
    op_type = "SimplifiedLayerNormalization"

    def check(self, site: Site) -> str | None:
        if site.attr("axis", -1) != -1:
            return "only axis=-1 is rewritten"
        return _only_first_outputs(site, [])

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        normalized, _ = rms_normalize(b, site.inputs[0], [-1], site.attr("epsilon", 1e-5), site.dtype(0))  # type: ignore[arg-type]
        return [b.op("Mul", normalized, site.inputs[1])]


@register
class EmbedLayerNormalizationRule(_Contrib):
    """com.microsoft EmbedLayerNormalization: s = W[ids] + P[positions] (+ S[segments]);
    LayerNorm(s) * gamma + beta; the count of mask == 1 per row (int32, zeros without a mask); s.
    ORT's transformer optimizer fuses BERT's embeddings into it. Positions are position_ids (per row,
    or one row for all) or 0..seq-1."""

    name = "ms-embed-layer-normalization"
    op_type = "EmbedLayerNormalization"

    def check(self, site: Site) -> str | None:
        if site.has_input(1) != site.has_input(4):
            return "segment_ids without segment_embedding (or the reverse)"
        return None

    def proof_values(self, site: Site, seed: int) -> dict[int, Any]:
        """Indices within each table (random integers would fall outside them)."""
        import numpy as np

        rng = np.random.default_rng(seed)
        values: dict[int, Any] = {}
        for index, table in ((0, 2), (1, 4), (8, 3)):
            shape, rows = site.shape(index), (site.shape(table) or [None])[0]
            if not site.has_input(index) or site.constant(index) is not None or shape is None \
                    or any(d is None for d in shape) or rows is None:
                continue
            dims = [int(d) for d in shape if d is not None]
            values[index] = rng.integers(0, rows, size=dims).astype(np.int32)
        if site.has_input(7) and site.constant(7) is None and site.shape(7) is not None:
            dims = [int(d or 1) for d in site.shape(7) or []]
            values[7] = rng.integers(0, 2, size=dims).astype(np.int32)
        return values

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import numpy as np

        ids = site.inputs[0]
        assert ids is not None
        total = b.op("Gather", site.inputs[2], ids)
        if site.has_input(8):
            positions = b.op("Gather", site.inputs[3], site.inputs[8])
        else:
            length = b.op("Gather", b.op("Shape", ids), b.const(np.array(1, dtype=np.int64)))
            steps = b.op("Range", b.const(np.array(0, dtype=np.int64)), length,
                         b.const(np.array(1, dtype=np.int64)))
            positions = b.op("Gather", site.inputs[3], steps)
        total = b.op("Add", total, positions)
        if site.has_input(1):
            total = b.op("Add", total, b.op("Gather", site.inputs[4], site.inputs[1]))
        normalized, _, _ = normalize(b, total, [-1], site.attr("epsilon", 1e-12), site.dtype(2))
        y = b.op("Add", b.op("Mul", normalized, site.inputs[5]), site.inputs[6])
        outputs = [y]
        if site.output_count > 1:
            outputs.append(_mask_index(site, b, ids))
        if site.output_count > 2:
            outputs.append(total)
        return outputs


def _mask_index(site: Site, b: Builder, ids: ir.Value) -> ir.Value:
    """The number of mask entries equal to 1 in each row, as int32; zeros without a mask. Counted
    in float (TensorRT reduces floats), exact up to 2^24 tokens."""
    import numpy as np

    float32, int32 = 1, 6  # onnx.TensorProto.FLOAT, INT32
    if site.has_input(7):
        ones = b.op("Cast", b.op("Equal", site.inputs[7], b.const(np.array(1, dtype=np.int32))), to=float32)
        return b.op("Cast", b.reduce("ReduceSum", ones, [1], keepdims=0), to=int32)
    first = b.op("Gather", b.op("Cast", ids, to=float32), b.const(np.array(0, dtype=np.int64)), axis=1)
    return b.op("Cast", b.op("Mul", first, b.const(np.array(0.0, dtype=np.float32))), to=int32)


@register
class MsAttentionRule(_Contrib):
    """com.microsoft Attention without past state: q, k, v = split(x W + b); softmax(q k^T * scale +
    mask) v per head. ORT's transformer optimizer fuses BERT's self-attention into it. The mask adds
    mask_filter_value (-10000) where a key is hidden: from key lengths [batch] (right padding), a
    0/1 mask [batch, keys] or [batch, queries, keys]."""

    name = "ms-attention"
    op_type = "Attention"

    def check(self, site: Site) -> str | None:
        if any(site.has_input(i) for i in (4, 5, 6)):
            return "past state and attention bias inputs are not rewritten"
        if site.output_count > 1 and site.output_used(1):
            return "the present output is used"
        if site.attr("unidirectional", 0) or site.attr("do_rotary", 0):
            return "unidirectional (causal) and rotary attention are not rewritten"
        if site.rank(0) not in (3, None) or (site.shape(1) or [None, None])[1] is None:
            return "needs a 3-D input (as the op's schema says) and weights of static width"
        if self._sizes(site) is None:
            return "hidden sizes do not divide by num_heads"
        if site.has_input(3):
            rank = site.rank(3)
            if rank not in (1, 2, 3):
                return "the mask's rank is unknown" if rank is None else f"a {rank}-D mask is not rewritten"
            if rank == 1 and not self._mask_is_lengths(site):
                return "a 1-D mask must be one key length per batch row (start and end positions are not)"
        return None

    @staticmethod
    def _sizes(site: Site) -> tuple[int, int, int] | None:
        heads = site.attr("num_heads")
        total = (site.shape(1) or [None, None])[1]
        sizes = site.attr("qkv_hidden_sizes") or ([total // 3] * 3 if total else None)
        if not heads or not sizes or len(sizes) != 3 or sizes[0] != sizes[1] or \
                any(s % heads for s in sizes) or sum(sizes) != total:
            return None
        return int(sizes[0]), int(sizes[1]), int(sizes[2])

    @staticmethod
    def _mask_is_lengths(site: Site) -> bool:
        """The 1-D mask is not twice the input's batch as far as shapes say: ORT's optimizer writes
        lengths [batch]; [2 * batch] (start and end positions) fails the proof and verification."""
        mask, batch = (site.shape(3) or [None])[0], (site.shape(0) or [None])[0]
        return mask is None or batch is None or mask == batch

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import math

        heads = int(site.attr("num_heads"))
        q_size, _, v_size = self._sizes(site)  # type: ignore[misc]
        dtype = site.dtype(0)
        qkv = b.op("MatMul", site.inputs[0], site.inputs[1])
        if site.has_input(2):
            qkv = b.op("Add", qkv, site.inputs[2])
        q, k, v = b.ops("Split", qkv, b.ints([q_size, q_size, v_size]), outputs=3, axis=2) if b.opset >= 13 \
            else b.ops("Split", qkv, outputs=3, axis=2, split=[q_size, q_size, v_size])

        def heads_first(x: ir.Value, perm: list[int]) -> ir.Value:
            return b.op("Transpose", b.op("Reshape", x, b.ints([0, 0, heads, -1])), perm=perm)

        scale = site.attr("scale") or 1 / math.sqrt(q_size // heads)
        scores = b.op("MatMul", heads_first(q, [0, 2, 1, 3]), heads_first(k, [0, 2, 3, 1]))
        scores = b.op("Mul", scores, b.scalar_like(scale, dtype))
        if site.has_input(3):
            scores = b.op("Add", scores, self._mask_bias(site, b, scores, dtype))
        y = b.op("MatMul", b.softmax(scores, -1), heads_first(v, [0, 2, 1, 3]))
        y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints([0, 0, -1]))
        return [y]

    @staticmethod
    def _mask_bias(site: Site, b: Builder, scores: ir.Value, dtype: ir.DataType | None) -> ir.Value:
        """mask_filter_value where a key is hidden, 0 elsewhere, broadcast to [batch, heads, q, k]."""
        import numpy as np

        np_dtype = dtype.numpy() if dtype is not None else np.float32
        hidden_value = b.const(np.array(site.attr("mask_filter_value", -10000.0), np_dtype))
        zero = b.const(np.array(0, np_dtype))
        mask = site.inputs[3]
        rank = site.rank(3)
        if rank == 1:  # key lengths: positions at or past the length are hidden
            keys = b.op("Gather", b.op("Shape", scores), b.const(np.array(3, np.int64)))
            positions = b.op("Range", b.const(np.array(0, np.int64)), keys, b.const(np.array(1, np.int64)))
            lengths = b.unsqueeze(b.op("Cast", mask, to=7), [1])  # [batch, 1], int64
            visible = b.op("Less", b.unsqueeze(positions, [0]), lengths)  # [batch, keys]
            return b.unsqueeze(b.op("Where", visible, zero, hidden_value), [1, 2])
        visible = b.op("Greater", b.op("Cast", mask, to=7), b.const(np.array(0, np.int64)))
        bias = b.op("Where", visible, zero, hidden_value)
        return b.unsqueeze(bias, [1, 2] if rank == 2 else [1])


LSTM_ATTRIBUTES = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                   "input_forget")


@register
class DynamicQuantizeLstmRule(_Contrib):
    """com.microsoft DynamicQuantizeLSTM -> LSTM on its dequantized weights: W = (Wq - zero_point) *
    scale, per direction or per gate column, laid out [directions, 4 * hidden, inputs] (the contrib
    op keeps them transposed). ORT's kernel also quantizes X and H at every step: the float form
    differs from it by a step of that grid, as verification of a quantized model allows."""

    name = "ms-dynamic-quantize-lstm"
    op_type = "DynamicQuantizeLSTM"
    atol = 0.1  # int8 tolerances (verify/compare.py): the kernel rounds X and H to uint8 per step
    rtol = 0.1

    def check(self, site: Site) -> str | None:
        if any(site.constant(i) is None for i in (1, 2, 8, 9, 10, 11)):
            return "weights, scales and zero points must be constants"
        return None

    def proof_values(self, site: Site, seed: int) -> dict[int, Any]:
        """Activations of a trained model's scale: the kernel's per-step uint8 grid spans the
        input's range, so the edge values random data holds (1e30) leave it no resolution."""
        import numpy as np

        rng = np.random.default_rng(seed)
        values: dict[int, Any] = {}
        for index in (0, 5, 6):
            shape = site.shape(index) if site.has_input(index) else None
            if shape is not None and all(d is not None for d in shape) and site.constant(index) is None:
                dims = [int(d) for d in shape if d is not None]
                values[index] = rng.uniform(-1, 1, dims).astype(np.float32)
        return values

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        weights = [self._dequantized(site, at, scale_at) for at, scale_at in ((1, 8), (2, 10))]
        attributes = {name: site.attr(name) for name in LSTM_ATTRIBUTES if site.attr(name) is not None}
        inputs = [site.inputs[0], b.const(weights[0]), b.const(weights[1]),
                  *(site.inputs[i] if site.has_input(i) else None for i in range(3, 8))]
        while inputs and inputs[-1] is None:
            inputs.pop()
        return list(b.ops("LSTM", *inputs, outputs=site.output_count, **attributes))

    @staticmethod
    def _dequantized(site: Site, at: int, scale_at: int) -> Any:
        """[directions, inputs, 4 * hidden] integers -> [directions, 4 * hidden, inputs] float."""
        import numpy as np

        quantized = site.constant(at).astype(np.float32)  # type: ignore[union-attr]
        scale = site.constant(scale_at).astype(np.float32)  # type: ignore[union-attr]
        zero_point = site.constant(scale_at + 1).astype(np.float32)  # type: ignore[union-attr]
        directions = quantized.shape[0]
        scale, zero_point = (v.reshape(directions, 1, -1) for v in (scale, zero_point))  # per column or one
        return np.ascontiguousarray(((quantized - zero_point) * scale).transpose(0, 2, 1))
