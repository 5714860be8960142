"""A value two nodes write (torch's dynamo exporter names a graph output after output_names even
where a node has that name, pytorch#158094): read in node order, as the onnx reference evaluator
runs it, where ONNX Runtime refuses the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deploycc import io
from deploycc.io.node_order import rename_redefinitions
from tests.cli.test_cli import run


def _written_twice() -> onnx.ModelProto:
    """`out` is written by Relu, read by Add, written again by Mul: the graph's output."""
    nodes = [helper.make_node("Relu", ["x"], ["out"]), helper.make_node("Add", ["out", "x"], ["a"]),
             helper.make_node("Mul", ["a", "x"], ["out"])]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, ["n", 4])],
                              [value("out", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_reader_reads_the_last_writer_before_it(tmp_path: Path) -> None:
    path = tmp_path / "twice.onnx"
    onnx.save(_written_twice(), path)
    with pytest.raises(Exception, match=r"(?i)duplicate"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    (expected,) = ReferenceEvaluator(onnx.load(path)).run(None, {"x": x})
    loaded = io.load(path)
    assert any("'out': written by more than one node" in note for note in loaded.notes)
    session = ort.InferenceSession(io.to_proto(loaded.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(actual, (np.maximum(x, 0) + x) * x)


def test_a_subgraph_reads_the_outer_writer_before_its_node() -> None:
    model = _written_twice()
    branch = helper.make_graph([helper.make_node("Neg", ["out"], ["inner"])], "then", [],
                               [helper.make_tensor_value_info("inner", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["inner2"])], "else", [],
                              [helper.make_tensor_value_info("inner2", TensorProto.FLOAT, None)])
    reading = helper.make_node("If", ["flag"], ["branched"], then_branch=branch, else_branch=other)
    model.graph.node.insert(1, reading)
    assert rename_redefinitions(model.graph) == ["out"]
    first, _, add, last = model.graph.node
    assert first.output[0] == add.input[0] == "out__1"
    then = next(attribute.g for attribute in model.graph.node[1].attribute if attribute.name == "then_branch")
    assert then.node[0].input[0] == "out__1"
    assert last.output[0] == model.graph.output[0].name == "out"


def test_build_verifies_such_an_export_against_the_reference_evaluator(tmp_path: Path) -> None:
    path = tmp_path / "twice.onnx"
    onnx.save(_written_twice(), path)
    result = run("build", str(path), "-t", "ort-cpu", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "written by more than one node" in report and "on onnx.reference" in report
