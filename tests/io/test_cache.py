"""Caches stay bounded: the oldest files go first, and OpenVINO's blob cache is trimmed after
every compile (it had grown to 41 GB over the zoo audit and filled the disk)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc.io.files import trim_cache


def test_trim_drops_the_oldest_until_the_rest_fits(tmp_path: Path) -> None:
    for age, name in enumerate(("newest", "middle", "oldest")):
        path = tmp_path / name
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1_000_000 - age * 100, 1_000_000 - age * 100))
    assert trim_cache(tmp_path, 2500) == 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "newest"]
    assert trim_cache(tmp_path, 2000) == 0  # already within
    assert trim_cache(tmp_path / "absent", 0) == 0


def test_openvino_compile_trims_its_blob_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openvino")
    from deploycc.backends.openvino import compile_model

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cache = tmp_path / "blobs"
    x = np.ones((1, 64), np.float32)

    monkeypatch.setenv("DEPLOYCC_OPENVINO_CACHE_MB", "64")
    compile_model(model, "CPU", {"CACHE_DIR": str(cache), "INFERENCE_PRECISION_HINT": "f32"})
    assert any(cache.iterdir())  # within the limit the blob is kept, for the next compile

    monkeypatch.setenv("DEPLOYCC_OPENVINO_CACHE_MB", "0")
    compiled = compile_model(model, "CPU", {"CACHE_DIR": str(cache), "INFERENCE_PRECISION_HINT": "f32"})
    assert not [p for p in cache.iterdir() if p.is_file()]
    # the compiled model does not need its blob on disk
    result = compiled.create_infer_request().infer({0: x})
    np.testing.assert_allclose(next(iter(result.values())), x @ numpy_helper.to_array(weight), rtol=1e-4)
