"""Inputs for running a model or a rewrite: generated from the signature, or given by the user.

Generated inputs are seeded, so a verification is the same on every run. Symbolic dims take
one size per name (so 'batch' is the same everywhere), integer inputs take ranges that make
sense for what their name says they hold (token ids, masks, indices), and proof inputs mix in
edge values (zeros, signed zeros, negatives, large magnitudes) where rewrites tend to differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploycc import budget
from deploycc.errors import OptionError
from deploycc.graph.graphs import dims_of
from deploycc.records.verification import CONTENTS, MOSAIC, NOISE, PAGE  # named with the record

if TYPE_CHECKING:
    import onnx_ir as ir

SYMBOLIC_DIM_SIZE = 2
CONTENT_DESCRIBED = {MOSAIC: "a mosaic of 16-pixel tiles", PAGE: "a page of dark words on white"}
TILE = 16


def draws(attempts: int) -> list[tuple[int, str]]:
    """(attempt, content) in the order inputs are drawn until the original answers with signal:
    at each set of sizes (attempt), noise, then the pictures (which only an image input takes)."""
    return [(attempt, content) for attempt in range(attempts) for content in CONTENTS]


EDGE_VALUES = (0.0, -0.0, 1.0, -1.0, 6.0, -6.0, 100.0, -100.0, 1000.0, -1000.0)
EDGE_FRACTION = 0.15


def concrete_dims(value: ir.Value, sizes: dict[str, int], default: int = SYMBOLIC_DIM_SIZE
                  ) -> list[int] | None:
    """The value's dims with symbolic ones replaced by a per-name size; None if rank unknown."""
    if value.shape is None:
        return None
    dims = []
    for dim in value.shape:
        if isinstance(dim, int):
            dims.append(dim)
            continue
        name = getattr(dim, "value", None)
        if isinstance(name, str) and name:
            dims.append(sizes.setdefault(name, default))
        else:
            dims.append(default)
    return dims


def _integer_range(name: str, dtype: np.dtype) -> tuple[int, int]:
    lowered = name.lower()
    if "mask" in lowered:
        return 1, 2
    if "type" in lowered or "segment" in lowered:
        return 0, 2
    if dtype == np.uint8 or dtype == np.int8:
        return (0, 128) if dtype == np.uint8 else (-64, 64)
    return 0, 4 if ("index" in lowered or "indices" in lowered) else 64


# Ops an integer value passes through unchanged in meaning (its range still holds after them).
PASS_THROUGH = {"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Tile",
                "Transpose", "Slice", "Concat", "Clip"}
# (op, input index) -> that input holds sizes or counts: small positive values keep them valid.
SIZE_INPUTS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Tile", 1), ("Range", 1),
               ("Range", 0), ("Range", 2), ("TopK", 1), ("Resize", 3), ("Pad", 1), ("Split", 1),
               ("OneHot", 1), ("Upsample", 1), ("Slice", 1), ("Slice", 2), ("Slice", 4)}
# (op, index input, data input, default axis) -> indices into data's axis.
INDEX_INPUTS = {("Gather", 1): (0, 0), ("GatherElements", 1): (0, 0), ("ScatterElements", 1): (0, 0),
                ("GatherND", 1): (0, 0), ("ScatterND", 1): (0, 0)}


def _dim(value: ir.Value | None, axis: int) -> int | None:
    if value is None or value.shape is None or not len(value.shape):
        return None
    dim = value.shape[axis % len(value.shape)]
    return dim if isinstance(dim, int) and dim > 0 else None


def _compared_constant(node: ir.Node, index: int) -> int | None:
    """The integer constant an Equal node compares its other input with (Silero VAD branches on
    `sr == 16000`: a drawn sample rate takes that branch instead of failing every check)."""
    from deploycc.graph.graphs import constant_tensor

    other = node.inputs[1 - index] if len(node.inputs) == 2 and index in (0, 1) else None
    array = constant_tensor(other, max_elements=1)
    if array is None or array.size != 1 or not np.issubdtype(array.dtype, np.integer):
        return None
    return int(array.reshape(-1)[0])


def _range_from_uses(value: ir.Value, depth: int = 0) -> tuple[int, int] | None:
    """What integer values the graph can take in `value`, read from what reads it: indices stay
    below the dim they index (a token id below the vocabulary size), sizes stay small and
    positive. None when nothing says."""
    bound: tuple[int, int] | None = None

    def narrow(low: int, high: int) -> None:
        nonlocal bound
        bound = (low, high) if bound is None else (max(bound[0], low), min(bound[1], high))

    for node, index in value.uses():
        op = node.op_type
        compared = _compared_constant(node, index) if op == "Equal" else None
        if compared is not None and not value.shape:  # a scalar the graph tests against one value
            return compared, compared + 1
        if (op, index) in INDEX_INPUTS:
            data_index, default_axis = INDEX_INPUTS[(op, index)]
            attr = node.attributes.get("axis")
            axis = int(attr.value) if attr is not None else default_axis
            size = _dim(node.inputs[data_index], axis if op not in ("GatherND", "ScatterND") else 0)
            if size is not None:
                narrow(0, size)
        elif (op, index) in SIZE_INPUTS:
            narrow(1, 3)
        elif op in PASS_THROUGH and index == 0 and depth < 4:
            inner = _range_from_uses(node.outputs[0], depth + 1)
            if inner is not None:
                narrow(*inner)
    if bound is not None and bound[1] <= bound[0]:
        return None
    return bound


