"""The fold pass reads a chain of blocks, each padding by an amount computed from its input's
static width, in one pass: the folder infers each node's shape as it folds, so the next block's
width is known the moment the block before it folds (DaViT's windows: 13 whole-model shape
inferences, now 3). It had read one block per round, and stopped after eight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from deploycc.graph import shapes
from deploycc.options import LegalizeOptions
from deploycc.passes.base import PipelineState
from deploycc.passes.fold import FOLD_ROUNDS, FoldPass
from deploycc.targets.registry import resolve
from deploycc.verify.runner import run_ort

BLOCKS = FOLD_ROUNDS + 4


def _chain() -> ir.Model:
    """x[N, 4, 6] through BLOCKS blocks: y = Pad(x, width + (4 - width % 4)) on the last axis,
    the width read as Gather(Shape(x), [2]) (Mod stops onnx's data propagation short of it)."""
    lines = ['<ir_version: 8, opset_import: ["" : 17]>',
             f'g (float[N, 4, 6] x0) => (float[N, 4, ?] x{BLOCKS}) {{',
             '  two = Constant<value = int64[1] {2}>()',
             '  four = Constant<value = int64[1] {4}>()',
             '  zeros = Constant<value = int64[5] {0, 0, 0, 0, 0}>()']
    for i in range(BLOCKS):
        lines += [f'  s{i} = Shape(x{i})', f'  w{i} = Gather<axis = 0>(s{i}, two)',
                  f'  m{i} = Mod(w{i}, four)', f'  p{i} = Sub(four, m{i})',
                  f'  pads{i} = Concat<axis = 0>(zeros, p{i})', f'  x{i + 1} = Pad(x{i}, pads{i})']
    return ir.from_onnx_text("\n".join(lines) + "\n}")


def test_a_chain_of_blocks_reading_their_widths_folds_in_one_pass(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from deploycc import io

    model = _chain()
    shapes.infer_shapes(model)
    io.save(model, tmp_path / "chain.onnx")
    inferred = []
    real = shapes.infer_shapes
    monkeypatch.setattr(shapes, "infer_shapes", lambda m: inferred.append(1) or real(m))
    state = PipelineState(model, resolve("ort-cpu"), LegalizeOptions(), Path("chain.onnx"))
    FoldPass().run(state)
    left = [node.op_type for node in state.model.graph]
    assert left == ["Pad"] * BLOCKS  # every width read and every pad amount folded
    assert len(inferred) <= 2
    io.save(state.model, tmp_path / "folded.onnx")
    x = np.random.default_rng(0).standard_normal((3, 4, 6)).astype(np.float32)
    expected, folded = (run_ort(tmp_path / name, {"x0": x})[f"x{BLOCKS}"]
                        for name in ("chain.onnx", "folded.onnx"))
    assert folded.shape == (3, 4, 6 + 2 + 4 * (BLOCKS - 1)) and np.array_equal(folded, expected)
