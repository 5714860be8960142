"""GridSample written out with GatherElements (TensorRT 8.2 reads opsets up to 13; GridSample is 16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from deploycc import api
from deploycc.options import LegalizeOptions
from tests.rules.helpers import declines, rewrite_and_compare

SAMPLE = """
    <ir_version: 10, opset_import: ["" : {opset}]>
    g (float[N,3,H,W] x, float[N,4,6,2] grid) => (float[N,3,4,6] y) {{
        y = GridSample {attributes} (x, grid)
    }}
"""


@pytest.mark.parametrize("attributes", ['<align_corners=0>', '<align_corners=1>', '<padding_mode="border">',
                                        '<padding_mode="border", align_corners=1>'])
def test_grid_sample_bilinear_as_gathers(attributes: str) -> None:
    """Points over the image and off it on every side, with every dim dynamic."""
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 5, 7)).astype(np.float32),
             "grid": rng.uniform(-1.3, 1.3, (2, 4, 6, 2)).astype(np.float32)}
    rewrite_and_compare(SAMPLE.format(opset=16, attributes=attributes), "GridSample", "grid-sample-gathered",
                        feeds=feeds, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("attributes", "reason"), [('<mode="nearest">', "bilinear only"),
                                                    ('<mode="bicubic">', "bilinear only"),
                                                    ('<padding_mode="reflection">', "zeros and border only")])
def test_grid_sample_declines_other_modes(attributes: str, reason: str) -> None:
    declines(SAMPLE.format(opset=16, attributes=attributes), "GridSample", reason)


def test_a_grid_sample_model_goes_down_to_the_nanos_opset(tmp_path: Path) -> None:
    """RAFT's correlation lookup on jetson-nano: opset 16 -> 13 only once GridSample is written out."""
    source, out = tmp_path / "model.onnx", tmp_path / "nano.onnx"
    onnx.save(onnx.parser.parse_model(SAMPLE.format(opset=16, attributes="")), source)
    report = api.legalize(source, "jetson-nano", out, LegalizeOptions(), force=True)
    assert report.success, report.summary
    model = onnx.load(out)
    assert model.opset_import[0].version == 13
    assert "GridSample" not in {node.op_type for node in model.graph.node}



@pytest.mark.parametrize(("height", "width", "kernel", "stride", "pad", "dilation"), [
    (28, 28, 3, 2, 1, 1),  # VOLO's outlook attention
    (7, 9, 2, 1, 0, 1),
    (10, 10, 3, 3, 0, 1),  # a remainder the stride leaves: output_padding
    (11, 12, 3, 2, 1, 2),
])
def test_col2im_as_a_grouped_conv_transpose(height: int, width: int, kernel: int, stride: int, pad: int,
                                             dilation: int) -> None:
    reach = dilation * (kernel - 1) + 1
    blocks = ((height + 2 * pad - reach) // stride + 1) * ((width + 2 * pad - reach) // stride + 1)
    channels = 4 * kernel * kernel
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[N,{channels},{blocks}] x) => (float[N,4,{height},{width}] y)
          <int64[2] image = {{{height}, {width}}}, int64[2] block = {{{kernel}, {kernel}}}> {{
            y = Col2Im <strides=[{stride},{stride}], pads=[{pad},{pad},{pad},{pad}],
                        dilations=[{dilation},{dilation}]> (x, image, block)
        }}
    """, "Col2Im", "col2im-conv-transpose", atol=1e-5, rtol=1e-5)


def test_col2im_declines_a_run_time_image_shape() -> None:
    declines("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[1,36,16] x, int64[2] image) => (float[1,4,?,?] y) <int64[2] block = {3, 3}> {
            y = Col2Im (x, image, block)
        }
    """, "Col2Im", "not constant")