def random_array(dtype: np.dtype, dims: Sequence[int], rng: np.random.Generator, *,
                 name: str = "", edges: bool = False, int_high: int | None = None,
                 int_range: tuple[int, int] | None = None) -> np.ndarray:
    if dtype == np.bool_:
        return np.asarray(rng.random(dims) < 0.8)  # mostly True: masks leaving most positions visible
    if np.issubdtype(dtype, np.integer):
        low, high = _integer_range(name, dtype)
        if int_range is not None:
            low, high = int_range
        elif not dims and "mask" not in name.lower():  # a scalar count or size: small and positive
            low, high = 1, 4
        if int_high is not None:
            low, high = 0, max(1, int_high)
        return np.asarray(rng.integers(low, high, size=dims), dtype=dtype)
    if np.issubdtype(dtype, np.floating):
        # asarray: a scalar input's draw is a numpy scalar, which takes no assignment; scaled in
        # place, the draw is not copied (inputs of millions of elements, drawn for every proof)
        data = np.asarray(rng.standard_normal(dims), dtype=np.float64)
        if edges:
            data *= 3.0
        if edges and data.size:
            picks = np.asarray(rng.random(dims) < EDGE_FRACTION)
            data[picks] = rng.choice(EDGE_VALUES, size=int(picks.sum()))
        return data.astype(dtype, copy=False)
    raise OptionError(f"cannot generate inputs of type {dtype} for '{name}'",
                      hint="give inputs with --inputs data.npz")


def image_channel_axis(dims: Sequence[int]) -> int | None:
    """The channel axis of an image batch ([N, C, H, W] or [N, H, W, C] with C in 1..4 and
    both sides at least one tile), else None."""
    if len(dims) != 4:
        return None
    for channel, spatial in ((1, (2, 3)), (3, (1, 2))):
        if dims[channel] in (1, 2, 3, 4) and all(dims[axis] >= TILE for axis in spatial):
            return channel
    return None


