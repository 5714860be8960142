"""The tolerances a model is judged with follow what it computes in: a quantized model by int8's,
a model whose weights are float16 by float16's, whatever precision the engine is built in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deploycc.taxonomy import Precision
from deploycc.verify.verification import computes_in_float16, tolerance_precision


def _matmul(path: Path, dtype: type) -> Path:
    """y = x @ W with W in `dtype` (onnxconverter-common's float16 models keep their I/O either way)."""
    element = TensorProto.FLOAT16 if dtype is np.float16 else TensorProto.FLOAT
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 8)).astype(dtype), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", element, [1, 64])],
                              [helper.make_tensor_value_info("y", element, [1, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_float16_model_is_judged_at_float16_tolerances(tmp_path: Path) -> None:
    half, single = _matmul(tmp_path / "half.onnx", np.float16), _matmul(tmp_path / "single.onnx", np.float32)
    assert computes_in_float16(half) and not computes_in_float16(single)
    ops = {"MatMul": 1}
    assert tolerance_precision(ops, Precision.FP32, float16=True) == Precision.FP16
    assert tolerance_precision(ops, Precision.FP32, float16=False) == Precision.FP32
    assert tolerance_precision(ops, Precision.INT8, float16=True) == Precision.INT8  # looser stays
    assert tolerance_precision({"QLinearConv": 1}, Precision.FP32, float16=True) == Precision.INT8


def test_a_file_read_again_after_it_changed_is_not_the_one_kept(tmp_path: Path) -> None:
    """io.peek keeps the last models read by path, size and mtime: the same file is read once, and
    a file written over at the same path is read afresh (verification reads the legalized file
    several times, and a rebuild writes it again)."""
    import os

    from deploycc import io

    path = _matmul(tmp_path / "model.onnx", np.float32)
    assert io.peek(path) is io.peek(path)
    assert not computes_in_float16(path)
    stat = path.stat()
    _matmul(path, np.float16)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # however close in time it was written
    assert computes_in_float16(path)
