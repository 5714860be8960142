"""Fuse: fold a per-channel Add, Mul and BatchNormalization into the Conv before it, a scalar Mul
into the Conv after it, an Add of one value (or one per channel) into the unpadded Conv after
it, a per-channel Add into the ConvTranspose before it, merge consecutive Transposes, and,
where the target has Gemm, turn a 2-D MatMul followed by a bias Add into Gemm (one node instead
of two for every target; TensorRT's parser maps it to one fully-connected layer).

The patterns are onnxscript's curated single-root rules (each declines with a reason, and the
BatchNorm fold states its math: W' = W * gamma / sqrt(var + eps), B' = (B - mean) * gamma /
sqrt(var + eps) + beta). onnxscript's default rule set is not used: its one multi-output
rule is quadratic in graph size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deploycc.passes.base import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    from onnxscript.rewriter.pattern import RewriteRuleClassBase

    from deploycc.targets.schema import Target


def _per_channel(weights, extra, channels: int | None = None) -> np.ndarray | None:
    """The constant as one value per output channel of a Conv with these weights, when it
    broadcasts against the Conv's [N, M, ...] output to [1, M, 1, ...] or is one value for all
    (then the Add or Mul changed nothing but values); else None. `channels`: M where the weights
    do not lead with it (a ConvTranspose's are [C_in, M / group, ...])."""
    channels, rank = channels or int(weights.shape[0]), len(weights.shape)
    if extra is None or len(extra.shape) > rank or extra.dtype != weights.dtype:
        return None
    shape = [1] * (rank - len(extra.shape)) + list(extra.shape)
    if shape == [1] * rank:
        return np.full(channels, extra.numpy().reshape(-1)[0])
    if shape != [1, channels] + [1] * (rank - 2):
        return None
    return extra.numpy().reshape(-1)


def _commuted_rules(*rule_classes: type[RewriteRuleClassBase]) -> list:
    """Each rule class's rule in both operand orders of its commutative ops."""
    return [commuted for rule in rule_classes for commuted in rule.rule().commute()]


def _conv_bias_rules() -> list:
    """Conv followed by the Add of a per-channel constant (PaddlePaddle exports its conv biases
    so): the constant joins the Conv's bias. Conv followed by the Mul of a per-channel constant
    (PP-LCNet's learnable affine blocks, Conv -> Mul -> Add): W' = W * s per output channel,
    B' = B * s, exact up to one rounding; the Add then joins the bias. Both are commuted."""
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    class ConvAddBias(pattern.RewriteRuleClassBase):
        with_bias = True
        combine = "Add"

        def pattern(self, op, x, w, b, c):
            conv = op.Conv(x, w, b, _allow_other_attributes=True, _outputs=["conv_out"]) if self.with_bias \
                else op.Conv(x, w, _allow_other_attributes=True, _outputs=["conv_out"])
            return getattr(op, self.combine)(conv, c)

        def check(self, context, x, w, c, conv_out, b=None) -> MatchResult:
            result = MatchResult()
            weights, extra = w.const_value, c.const_value
            if weights is None or extra is None or (b is not None and b.const_value is None):
                return result.fail("weights, bias and the constant must be constants")
            values = _per_channel(weights, extra)
            if values is None:
                return result.fail("the constant is not one value per output channel of the same dtype")
            if self.combine == "Mul" and not np.isfinite(values).all():
                return result.fail("a non-finite scale would turn the conv's zeros into NaN")
            return result

        def rewrite(self, op, x, w, c, conv_out, b=None):
            values = _per_channel(w.const_value, c.const_value)
            assert values is not None
            base = b.const_value.numpy() if b is not None else np.zeros_like(values)
            attributes = conv_out.producer().attributes
            if self.combine == "Add":
                bias = op.initializer(ir.tensor((base + values).astype(values.dtype)),
                                      f"{conv_out.name}_bias")
                return op.Conv(x, w, bias, **attributes)
            weights = w.const_value.numpy()
            scaled = weights * values.reshape([-1] + [1] * (weights.ndim - 1))
            weight = op.initializer(ir.tensor(scaled.astype(weights.dtype)), f"{conv_out.name}_scaled_weight")
            if b is None:
                return op.Conv(x, weight, **attributes)
            bias = op.initializer(ir.tensor((base * values).astype(values.dtype)),
                                  f"{conv_out.name}_scaled_bias")
            return op.Conv(x, weight, bias, **attributes)

    class ConvWithoutBiasAddBias(ConvAddBias):
        with_bias = False

    class ConvMulScale(ConvAddBias):
        combine = "Mul"

    class ConvWithoutBiasMulScale(ConvMulScale):
        with_bias = False

    return _commuted_rules(ConvAddBias, ConvWithoutBiasAddBias, ConvMulScale, ConvWithoutBiasMulScale)


def _scalar(value) -> float | None:
    """The one finite, non-zero value of a constant with one element, else None (a zero scale
    would turn an infinite input into NaN one way and 0 the other)."""
    tensor = value.const_value if value is not None else None
    if tensor is None or tensor.size != 1:
        return None
    number = float(tensor.numpy().reshape(-1)[0])
    return number if np.isfinite(number) and number != 0.0 else None


def _scaled_input_conv_rules() -> list:
    """Conv(x * s) with s one constant value -> Conv(x) with W' = W * s: a convolution is linear in
    its input and zero padding scales to zero (Gelu's trailing * 0.5 before the next Conv, 13 times
    in PP-OCRv6's detector)."""
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    class ScaledInputConv(pattern.RewriteRuleClassBase):
        with_bias = True

        def pattern(self, op, x, s, w, b):
            scaled = op.Mul(x, s)
            return op.Conv(scaled, w, b, _allow_other_attributes=True, _outputs=["conv_out"]) \
                if self.with_bias else op.Conv(scaled, w, _allow_other_attributes=True, _outputs=["conv_out"])

        def check(self, context, x, s, w, conv_out, b=None) -> MatchResult:
            result = MatchResult()
            if w.const_value is None or _scalar(s) is None:
                return result.fail("the weights must be a constant and the scale one finite non-zero value")
            if s.dtype != w.dtype or len(s.const_value.shape) > len(w.const_value.shape):
                return result.fail("the scale must be of the weights' dtype and broadcast nothing larger")
            return result

        def rewrite(self, op, x, s, w, conv_out, b=None):
            weights = w.const_value.numpy()
            scaled = op.initializer(ir.tensor((weights * _scalar(s)).astype(weights.dtype)),
                                    f"{conv_out.name}_input_scaled_weight")
            attributes = conv_out.producer().attributes
            return op.Conv(x, scaled, b, **attributes) if b is not None else op.Conv(x, scaled, **attributes)

    class ScaledInputConvWithoutBias(ScaledInputConv):
        with_bias = False

    return _commuted_rules(ScaledInputConv, ScaledInputConvWithoutBias)


def _input_shift_as_bias(c, w, conv_out) -> np.ndarray | None:
    """The bias change per output channel that Conv(x + c) -> Conv(x) needs, or None where the fold
    does not hold."""
    attributes = conv_out.producer().attributes
    if any(attributes.get_ints("pads", ()) or ()) or \
            attributes.get_string("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    weights, shift = w.const_value, c.const_value
    if weights is None or shift is None or shift.dtype != weights.dtype or len(weights.shape) < 3:
        return None
    kernel = weights.numpy().astype(np.float64)
    values = shift.numpy().astype(np.float64)
    outputs, per_group = kernel.shape[0], kernel.shape[1]
    group = attributes.get_int("group", 1) or 1
    spatial = kernel.ndim - 2
    if values.ndim > kernel.ndim:
        return None
    broadcast = (1,) * (kernel.ndim - values.ndim) + values.shape
    if values.size == 1:
        per_input = np.full(per_group * group, values.reshape(-1)[0])
    elif broadcast == (1, per_group * group) + (1,) * spatial:
        per_input = values.reshape(-1)
    else:
        return None
    if not np.isfinite(per_input).all() or outputs % group:
        return None
    first_input = (np.arange(outputs) // (outputs // group)) * per_group
    taken = per_input[first_input[:, None] + np.arange(per_group)[None, :]]  # [M, C/g]
    return (kernel.sum(axis=tuple(range(2, kernel.ndim))) * taken).sum(axis=1)


def _shifted_input_conv_rules() -> list:
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    class ShiftedInputConv(pattern.RewriteRuleClassBase):
        """Conv(x + c) with c one value, or one per input channel, and no padding -> Conv(x) with
        B'[m] = B[m] + sum over m's window of W * c: every window reads c at every tap (a padded
        tap would read 0, not c, so padding declines). PP-LCNet's learnable affine block, y = s * x
        + b before each pointwise Conv: ten times in PP-OCR's mobile detectors."""
        with_bias = True

        def pattern(self, op, x, c, w, b):
            shifted = op.Add(x, c)
            inputs = (shifted, w, b) if self.with_bias else (shifted, w)
            return op.Conv(*inputs, _allow_other_attributes=True, _outputs=["conv_out"])

        def check(self, context, x, c, w, conv_out, b=None) -> MatchResult:
            result = MatchResult()
            if b is not None and b.const_value is None:
                return result.fail("the bias must be a constant")
            if _input_shift_as_bias(c, w, conv_out) is None:
                return result.fail("the Conv pads, or the constant is not one value (per input channel)")
            return result

        def rewrite(self, op, x, c, w, conv_out, b=None):
            shift = _input_shift_as_bias(c, w, conv_out)
            assert shift is not None
            dtype = w.const_value.numpy().dtype
            base = b.const_value.numpy().astype(np.float64) if b is not None else np.zeros_like(shift)
            bias = op.initializer(ir.tensor((base + shift).astype(dtype)), f"{conv_out.name}_shifted_bias")
            return op.Conv(x, w, bias, **conv_out.producer().attributes)

    class ShiftedInputConvWithoutBias(ShiftedInputConv):
        with_bias = False

    return _commuted_rules(ShiftedInputConv, ShiftedInputConvWithoutBias)


def _conv_transpose_bias_rules() -> list:
    """ConvTranspose followed by the Add of one constant per output channel -> the ConvTranspose's
    bias (its weights are [C_in, C_out / group, ...])."""
    import onnx_ir as ir
    from onnxscript.rewriter import pattern

    from deploycc.graph.private_api import MatchResult

    class ConvTransposeAddBias(pattern.RewriteRuleClassBase):
        with_bias = True

        def pattern(self, op, x, w, b, c):
            inputs = (x, w, b) if self.with_bias else (x, w)
            deconv = op.ConvTranspose(*inputs, _allow_other_attributes=True, _outputs=["deconv_out"])
            return op.Add(deconv, c)

        def _values(self, w, c, deconv_out) -> np.ndarray | None:
            if w.const_value is None:
                return None
            group = deconv_out.producer().attributes.get_int("group", 1) or 1
            return _per_channel(w.const_value, c.const_value, int(w.const_value.shape[1]) * group)

        def check(self, context, x, w, c, deconv_out, b=None) -> MatchResult:
            result = MatchResult()
            if b is not None and b.const_value is None:
                return result.fail("the bias must be a constant")
            if self._values(w, c, deconv_out) is None:
                return result.fail("the constant is not one value per output channel of the same dtype")
            return result

        def rewrite(self, op, x, w, c, deconv_out, b=None):
            values = self._values(w, c, deconv_out)
            assert values is not None
            base = b.const_value.numpy() if b is not None else np.zeros_like(values)
            bias = op.initializer(ir.tensor((base + values).astype(values.dtype)), f"{deconv_out.name}_bias")
            return op.ConvTranspose(x, w, bias, **deconv_out.producer().attributes)

    class ConvTransposeWithoutBiasAddBias(ConvTransposeAddBias):
        with_bias = False

    return _commuted_rules(ConvTransposeAddBias, ConvTransposeWithoutBiasAddBias)


def fusion_rules(target: Target) -> list:
    from onnxscript.rewriter.rules import common

    rules = [
        *_conv_bias_rules(),
        *_scaled_input_conv_rules(),
        *_shifted_input_conv_rules(),
        *_conv_transpose_bias_rules(),
        common.fuse_batchnorm_into_conv_rule,
        common.fuse_batchnorm_into_conv_transpose_rule,
        common.transpose_transpose_rule,
    ]
    if target.ops.lookup("", "Gemm"):
        rules.append(common.matmul_add_to_gemm_rule)
    return rules


class FusePass(Pass):
    name = "fuse"
    summary = ("Conv+Add bias, Conv+Mul scale, a scalar Mul or a constant Add before a Conv, "
               "Conv(Transpose)+BatchNormalization, Transpose pairs, MatMul+Add->Gemm")

    def rule_names(self, state: PipelineState) -> list[str]:
        return list(dict.fromkeys(r.name for r in fusion_rules(state.target)))

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import RemoveUnusedNodesPass
        from onnxscript.rewriter import pattern

        rules = [r for r in fusion_rules(state.target) if r.name not in state.options.disable_rules]
        rule_set = pattern.RewriteRuleSet(rules)
        applied = 0
        for _ in range(3):  # Conv+Add -> Conv, then that Conv+BatchNormalization (PP-OCR's detector)
            fused = rule_set.apply_to_model(state.model)
            applied += fused
            if not fused:
                break
            RemoveUnusedNodesPass()(state.model)
        return PassOutcome(bool(applied), [f"{applied} fusion(s)"] if applied else [],
                           {"rules": [getattr(r, "name", None) or type(r).__name__ for r in rules]})