def picture(dims: Sequence[int], channel_axis: int, content: str, rng: np.random.Generator) -> np.ndarray:
    """An image batch of `content` (MOSAIC or PAGE) at `dims`, float64."""
    batch, channels = dims[0], dims[channel_axis]
    height, width = [dims[axis] for axis in range(1, 4) if axis != channel_axis]
    if content == MOSAIC:
        tiles = rng.standard_normal((batch, channels, -(-height // TILE), -(-width // TILE)))
        planes = np.repeat(np.repeat(tiles, TILE, axis=2), TILE, axis=3)[:, :, :height, :width]
    else:
        page = np.ones((batch, height, width))
        for image in page:
            for top in range(int(rng.integers(2, 8)), height - 4, int(rng.integers(12, 32))):
                left, tall = int(rng.integers(0, 8)), int(rng.integers(3, 11))
                while left < width:
                    wide = int(rng.integers(6, 48))
                    image[top:top + tall, left:left + wide] = 0.0
                    left += wide + int(rng.integers(4, 16))
        planes = np.repeat(page[:, None], channels, axis=1)
    return planes if channel_axis == 1 else np.moveaxis(planes, 1, 3)


# Sizes tried in turn for symbolic dims other than the batch (dim 0) when the model fails on the
# smaller ones (an audio model's convolutions need hundreds of samples; most run at the first),
# as long as the drawn inputs stay below MAX_DRAWN_ELEMENTS in all.
SYMBOLIC_SIZE_LADDER = (SYMBOLIC_DIM_SIZE, 16, 128, 512)
MAX_DRAWN_ELEMENTS = 1 << 26


def generate(values: Sequence[ir.Value], *, seed: int = 0, edges: bool = False,
             sizes: dict[str, int] | None = None, int_high: int | None = None,
             batch: int | None = None, symbolic_size: int = SYMBOLIC_DIM_SIZE,
             shapes: dict[str, list[int]] | None = None,
             ranges_from: Mapping[str, ir.Value] | None = None, content: str = NOISE
             ) -> dict[str, np.ndarray]:
    """Seeded random arrays for the given graph inputs (integers below int_high when given;
    `batch` sets every input's dim 0, which must be dynamic; symbolic dims other than the batch
    take `symbolic_size`, or the size `shapes` gives for that input's dim). An integer input's
    values follow what reads it in `ranges_from` (the original model's inputs, by name) where
    given: a rewrite may have folded the Equal that said which sample rate a model takes. Float
    image inputs hold `content` (CONTENTS) instead of noise where it is not NOISE."""
    rng = np.random.default_rng(seed)
    sizes = {} if sizes is None else sizes
    feeds = {}
    for value in values:
        first = value.shape[0] if value.shape is not None and len(value.shape) else None
        symbolic_batch = first is not None and not isinstance(first, int)
        batch_name = getattr(first, "value", None) if symbolic_batch else None
        if isinstance(batch_name, str) and batch_name:
            sizes.setdefault(batch_name, SYMBOLIC_DIM_SIZE)  # the ladder grows sizes, not the batch
        dims = concrete_dims(value, sizes, default=symbolic_size)
        if dims and symbolic_batch and not batch_name:
            dims[0] = SYMBOLIC_DIM_SIZE
        given = (shapes or {}).get(value.name or "")
        if dims is not None and given is not None and len(given) == len(dims):
            declared = value.shape
            dims = [dim if isinstance(declared[i], int) else int(given[i])  # type: ignore[index]
                    for i, dim in enumerate(dims)]
        if dims is None or value.dtype is None:
            raise OptionError(f"input '{value.name}' has no known shape or type",
                              hint="fix it with --shape or give inputs with --inputs data.npz")
        if batch is not None:
            if not dims or isinstance(value.shape[0], int):  # type: ignore[index]
                raise OptionError(f"--batch needs a dynamic batch; input '{value.name}' has dims "
                                  f"{dims_of(value)}",
                                  hint="build with --dynamic-batch (or legalize without --batch)")
            dims = [batch, *dims[1:]]
        dtype = value.dtype.numpy()
        budget.require(f"drawing input '{value.name}' {dims}", math.prod(dims), dtype.itemsize)
        read = (ranges_from or {}).get(value.name or "", value)
        int_range = _range_from_uses(read) if np.issubdtype(dtype, np.integer) else None
        if int_range is not None:
            info = np.iinfo(dtype)
            int_range = (max(int_range[0], int(info.min)), min(int_range[1], int(info.max) + 1))
        feeds[value.name or ""] = random_array(dtype, dims, rng, name=value.name or "",
                                               edges=edges, int_high=int_high, int_range=int_range)
        channel_axis = image_channel_axis(dims) if np.issubdtype(dtype, np.floating) else None
        if content != NOISE and channel_axis is not None:
            feeds[value.name or ""] = picture(dims, channel_axis, content, rng).astype(dtype)
    budget.note_input_bytes(sum(array.nbytes for array in feeds.values()))
    return feeds


def pictures_possible(feeds: Mapping[str, np.ndarray]) -> bool:
    """Whether any of these inputs is a float image batch that MOSAIC and PAGE would redraw."""
    return any(np.issubdtype(array.dtype, np.floating) and image_channel_axis(array.shape) is not None
               for array in feeds.values())


def load_npz(path: str | Path, expected: Mapping[str, ir.Value] | None = None) -> dict[str, np.ndarray]:
    """User-given arrays from an .npz (numpy.savez: one array per input name), checked against the
    model's input names and dtypes when `expected` is given, all of them when not. A file that is
    no .npz of plain arrays (truncated, a text file, a bare .npy, pickled objects) is one line."""
    import zipfile
    import zlib

    file = Path(path)

    def not_npz(reason: str) -> OptionError:
        return OptionError(f"{file}: not a valid .npz: {reason}",
                           hint="write one with numpy.savez(path, **{input_name: array})")

    budget.require_npz(file)
    try:
        loaded = np.load(file, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, ValueError):  # ValueError: numpy took it for pickled data
        raise not_npz("not a zip archive of arrays: truncated, or another kind of file") from None
    except OSError as error:
        raise OptionError(f"{file}: cannot read: {error.strerror or error}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise not_npz("one bare .npy array, not an archive of named arrays")
    try:
        with loaded as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as error:
        if isinstance(error, ValueError) and "Object arrays" in str(error):  # allow_pickle=False's refusal
            raise not_npz("it holds object (pickled) arrays; only plain arrays are read") from None
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise not_npz(f"damaged: {reason}") from None
    budget.note_input_bytes(sum(array.nbytes for array in arrays.values()))
    if expected is None:
        return arrays
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise OptionError(f"{file}: no array for input(s) {', '.join(missing)}",
                          hint=f"the archive holds {', '.join(sorted(arrays)) or 'nothing'}")
    for name, value in expected.items():
        if value.dtype is not None and arrays[name].dtype != value.dtype.numpy():
            raise OptionError(f"{file}: input '{name}' is {arrays[name].dtype}, the model takes "
                              f"{value.dtype.numpy()}")
    return {name: arrays[name] for name in expected}


ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def generate_for_session(session, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs from an ONNX Runtime session's own input metadata."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    feeds = {}
    for meta in session.get_inputs():
        dims = [d if isinstance(d, int) else sizes.setdefault(str(d), SYMBOLIC_DIM_SIZE) for d in meta.shape]
        dtype = ORT_TYPES.get(meta.type)
        if dtype is None:
            raise OptionError(f"cannot generate inputs of type {meta.type} for '{meta.name}'",
                              hint="give inputs with --inputs data.npz")
        feeds[meta.name] = random_array(np.dtype(dtype), dims, rng, name=meta.name)
    return feeds
