"""Fuse: fold BatchNormalization into the Conv/ConvTranspose before it, merge consecutive
Transposes, and, where the target has Gemm, turn a 2-D MatMul followed by a bias Add into Gemm
(one node instead of two for every target; TensorRT's parser maps it to one fully-connected layer).

The patterns are onnxscript's curated single-root rules (each declines with a reason, and the
BatchNorm fold states its math: W' = W * gamma / sqrt(var + eps), B' = (B - mean) * gamma /
sqrt(var + eps) + beta). onnxscript's default rule set is not used: its one multi-output
rule is quadratic in graph size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.pipeline.context import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    from deploycc.targets.schema import Target


def fusion_rules(target: Target) -> list:
    from onnxscript.rewriter.rules import common

    rules = [
        common.fuse_batchnorm_into_conv_rule,
        common.fuse_batchnorm_into_conv_transpose_rule,
        common.transpose_transpose_rule,
    ]
    if target.ops.lookup("", "Gemm"):
        rules.append(common.matmul_add_to_gemm_rule)
    return rules


class FusePass(Pass):
    name = "fuse"
    summary = "Conv+BatchNormalization, ConvTranspose+BatchNormalization, Transpose pairs, MatMul+Add->Gemm"

    def run(self, state: PipelineState) -> PassOutcome:
        from onnx_ir.passes.common import RemoveUnusedNodesPass
        from onnxscript.rewriter import pattern

        rules = fusion_rules(state.target)
        applied = pattern.RewriteRuleSet(rules).apply_to_model(state.model)
        if applied:
            RemoveUnusedNodesPass()(state.model)
        return PassOutcome(bool(applied), [f"{applied} fusion(s)"] if applied else [],
                           {"rules": [getattr(r, "name", None) or type(r).__name__ for r in rules]})
