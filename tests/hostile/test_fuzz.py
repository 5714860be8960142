"""Property-based fuzzing: mutated models and mutated bytes through inspect, check and legalize.

The only acceptable outcomes are success or a DeployccError (the one-line errors the CLI
prints); any other exception, or a run longer than the alarm, fails the test. The bounded run
here keeps CI fast; for a longer hand run:

    DEPLOYCC_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/hostile/test_fuzz.py -q
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from deploycc import api
from deploycc.errors import DeployccError
from deploycc.options import LegalizeOptions

EXAMPLES = int(os.environ.get("DEPLOYCC_FUZZ_EXAMPLES", "20"))
SECONDS_PER_EXAMPLE = 60
OPS = ["Relu", "Sigmoid", "Add", "Mul", "Gelu", "LayerNormalization", "Softmax", "Transpose", "Reshape",
       "Einsum", "HardSwish", "Mish", "Identity", "Cast", "Slice", "Pad", "Concat", "Unknown"]


# A dim is hostile when it is negative, zero, or too large for any input to be drawn (refused
# cleanly); one in between is a real model's size, drawn and run twice on ONNX Runtime: a single
# example at 10**7 rows peaked at 3.4 GB, which crashed an xdist worker of `make test` on a loaded
# 2-core machine. The pipeline's own tests cover large drawable models; here each example stays
# within tens of MB.
HOSTILE_DIMS = st.one_of(st.integers(-3, 1 << 12), st.integers(1 << 31, 1 << 62))


class Hang(Exception):
    pass


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def ring(signum, frame):
        raise Hang(f"no outcome after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _seed_model() -> bytes:
    nodes = [helper.make_node("Gelu", ["x"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "s"], ["b"], axis=-1),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [4], [1.0, 1.0, 1.0, 1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    return model.SerializeToString()


SEED = _seed_model()


def _exercise(path: Path, out: Path) -> None:
    for call in (lambda: api.inspect(path), lambda: api.check(path, ["ort-cpu", "jetson-nano"]),
                 lambda: api.legalize(path, "jetson-nano", out, LegalizeOptions(prove=False))):
        try:
            with alarm(SECONDS_PER_EXAMPLE):
                call()
        except DeployccError:
            pass  # a clean, one-line refusal


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(1, len(SEED))))
def test_mutated_bytes_fail_cleanly(tmp_path_factory, edits, cut) -> None:
    data = bytearray(SEED)
    for position, value in edits:
        data[position] = value
    if cut is not None:
        data = data[:cut]
    folder = tmp_path_factory.mktemp("bytes")
    path = folder / "m.onnx"
    path.write_bytes(bytes(data))
    _exercise(path, folder / "out.onnx")
    assert path.read_bytes() == bytes(data)


@st.composite
def mutated_models(draw) -> onnx.ModelProto:
    model = onnx.load_from_string(SEED)
    graph = model.graph
    node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
    choice = draw(st.sampled_from(["op", "attr", "dims", "opset", "input", "dtype"]))
    if choice == "op":
        node.op_type = draw(st.sampled_from(OPS))
    elif choice == "attr":
        name = draw(st.sampled_from(["axis", "perm", "equation", "to"]))
        value = draw(st.one_of(st.integers(-9, 9), st.lists(st.integers(-3, 5), min_size=1, max_size=4),
                               st.text(max_size=12)))
        node.attribute.append(helper.make_attribute(name, value))
    elif choice == "dims":
        dims = graph.input[0].type.tensor_type.shape.dim
        dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(HOSTILE_DIMS)
    elif choice == "opset":
        model.opset_import[0].version = draw(st.integers(1, 30))
    elif choice == "input":
        node.input.append(draw(st.sampled_from(["x", "s", "y", "", "ghost"])))
    else:
        graph.input[0].type.tensor_type.elem_type = draw(st.integers(0, 25))
    return model


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=mutated_models())
def test_mutated_models_fail_cleanly(tmp_path_factory, model) -> None:
    folder = tmp_path_factory.mktemp("model")
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    _exercise(path, folder / "out.onnx")


def test_a_size_no_machine_draws_is_a_clean_refusal(tmp_path: Path) -> None:
    """2**31 rows of 4 floats: drawing them raised numpy's MemoryError through legalize (exit 3 on
    the command line); verification now says it needs inputs."""
    model = onnx.load_from_string(SEED)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1 << 31
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    report = api.legalize(path, "jetson-nano", tmp_path / "out.onnx", LegalizeOptions(prove=False))
    assert not report.success and report.verification is not None and report.verification.needs_inputs
    assert "do not fit in memory" in (report.verification.problem or "")
