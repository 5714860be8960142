"""Every pass says truly whether it changed the model: True where it had work, False where it
had none (the pass table and `--disable-pass` decisions read it). A pass that declares
`in_place` leaves `state.model` the same object in every run here (tests/passes/test_in_place.py
holds the others to a run that replaces it)."""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir
import pytest

from deploycc import io
from deploycc.graph.shapes import infer_shapes
from deploycc.options import LegalizeOptions
from deploycc.passes import PIPELINE
from deploycc.passes.base import PipelineState
from deploycc.rules.base import GraphRule
from deploycc.rules.proof import FAILED
from deploycc.targets.registry import resolve
from tests.passes.test_map_outputs import classifier

HEADER = '<ir_version: 8, opset_import: ["" : {opset}]>'
RELU = 'g (float[N, 4] x) => (float[N, 4] y) { y = Relu(x) }'
FOLDABLE = ('g (float[N, 4] x) => (float[N, 4] y) {\n  a = Constant<value = float[4] {1, 2, 3, 4}>()\n'
            '  b = Neg(a)\n  y = Add(x, b) }')


def _state(text: str, target: str = "ort-cpu", opset: int = 17, **options) -> PipelineState:
    model = ir.from_onnx_text(HEADER.format(opset=opset) + "\n" + text)
    infer_shapes(model)
    return PipelineState(model, resolve(target), LegalizeOptions(**options), Path("model.onnx"))


def _run(name: str, state: PipelineState) -> bool:
    kind = next(kind for kind in PIPELINE if kind.name == name)
    model = state.model
    modified = kind().run(state).modified
    if kind.in_place:
        assert state.model is model, f"{name} declares in_place but replaced the model"
    return modified


def _zipmap_state(target: str) -> PipelineState:
    model = io.from_proto(classifier([0, 1, 2], ["N", 3]))
    infer_shapes(model)
    return PipelineState(model, resolve(target), LegalizeOptions(), Path("model.onnx"))


# pass name -> (a state it has work on, a state it has none on)
CASES = {
    "opset": (lambda: _state(RELU, "jetson-nano", opset=17), lambda: _state(RELU, "jetson-nano", opset=13)),
    "axes": (lambda: _state(RELU, batch=1), lambda: _state(RELU)),
    "map-outputs": (lambda: _zipmap_state("openvino-cpu"), lambda: _zipmap_state("ort-cpu")),
    "fold": (lambda: _state(FOLDABLE), lambda: _state(RELU)),
    "tidy": (lambda: _state('g (float[N, 4] x) => (float[N, 4] y) {\n'
                            '  a = Relu(x)\n  b = Relu(x)\n  y = Add(a, b) }'),
             lambda: _state(RELU)),
    "prune": (lambda: _state('g (float[N, 4] x) => (float[N, 4] y) { a = Identity(x)\n y = Relu(a) }'),
              lambda: _state(RELU)),
    "fuse": (lambda: _state('g (float[1, 3, 4, 4] x) => (float[1, 3, 4, 4] y) {\n'
                            '  w = Constant<value = float[3, 3, 1, 1] {1, 0, 0, 0, 1, 0, 0, 0, 1}>()\n'
                            '  t = Constant<value = float[3, 1, 1] {1, 2, 3}>()\n'
                            '  c = Conv(x, w)\n  y = Mul(c, t) }'),
             lambda: _state(RELU)),
    "legalize": (lambda: _state('g (float[3, 2, 2] x) => (float[3] y) { y = Det(x) }', "jetson-xavier"),
                 lambda: _state(RELU, "jetson-xavier")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_modified_is_true_with_work_and_false_without(name: str) -> None:
    busy, idle = CASES[name]
    assert _run(name, busy()) is True
    assert _run(name, idle()) is False


def test_prune_counts_a_removal_inside_a_branch() -> None:
    state = _state('''g (bool c, float[2] x) => (float[2] y) {
        y = If(c) <then_branch = g1 () => (float[2] t) { i = Identity(x)\n t = Relu(i) },
                   else_branch = g2 () => (float[2] e) { e = Neg(x) }>
    }''')
    assert _run("prune", state) is True


def test_refold_and_fold_bodies_say_false_when_there_is_nothing_for_them() -> None:
    assert _run("refold", _state(FOLDABLE)) is True
    assert _run("refold", _state(RELU)) is False
    assert _run("fold-bodies", _state(FOLDABLE)) is False  # no function body was expanded


def test_legalize_says_false_when_a_whole_graph_rewrite_was_undone(negates_relu: GraphRule) -> None:
    state = _state(RELU)  # Relu is legal on ort-cpu: no node rule has work after the undo
    assert _run("legalize", state) is False
    certificate = next(r.certificate for r in state.rewrites if r.rule == negates_relu.name)
    assert certificate is not None and certificate.status == FAILED, certificate
    assert [node.op_type for node in state.model.graph] == ["Relu"]  # the graph as it was


def test_every_pass_has_a_case_here() -> None:
    covered = set(CASES) | {"refold", "fold-bodies", "simplify"}
    assert covered == {kind.name for kind in PIPELINE}, "a new pass needs its modified cases"


def test_simplify_says_false_when_onnxsim_changes_nothing() -> None:
    pytest.importorskip("onnxsim")
    busy = _state(FOLDABLE, simplifier="onnxsim")
    assert _run("simplify", busy) is True
    assert _run("simplify", _state(RELU, simplifier="onnxsim")) is False

