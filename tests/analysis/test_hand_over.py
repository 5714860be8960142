"""check reads its model once and hands it to legalize: the model legalize takes is the one a fresh
read gives (check's verdicts change nothing), and a file changed since is read again."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deploycc import io
from deploycc.analysis.check import check_model
from deploycc.graph import shapes
from deploycc.targets.registry import resolve


def _model(path: Path) -> Path:
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Erf", ["h"], ["e"]),
             helper.make_node("Shape", ["e"], ["s"]), helper.make_node("Reshape", ["e", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), path)
    return path


def test_the_checked_model_is_what_a_fresh_read_gives_and_is_taken_once(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    fresh = io.to_proto(shapes.load_inferred(path).model).SerializeToString()
    targets = [resolve(name, None) for name in ("ort-cpu", "jetson-nano", "openvino-cpu")]
    check_model(path, targets)
    lent = next(iter(shapes._lent.values()))
    taken = shapes.load_inferred(path)
    assert taken is lent  # not read again
    assert io.to_proto(taken.model).SerializeToString() == fresh  # the verdicts changed nothing
    assert shapes.load_inferred(path) is not lent  # once only


def test_a_file_changed_after_the_check_is_read_again(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    check_model(path, [resolve("ort-cpu", None)])
    lent = next(iter(shapes._lent.values()))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert shapes.load_inferred(path) is not lent
