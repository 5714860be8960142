"""Every pass says truly whether it works in place (onnx-ir's `in_place`). The pass manager
catches a pass that declares in_place and replaces `state.model`; here each pass that declares
otherwise is held to a run where it does replace it, so neither lie goes unseen (the in_place
passes keep the model in every run of tests/passes/test_modified.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir
import pytest

from deploycc.options import LegalizeOptions
from deploycc.passes import PIPELINE
from deploycc.passes.base import Pass, PassOutcome, PipelineState
from deploycc.pipeline.manager import InvariantError, run_passes
from deploycc.targets.registry import resolve
from tests.passes.test_modified import RELU, _state


class _SwapsInACopy(Pass):
    """Puts a new model in place of the old one, its Relu made a Neg (same signature)."""

    name = "swaps-in-a-copy"
    summary = "replaces state.model"

    def run(self, state: PipelineState) -> PassOutcome:
        copy = ir.from_proto(ir.to_proto(state.model))
        next(iter(copy.graph)).op_type = "Neg"
        state.model = copy
        return PassOutcome(True)


class _SaysInPlace(_SwapsInACopy):
    in_place = True


class _SaysItReplaces(_SwapsInACopy):
    in_place = False


def _relu_state() -> PipelineState:
    model = ir.from_onnx_text('<ir_version: 8, opset_import: ["" : 17]>\n' + RELU)
    return PipelineState(model, resolve("ort-cpu"), LegalizeOptions(), Path("model.onnx"))


def test_a_pass_that_replaces_the_model_but_declares_in_place_is_caught() -> None:
    with pytest.raises(InvariantError, match="'swaps-in-a-copy' declares in_place but replaced the model"):
        run_passes([_SaysInPlace()], _relu_state())


def test_a_pass_that_declares_it_replaces_the_model_may_and_its_model_is_the_one_measured() -> None:
    state = _relu_state()
    original = state.model
    record, = run_passes([_SaysItReplaces()], state)
    assert state.model is not original
    assert record.ops_before == {"Relu": 1} and record.ops_after == {"Neg": 1}


# pass name -> a run where it puts a new model in place of the old one
REPLACES: dict[str, Callable[[], PipelineState]] = {
    "opset": lambda: _state(RELU, "jetson-nano", opset=17),  # onnx's converter, 17 -> 13
    "legalize": lambda: _state(RELU),  # NegatesRelu's proof fails: the graph comes back from its bytes
    "simplify": lambda: _state(RELU, simplifier="onnxsim"),  # the model onnxsim's child wrote
}


def test_every_pass_that_is_not_in_place_has_a_case_here() -> None:
    assert set(REPLACES) == {kind.name for kind in PIPELINE if not kind.in_place}


@pytest.mark.parametrize("name", sorted(REPLACES))
@pytest.mark.usefixtures("negates_relu")  # the legalize run's wrong rule; no other pass reads it
def test_a_pass_that_is_not_in_place_replaces_the_model(name: str) -> None:
    if name == "simplify":
        pytest.importorskip("onnxsim")
    kind = next(kind for kind in PIPELINE if kind.name == name)
    state = REPLACES[name]()
    original = state.model
    run_passes([kind()], state)  # through the manager: its other checks hold on the new model
    assert state.model is not original
