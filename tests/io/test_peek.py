"""io.peek: the models a process only reads are read once, vetted where a caller asks it, and the
ones used last are the ones kept."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from deploycc import io
from deploycc.errors import ModelInputError


def _model(path: Path, op: str = "Relu") -> Path:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_model_peeked_unvetted_is_read_again_for_a_caller_that_asks_it_vetted(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    unvetted = io.peek(path)
    vetted = io.peek(path, check=True)
    assert vetted is not unvetted
    assert io.peek(path) is vetted and io.peek(path, check=True) is vetted


def test_a_model_the_checker_refuses_is_refused_by_a_vetted_peek(tmp_path: Path) -> None:
    path = _model(tmp_path / "bad.onnx", op="NotAnOperator")
    assert io.peek(path).model.graph.node(0).op_type == "NotAnOperator"  # read as it is
    with pytest.raises(ModelInputError):
        io.peek(path, check=True)


def test_the_model_used_last_is_kept_over_older_ones(tmp_path: Path) -> None:
    original = _model(tmp_path / "original.onnx")
    first = io.peek(original)
    for index in range(2 * io.read.KEPT_PEEKED):
        io.peek(_model(tmp_path / f"other{index}.onnx"))
        assert io.peek(original) is first  # used again after each: never the oldest
    io.peek(tmp_path / "other0.onnx")
    for index in range(io.read.KEPT_PEEKED):
        io.peek(_model(tmp_path / f"newer{index}.onnx"))
    assert io.peek(original) is not first  # not used while KEPT_PEEKED others were: read again
