"""The shape profiles an engine is built for (TensorRT's optimization profiles, ONNX Runtime's
TensorRT provider's trt_profile_*_shapes): one per input of the legalized model with a dynamic dim,
from the shape plan's ranges (--shape-range, or the target's profiles) and --dynamic-batch, in the
one spelling the records keep (records.shapes.ShapeProfile)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.errors import DynamicShapeError
from deploycc.records.shapes import ShapeProfile

if TYPE_CHECKING:
    from deploycc.options import BuildOptions


def shape_profiles(model: Path, options: BuildOptions, *, required: bool) -> list[ShapeProfile]:
    """The profiles of `model`'s inputs. `required`: an engine that must have a profile for every
    dynamic input (TensorRT) refuses one the options give no range (DynamicShapeError), and takes
    a range given for an input the model made static; else (the ORT provider, which builds for the
    shapes it meets) such an input stays out."""
    from deploycc import io
    from deploycc.graph.graphs import dims_of

    graph = io.peek(model).model.graph
    profiles = []
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        name, dims = value.name or "", dims_of(value) or []
        dynamic = [axis for axis, dim in enumerate(dims) if not isinstance(dim, int)]
        if not dynamic and not (required and name in options.shape_ranges):
            continue
        if name in options.shape_ranges:
            low, opt, high = options.shape_ranges[name]
            profiles.append(ShapeProfile(name, list(low), list(opt), list(high)))
        elif options.batch_range is not None and dynamic == [0]:
            rest = [int(d) for d in dims[1:]]  # type: ignore[arg-type]
            smallest, typical, largest = options.batch_range
            profiles.append(ShapeProfile(name, [smallest, *rest], [typical, *rest], [largest, *rest]))
        elif required:
            raise DynamicShapeError(
                f"input '{name}' has dynamic dims {dims}: TensorRT needs a profile for them",
                hint="give --dynamic-batch MIN:OPT:MAX (batch only) or --shape-range "
                     "NAME:MINxDIMS:OPTxDIMS:MAXxDIMS")
    return profiles
