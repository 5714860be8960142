"""Image inputs drawn as pictures where the original answers noise with nothing: a text
detector (PP-OCR's) gives all zeros on noise, and verification used to stop at "needs --inputs"
on the command as typed. A stand-in with the same trait: it fires only on a 16x16 region whose
mean is far from zero, which noise (mean of 256 normals: sd 1/16) never has and a mosaic tile has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.options import LegalizeOptions
from deploycc.verify.inputs import MOSAIC, NOISE, PAGE, TILE, generate, image_channel_axis, picture


def _region_detector(tmp_path: Path) -> Path:
    window = {"kernel_shape": [TILE, TILE], "strides": [TILE, TILE]}
    nodes = [helper.make_node("AveragePool", ["x"], ["mean"], **window),
             helper.make_node("Abs", ["mean"], ["size"]),
             helper.make_node("Sub", ["size", "half"], ["over"]),
             helper.make_node("Relu", ["over"], ["y"])]
    graph = helper.make_graph(nodes, "detector",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    path = tmp_path / "detector.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_model_silent_on_noise_is_verified_on_a_mosaic(tmp_path: Path) -> None:
    model = _region_detector(tmp_path)
    report = api.legalize(model, "ort-cpu", tmp_path / "out.onnx", LegalizeOptions())
    assert report.success, report.summary
    verification = report.verification
    assert verification is not None and verification.passed, verification
    assert verification.content == MOSAIC
    assert "mosaic" in verification.inputs


def test_pictures_are_what_they_say() -> None:
    rng = np.random.default_rng(0)
    mosaic = picture([2, 3, 40, 50], 1, MOSAIC, rng)
    assert mosaic.shape == (2, 3, 40, 50)
    tile = mosaic[1, 2, 16:32, 32:48]
    assert (tile == tile[0, 0]).all() and mosaic[1, 2, 0, 0] != mosaic[1, 2, 0, 16]
    page = picture([1, 32, 48, 1], 3, PAGE, rng)  # NHWC, one channel
    assert page.shape == (1, 32, 48, 1)
    assert set(np.unique(page)) == {0.0, 1.0} and page.mean() > 0.5  # dark words on a white page


def test_only_float_image_batches_are_drawn_as_pictures() -> None:
    assert image_channel_axis([1, 3, 224, 224]) == 1 and image_channel_axis([1, 224, 224, 3]) == 3
    assert image_channel_axis([1, 3, 8, 8]) is None and image_channel_axis([1, 128, 768]) is None
    graph = onnx.helper.make_graph([], "g", [
        helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32]),
        helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3, 32, 32]),
        helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, 16, 8])], [])
    import onnx_ir as ir

    values = list(ir.serde.deserialize_graph(graph).inputs)
    noise, pictured = generate(values, content=NOISE), generate(values, content=PAGE)
    assert set(np.unique(pictured["image"])) == {0.0, 1.0}
    assert len(np.unique(noise["image"])) > 100
    assert np.issubdtype(pictured["ids"].dtype, np.integer)
    assert len(np.unique(pictured["tokens"])) > 100  # not an image: noise whatever was asked
