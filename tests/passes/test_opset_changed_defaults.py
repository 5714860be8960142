"""Attributes an op gained with a default that computes otherwise than before: RoiAlign 16's
coordinate_transformation_mode. A node set to what the op computed below 16 (output_half_pixel,
torchvision's Faster R-CNN at opset 16) goes down unchanged, the attribute dropped; one left at the
new default (half_pixel) is not carried down as if nothing changed."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort
import pytest

from deploycc.passes.opset import OpsetConversionError, OpsetPass, convert_opset


def roi_align(mode: str) -> str:
    setting = f', coordinate_transformation_mode = "{mode}"' if mode else ""
    return f"""
    <ir_version: 8, opset_import: ["" : 16]>
    g (float[1,2,8,8] x, float[3,4] rois, int64[3] batch) => (float[3,2,3,3] y) {{
        y = RoiAlign <output_height = 3, output_width = 3, sampling_ratio = 2,
                      spatial_scale = 0.5{setting}> (x, rois, batch)
    }}
    """


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


FEEDS = {
    "x": np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32),
    "rois": np.array([[1.0, 2.0, 9.5, 13.0], [0.0, 0.0, 15.0, 15.0], [3.2, 1.1, 4.0, 2.5]], np.float32),
    "batch": np.zeros(3, np.int64),
}


def test_roi_align_at_output_half_pixel_goes_below_16_unchanged() -> None:
    original = onnx.parser.parse_model(roi_align("output_half_pixel"))
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(original), 13))
    onnx.checker.check_model(converted, full_check=True)
    node = converted.graph.node[0]
    assert node.op_type == "RoiAlign" and not any(a.name == "coordinate_transformation_mode"
                                                  for a in node.attribute)
    np.testing.assert_array_equal(run(converted, FEEDS), run(original, FEEDS))


def test_roi_align_at_the_half_pixel_default_is_not_carried_below_16() -> None:
    """RoiAlign 10 would shift every box by half a pixel: refused, not computed otherwise."""
    original = onnx.parser.parse_model(roi_align(""))
    shifted = run(onnx.parser.parse_model(roi_align("output_half_pixel")), FEEDS)
    assert not np.allclose(run(original, FEEDS), shifted)  # the two modes do differ
    with pytest.raises(OpsetConversionError, match="no adapter for RoiAlign from version 16"):
        OpsetPass._convert(ir.serde.deserialize_model(original), 16, 13)


def grid_sample(rank: int, mode: str) -> str:
    spatial = ",".join(["5"] * (rank - 2))
    grid = ",".join(["3"] * (rank - 2))
    return f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[1,2,{spatial}] x, float[1,{grid},{rank - 2}] grid) => (float[1,2,{grid}] y) {{
        y = GridSample <mode = "{mode}", align_corners = 0> (x, grid)
    }}
    """


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_20_goes_below_20_with_its_mode_spelled_the_old_way(mode: str) -> None:
    """RAFT's dynamo export at opset 20: GridSample 16 is the same op on 4-D inputs, its modes
    spelled bilinear, nearest and bicubic (onnx's converter has no adapter)."""
    original = onnx.parser.parse_model(grid_sample(4, mode))
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(original), 16))
    onnx.checker.check_model(converted, full_check=True)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 2, 5, 5)).astype(np.float32),
             "grid": rng.uniform(-1.1, 1.1, (1, 3, 3, 2)).astype(np.float32)}
    np.testing.assert_allclose(run(converted, feeds), run(original, feeds), rtol=0, atol=1e-6)


def test_grid_sample_20_on_a_volume_stays_above_16() -> None:
    """GridSample 16 takes 4-D inputs only: a 5-D one is not carried down."""
    original = onnx.parser.parse_model(grid_sample(5, "linear"))
    with pytest.raises(OpsetConversionError, match="GridSample"):
        OpsetPass._convert(ir.serde.deserialize_model(original), 20, 16)


def test_split_without_sizes_going_past_18_gets_its_output_count() -> None:
    """Split 18 takes num_outputs where no 'split' input gives the sizes, a rule no formal of its
    schema states: a Split 13 that split evenly was carried up unchanged and ORT refused the model
    ("Neither 'split' input nor 'num_outputs' attribute has been given")."""
    original = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,6] x) => (float[2,2] a, float[2,2] b, float[2,2] c) {
        a, b, c = Split <axis = 1> (x)
    }
    """)
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(original), 21))
    (split,) = converted.graph.node
    assert {a.name: a.i for a in split.attribute} == {"axis": 1, "num_outputs": 3}
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(run(converted, {"x": x}), run(original, {"x": x}))
