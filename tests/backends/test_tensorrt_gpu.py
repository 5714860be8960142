"""The TensorRT engine path itself: runs only where TensorRT and a GPU are (a Jetson or a CUDA
machine with `pip install 'deploycc[tensorrt]'`). Everything up to the engine, the bundle, the
trtexec command and the fingerprint checks are tested on every machine in tests/pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

pytest.importorskip("tensorrt", reason="TensorRT is not installed: its wheels are not served here and there "
                                       "is no NVIDIA GPU; the engine build is tested on a device")
pytest.importorskip("cuda", reason="cuda-python is not installed (deploycc[tensorrt] brings it)")

from deploycc import api
from deploycc.backends.base import BackendError
from deploycc.backends.tensorrt.engine import TensorRTRunner
from deploycc.options import BuildOptions, LegalizeOptions
from examples.make_models import small_cnn


def test_plan_is_built_verified_and_fingerprinted(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    options = BuildOptions(precision="fp16", legalize=LegalizeOptions(batch=1))
    report = api.build(model, "gpu-trt10", tmp_path / "out", options)
    assert report.status == "verified", report.summary
    plan = tmp_path / "out" / "model.plan"
    stamp = json.loads(plan.with_name("model.plan.json").read_text())
    assert {"tensorrt", "compute_capability"} <= set(stamp)
    stamp["compute_capability"] = "1.0"
    plan.with_name("model.plan.json").write_text(json.dumps(stamp))
    with pytest.raises(BackendError, match=r"compute_capability 1\.0"):
        TensorRTRunner(plan)
