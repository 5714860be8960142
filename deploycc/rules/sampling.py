"""Ops that move pixels by position, written out for parsers that lack them.

GridSample (opset 16): TensorRT 8.2 on the Nano reads opsets up to 13, and RAFT's correlation
lookup, spatial transformers and deformable heads sample with it (TensorRT issues #2005, #4666).

Bilinear sampling at a point is the four pixels around it weighted by the distances: with
x = unnormalized grid x, x0 = floor(x), wx1 = x - x0, wx0 = 1 - wx1 (and y alike),

    out = sum over a, b in {0, 1} of  X[y_b, x_a] * wx_a * wy_b * inside(x_a, y_b)

where inside() is 0 for a pixel off the image (padding 'zeros') and 1 otherwise ('border' clamps
the point into the image first, so every corner it reads is inside). Each X[y, x] is a
GatherElements on the image flattened to H*W at index y*W + x.

Col2Im (opset 18; torch's F.fold, VOLO's outlook attention in a dynamo export): no TensorRT or
OpenVINO release parses it. Folding sums each column's kh x kw block back onto the image at its
place, which is a transposed convolution, one group per channel, whose kernel for the block's
element (i, j) is 1 at (i, j) and 0 elsewhere:

    Col2Im(x, [H, W], [kh, kw]) = ConvTranspose(Reshape(x, [N, C*kh*kw, oh, ow]), ones at each
                                  element's own tap, group=C, the same strides, dilations, pads)

with oh, ow the number of blocks along each axis, and output_padding where the pads and strides
leave a remainder short of H or W.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

EXACT_INDEX = 1 << 24  # flat indices are computed in float32, exact below this


@register
class GridSampleGatheredRule(Rule):
    """GridSample bilinear (zeros or border padding, either align_corners) on a 4-D image = four
    GatherElements of the flattened image, weighted (module docstring)."""

    name = "grid-sample-gathered"
    family = "sampling"
    op_type = "GridSample"
    since = 16

    def check(self, site: Site) -> str | None:
        mode = site.attr("mode", "bilinear")
        if mode not in ("bilinear", "linear"):
            return f"mode {mode!r} is not rewritten (bilinear only)"
        padding = site.attr("padding_mode", "zeros")
        if padding not in ("zeros", "border"):
            return f"padding_mode {padding!r} is not rewritten (zeros and border only)"
        image, grid = site.shape(0), site.shape(1)
        if image is None or grid is None or len(image) != 4 or len(grid) != 4:
            return "only 4-D GridSample is rewritten"
        if any(site.dtype(i) is None or site.dtype(i).name != "FLOAT" for i in (0, 1)):  # type: ignore[union-attr]
            return "only float32 images and grids are rewritten"
        if image[2] is not None and image[3] is not None and image[2] * image[3] >= EXACT_INDEX:
            return "the image has too many pixels for exact float32 indices"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        image, grid = site.input(0), site.input(1)
        assert image is not None and grid is not None
        aligned = bool(site.attr("align_corners", 0))
        border = site.attr("padding_mode", "zeros") == "border"
        # Every dim may be dynamic (RAFT's correlation pyramid has no static shape until the shape
        # policy fixes its inputs): shapes are read at run time, and fold where they are static.
        image_dims, grid_dims = b.op("Shape", image), b.op("Shape", grid)

        def dims(source: ir.Value, start: int, end: int) -> ir.Value:
            return b.op("Slice", source, b.ints([start]), b.ints([end]), b.ints([0]))

        def f(value: float) -> ir.Value:
            return b.const(np.array(value, np.float32))

        def length(axis: int) -> ir.Value:
            return b.op("Cast", b.squeeze(dims(image_dims, axis, axis + 1), [0]), to=1)  # FLOAT

        out_shape = b.op("Concat", dims(image_dims, 0, 2), dims(grid_dims, 1, 3), axis=0)
        across_channels = b.op("Concat", b.ints([1]), dims(image_dims, 1, 2), b.ints([1]), axis=0)
        flat = b.op("Reshape", image, b.ints([0, 0, -1]))
        width, height = length(3), length(2)
        corners = []
        for axis, size in ((0, width), (1, height)):  # the grid's x reads the width
            last = b.op("Sub", size, f(1.0))
            shifted = b.op("Add", b.op("Gather", grid, b.const(np.array(axis, np.int64)), axis=3), f(1.0))
            # align_corners: -1 and 1 are the centers of the end pixels, else their outer edges
            at = b.op("Mul", shifted, b.op("Div", last, f(2.0))) if aligned else \
                b.op("Sub", b.op("Mul", shifted, b.op("Div", size, f(2.0))), f(0.5))
            if border:
                at = b.op("Clip", at, f(0.0), last)
            low = b.op("Floor", at)
            high_weight = b.op("Sub", at, low)
            corners.append([(low, b.op("Sub", f(1.0), high_weight), last),
                            (b.op("Add", low, f(1.0)), high_weight, last)])
        total = None
        for x, x_weight, x_last in corners[0]:
            for y, y_weight, y_last in corners[1]:
                weight = b.op("Mul", x_weight, y_weight)
                x_in, y_in = b.op("Clip", x, f(0.0), x_last), b.op("Clip", y, f(0.0), y_last)
                if not border:  # 1 where the corner is on the image, 0 off it (integers: |d| >= 1)
                    off = b.op("Add", b.op("Abs", b.op("Sub", x, x_in)), b.op("Abs", b.op("Sub", y, y_in)))
                    weight = b.op("Mul", weight, b.op("Relu", b.op("Sub", f(1.0), off)))
                index = b.op("Cast", b.op("Add", b.op("Mul", y_in, width), x_in), to=6)  # INT32
                index = b.op("Expand", b.op("Reshape", index, b.ints([0, 1, -1])), across_channels)
                picked = b.op("Reshape", b.op("GatherElements", flat, index, axis=2), out_shape)
                term = b.op("Mul", picked, b.unsqueeze(weight, [1]))
                total = term if total is None else b.op("Add", total, term)
        assert total is not None
        return [total]

    def proof_values(self, site: Site, seed: int) -> dict[int, np.ndarray]:
        """Grid points over the image and a little beyond it, on both sides."""
        grid = site.shape(1)
        if grid is None or any(d is None for d in grid):  # the proof's copies have static shapes
            return {}
        rng = np.random.default_rng(seed)
        return {1: rng.uniform(-1.2, 1.2, size=[int(d) for d in grid]).astype(np.float32)}  # type: ignore[arg-type]


@register
class Col2ImAsConvTransposeRule(Rule):
    """Col2Im (2-D, constant image and block shapes, static channels) = a grouped ConvTranspose
    with one-hot kernels (module docstring)."""

    name = "col2im-conv-transpose"
    family = "sampling"
    op_type = "Col2Im"
    since = 18

    def _geometry(self, site: Site) -> tuple[list[int], list[int], list[int], list[int], list[int]] | str:
        """(image, block, strides, dilations, pads) or why not."""
        image, block = site.constant(1), site.constant(2)
        if image is None or block is None:
            return "the image or block shape is not constant"
        image_dims, block_dims = [int(v) for v in np.ravel(image)], [int(v) for v in np.ravel(block)]
        if len(image_dims) != 2 or len(block_dims) != 2:
            return "only 2-D Col2Im is rewritten"
        strides = [int(v) for v in site.attr("strides", [1, 1])]
        dilations = [int(v) for v in site.attr("dilations", [1, 1])]
        pads = [int(v) for v in site.attr("pads", [0, 0, 0, 0])]
        return image_dims, block_dims, strides, dilations, pads

    def check(self, site: Site) -> str | None:
        geometry = self._geometry(site)
        if isinstance(geometry, str):
            return geometry
        shape = site.shape(0)
        _, block, _, _, _ = geometry
        if shape is None or len(shape) != 3 or shape[1] is None:
            return "the input's channel dim is not static"
        if shape[1] % (block[0] * block[1]):
            return "the input's channels are not a multiple of the block size"
        dtype = site.dtype(0)
        if dtype is None or not dtype.is_floating_point():
            return "only float inputs are rewritten (ConvTranspose computes in float)"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        geometry = self._geometry(site)
        assert not isinstance(geometry, str)
        (height, width), (kh, kw), strides, dilations, pads = geometry
        taps = kh * kw
        channels = int((site.shape(0) or [0, 0])[1] or 0) // taps
        blocks, extents = [], []
        for axis, (size, length) in enumerate(((height, kh), (width, kw))):
            reach = dilations[axis] * (length - 1) + 1
            count = (size + pads[axis] + pads[axis + 2] - reach) // strides[axis] + 1
            blocks.append(count)
            extents.append((count - 1) * strides[axis] + reach - pads[axis] - pads[axis + 2])
        # in-channel c*taps + t (tap t = i*kw + j of channel c) has a 1 at (i, j) only
        kernel = np.tile(np.eye(taps, dtype=np.float32).reshape(taps, 1, kh, kw), (channels, 1, 1, 1))
        dtype = site.dtype(0)
        weights = b.const(kernel.astype(dtype.numpy() if dtype is not None else np.float32))
        grid = b.op("Reshape", site.input(0), b.ints([0, 0, *blocks]))
        return [b.op("ConvTranspose", grid, weights, group=channels, kernel_shape=[kh, kw], strides=strides,
                     dilations=dilations, pads=pads,
                     output_padding=[height - extents[0], width - extents[1]])]
