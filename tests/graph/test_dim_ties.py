"""Dims the graph holds to one size though the exporter named them apart (Silero VAD's `state`
[2, ?, 128] beside `input` [batch, samples]): tied, so fixing the batch fixes them all."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from deploycc import io
from deploycc.graph.dim_roles import BATCH, guess_dims
from deploycc.graph.dim_ties import tie_guesses, tied_places
from tests.cli.test_cli import run

# `state`'s dim 1 meets `input`'s batch only in the Concat, after a Reshape and a reduction each
TIED = """
<ir_version: 10, opset_import: ["" : 17]>
g (float[batch,1024] input, float[2,m,128] state) => (float[batch,256] y, float[2,m,128] state_out) {
  shape = Constant<value = int64[3] {0, 8, 128}>()
  rows = Reshape(input, shape)
  one = Constant<value = int64[1] {1}>()
  h = ReduceSum<keepdims = 0>(rows, one)
  zero = Constant<value = int64[1] {0}>()
  s = ReduceSum<keepdims = 0>(state, zero)
  y = Concat<axis = 1>(h, s)
  state_out = Tanh(state)
}
"""


def test_the_graph_ties_state_s_dim_to_the_batch(write_model) -> None:
    model = io.load(write_model(TIED)).model
    assert tied_places(model) == [{("input", 0), ("state", 1)}]
    guesses = {(g.input, g.axis): g for g in tie_guesses(model, guess_dims(model.graph))}
    assert guesses[("state", 1)].role == BATCH and "input[0]" in guesses[("state", 1)].source


def test_batch_1_fixes_the_tied_dim_and_the_build_is_verified(write_model, tmp_path: Path) -> None:
    model = str(write_model(TIED))
    for flags in (["--batch", "1"], []):  # as the user fixes it, and as the Jetson's policy does
        out = tmp_path / f"x{len(flags)}"
        built = run("build", model, "-t", "jetson-xavier", "-o", str(out), "--no-bench", *flags)
        assert built.returncode == 0, built.stdout + built.stderr
        report = json.loads((out / "report.json").read_text())
        assert report["legalize"]["verification"]["passed"], report["legalize"]["verification"]
        inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
                  for i in onnx.load(out / "model.legalized.onnx").graph.input}
        assert inputs == {"input": [1, 1024], "state": [2, 1, 128]}
    cpu = run("build", model, "-t", "ort-cpu", "-o", str(tmp_path / "cpu"), "--no-bench")
    assert cpu.returncode == 0, cpu.stdout  # the batch kept dynamic, drawn at one size for both
