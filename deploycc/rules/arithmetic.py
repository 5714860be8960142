"""Elementary ops some targets lack, in terms of ones they have.

- Reciprocal(x) = 1 / x (TensorRT 8.2's parser has Div but not Reciprocal)
- Sum(a, b, ...) = a + b + ... ; Mean(a, b, ...) = (a + b + ...) / n (broadcasting Adds)
- Mod(x, y) with Python's sign rule on floats, from the C fmod and one correction
- CumProd along a static axis, unrolled as the running product numpy computes
- ReduceProd of a short 1-D tensor (a product of dims) as a chain of Muls
- Equal on numbers as LessOrEqual and GreaterOrEqual
- Det of 2x2 and 3x3 matrices by cofactor expansion
- BitShift on signed integers (opset 28) by multiplication and floor division in int64
- Mul/Div by a per-position constant before a Conv, over the positions flattened (OpenVINO folds
  the plain form into the Conv's weights)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir


@register
class ReciprocalRule(Rule):
    """Reciprocal: 1 / x."""

    name = "reciprocal"
    family = "arithmetic"
    op_type = "Reciprocal"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Div", b.scalar_like(1.0, site.dtype(0)), site.inputs[0])]


@register
class XorRule(Rule):
    """Xor(a, b) = And(Or(a, b), Not(And(a, b))): TensorRT 8.2 has And, Or and Not on booleans,
    not Xor (torchvision's detectors write one to pick the boxes of the other image size)."""

    name = "xor"
    family = "arithmetic"
    op_type = "Xor"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        a, other = site.inputs[0], site.inputs[1]
        return [b.op("And", b.op("Or", a, other), b.op("Not", b.op("And", a, other)))]


def _chain(b: Builder, values: Sequence[ir.Value | None]) -> ir.Value:
    total = values[0]
    for value in values[1:]:
        total = b.op("Add", total, value)
    assert total is not None
    return total if len(values) > 1 else b.op("Identity", total)


@register
class SumRule(Rule):
    """Sum(x1..xn): x1 + x2 + ... + xn with broadcasting Adds."""

    name = "sum"
    family = "arithmetic"
    op_type = "Sum"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [_chain(b, site.inputs)]


@register
class MeanRule(Rule):
    """Mean(x1..xn): (x1 + ... + xn) / n."""

    name = "mean"
    family = "arithmetic"
    op_type = "Mean"

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        total = _chain(b, site.inputs)
        return [b.op("Div", total, b.scalar_like(float(len(site.inputs)), site.dtype(0)))]


@register
class PythonModRule(Rule):
    """Mod(x, y, fmod=0) on floats: r = fmod(x, y); r + y where r != 0 and sign(r) != sign(y), else r.

    fmod(x, +-inf) = x for finite x is spelled out: OpenVINO's fmod gives NaN there.
    """

    name = "python-mod"
    family = "arithmetic"
    op_type = "Mod"
    since = 10

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if dtype is None or not dtype.is_floating_point():
            return "integer Mod needs no rewrite"
        if int(site.attr("fmod", 0)) == 1:
            return "fmod=1 is already the C remainder"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, y = site.input(0), site.input(1)
        by_infinity = b.op("And", b.op("IsInf", y), b.op("Not", b.op("IsInf", x)))
        remainder = b.op("Where", by_infinity, x, b.op("Mod", x, y, fmod=1))
        zero = b.scalar_like(0.0, site.dtype(0))
        signs_differ = b.op("Xor", b.op("Less", remainder, zero), b.op("Less", y, zero))
        fix = b.op("And", b.op("Not", b.op("Equal", remainder, zero)), signs_differ)
        return [b.op("Where", fix, b.op("Add", remainder, y), remainder)]


@register
class IntegerModRule(Rule):
    """Mod(x, y) on integers: r = x - y * (x / y) with / truncating; fmod=0 (Python's sign rule)
    adds y where r * y < 0 (r and y of opposite signs). For targets without Mod (TensorRT 8.2: Swin's
    window padding computes sizes with it)."""

    name = "integer-mod"
    family = "arithmetic"
    op_type = "Mod"
    since = 10

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if dtype is None or dtype.is_floating_point():
            return "float Mod is python-mod's"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x, y = site.input(0), site.input(1)
        remainder = b.op("Sub", x, b.op("Mul", y, b.op("Div", x, y)))
        if int(site.attr("fmod", 0)) == 1:
            return [remainder]
        # r and y of opposite signs (r != 0): their product is negative; |r| < |y| keeps it in range.
        fix = b.op("Less", b.op("Mul", remainder, y), b.scalar_like(0, site.dtype(0)))
        return [b.op("Where", fix, b.op("Add", remainder, y), remainder)]

    def proof_values(self, site: Site, seed: int) -> dict[int, np.ndarray]:
        """Divisors without 0 (x mod 0 is undefined), of both signs."""
        import numpy as np

        shape = site.shape(1)
        if site.constant(1) is not None or shape is None or any(d is None for d in shape):
            return {}
        dtype = site.dtype(1)
        dims = [int(d) for d in shape if d is not None]
        rng = np.random.default_rng(seed)
        magnitudes = rng.integers(1, 9, size=dims)
        signs = rng.choice([-1, 1], size=dims) if dtype is not None and dtype.numpy().kind == "i" else 1
        return {1: np.asarray(magnitudes * signs, dtype=dtype.numpy() if dtype is not None else np.int64)}


MAX_UNROLLED = 64


@register
class CumProdRule(Rule):
    """CumProd(x, axis) = Concat(p_0, p_1, ...), p_i = p_(i-1) * x_i: the running product, unrolled.

    exclusive shifts in a 1, reverse runs from the end. A non-constant axis is fine on a rank-1
    input (it can only be 0) and otherwise picks among every axis's product at run time (Where).
    """

    name = "cumprod"
    family = "arithmetic"
    op_type = "CumProd"
    since = 26

    def check(self, site: Site) -> str | None:
        shape = site.shape(0)
        if shape is None or any(d is None for d in shape):
            return "the input shape is not static"
        if not shape:
            return "the input is a scalar"
        axis = site.constant(1)
        axes = [int(axis.reshape(-1)[0]) % len(shape)] if axis is not None else list(range(len(shape)))
        if any(shape[a] > MAX_UNROLLED for a in axes):  # type: ignore[operator]
            return f"the axis is longer than {MAX_UNROLLED}, too many nodes to unroll"
        return None

    def _along(self, site: Site, b: Builder, axis: int) -> ir.Value:
        shape = site.shape(0)
        assert shape is not None
        length = int(shape[axis])  # type: ignore[arg-type]
        x = site.input(0)
        pieces = [b.op("Slice", x, b.ints([i]), b.ints([i + 1]), b.ints([axis])) for i in range(length)]
        order = list(range(length))[::-1] if int(site.attr("reverse", 0)) else list(range(length))
        running: dict[int, ir.Value] = {}
        previous = None
        for i in order:
            previous = pieces[i] if previous is None else b.op("Mul", previous, pieces[i])
            running[i] = previous
        if int(site.attr("exclusive", 0)):
            one = b.op("Expand", b.scalar_like(1, site.dtype(0)), b.op("Shape", pieces[0]))
            shifted = {order[0]: one}
            shifted.update({order[k]: running[order[k - 1]] for k in range(1, length)})
            running = shifted
        return b.op("Concat", *[running[i] for i in range(length)], axis=axis)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        shape = site.shape(0)
        assert shape is not None
        rank = len(shape)
        axis = site.constant(1)
        if axis is not None or rank == 1:
            return [self._along(site, b, int(axis.reshape(-1)[0]) % rank if axis is not None else 0)]
        # the axis arrives at run time: compute along each, keep the one asked for
        asked = b.op("Mod", b.op("Add", b.op("Cast", b.op("Reshape", site.input(1), b.ints([])), to=7),
                                 b.ints([rank])), b.ints([rank]))
        result = self._along(site, b, rank - 1)
        for candidate in range(rank - 2, -1, -1):
            chosen = b.op("Equal", asked, b.ints([candidate]))
            result = b.op("Where", chosen, self._along(site, b, candidate), result)
        return [result]


@register
class ReduceProdUnrolledRule(Rule):
    """ReduceProd of a 1-D tensor of static length n = x_0 * x_1 * ... * x_(n-1), unrolled into
    Muls of one-element Slices. Exporters multiply selected dims of a Shape this way (the element
    count of a flatten); ONNX Runtime's CUDA EP has no int64 ReduceProd and has int64 Mul, so the
    shape arithmetic stays on the GPU. (Past int64 the two differ: ORT's kernel saturates, Mul
    wraps; no tensor has that many elements.)"""

    name = "reduce-prod-unrolled"
    family = "arithmetic"
    op_type = "ReduceProd"

    def _axes(self, site: Site) -> list[int] | None:
        if site.opset >= 18 and site.has_input(1):
            axes = site.constant(1)
            return None if axes is None else [int(a) for a in axes.reshape(-1)]
        return [int(a) for a in site.attr("axes", [])]

    def check(self, site: Site) -> str | None:
        shape = site.shape(0)
        if shape is None or len(shape) != 1 or shape[0] is None:
            return "the input is not 1-D of static length"
        if not 1 <= int(shape[0]) <= MAX_UNROLLED:
            return f"the length is not between 1 and {MAX_UNROLLED}"
        axes = self._axes(site)
        if axes is None:
            return "the axes arrive at run time"
        if not axes and int(site.attr("noop_with_empty_axes", 0)):
            return "no axes with noop_with_empty_axes: nothing is reduced"
        if any(a not in (0, -1) for a in axes):
            return "an axis out of range"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        shape = site.shape(0)
        assert shape is not None and shape[0] is not None
        length, x = int(shape[0]), site.input(0)
        total = b.op("Slice", x, b.ints([0]), b.ints([1]))
        for i in range(1, length):
            total = b.op("Mul", total, b.op("Slice", x, b.ints([i]), b.ints([i + 1])))
        return [total if int(site.attr("keepdims", 1)) else b.op("Reshape", total, b.ints([]))]


@register
class EqualByOrderRule(Rule):
    """Equal(a, b) on numbers = a <= b and a >= b: NaN is neither (false, as Equal says), -0 and +0
    are both. ORT's CUDA EP registers Equal up to version 13 and not 19 (which added strings), so a
    model of opset 19 or newer leaves every Equal on the CPU (scikit-learn's Normalizer)."""

    name = "equal-by-order"
    family = "arithmetic"
    op_type = "Equal"
    # Equal-19's version gap only: where an older Equal is refused for its dtype, the ordered
    # comparisons would be too, and the widening rules are the answer.
    since = 19

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if dtype is None or dtype.name in ("STRING", "BOOL"):
            return "strings and booleans have no order to compare by"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        a, other = site.input(0), site.input(1)
        return [b.op("And", b.op("LessOrEqual", a, other), b.op("GreaterOrEqual", a, other))]


@register
class DeterminantRule(Rule):
    """Det of 2x2: ad - bc; of 3x3: a(ei - fh) - b(di - fg) + c(dh - eg), over any leading batch dims."""

    name = "determinant"
    family = "arithmetic"
    op_type = "Det"
    since = 11

    def check(self, site: Site) -> str | None:
        shape = site.shape(0)
        if shape is None or len(shape) < 2 or shape[-1] != shape[-2] or shape[-1] not in (2, 3):
            return "only static 2x2 and 3x3 matrices are expanded"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        shape = site.shape(0)
        assert shape is not None
        n = int(shape[-1])  # type: ignore[arg-type]
        x = site.input(0)
        rank = len(shape)

        def entry(row: int, column: int) -> ir.Value:
            matrix_axes = [rank - 2, rank - 1]
            starts, ends = b.ints([row, column]), b.ints([row + 1, column + 1])
            picked = b.op("Slice", x, starts, ends, b.ints(matrix_axes))
            return b.squeeze(picked, matrix_axes)

        def minor(r0: int, r1: int, c0: int, c1: int) -> ir.Value:
            return b.op("Sub", b.op("Mul", entry(r0, c0), entry(r1, c1)),
                        b.op("Mul", entry(r0, c1), entry(r1, c0)))

        if n == 2:
            return [minor(0, 1, 0, 1)]
        terms = [b.op("Mul", entry(0, 0), minor(1, 2, 1, 2)), b.op("Mul", entry(0, 1), minor(1, 2, 0, 2)),
                 b.op("Mul", entry(0, 2), minor(1, 2, 0, 1))]
        return [b.op("Add", b.op("Sub", terms[0], terms[1]), terms[2])]


SIGNED_WIDTHS = {"INT8": 8, "INT16": 16, "INT32": 32}


@register
class SignedBitShiftRule(Rule):
    """BitShift on signed T (w bits) in int32: RIGHT = floor(x / 2^y), LEFT = x * 2^y wrapped to w bits;
    y < 0 or y >= w gives the sign fill alone (-1 for RIGHT of a negative x, else 0).

    Every constant stays within int32 (OpenVINO computes int64 as int32): a right shift by w-1 is
    the sign fill too, and a 32-bit left shift multiplies twice by at most 2^30, wrapping.
    """

    name = "signed-bitshift"
    family = "arithmetic"
    op_type = "BitShift"
    since = 28

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if dtype is None or dtype.name not in SIGNED_WIDTHS:
            return "only int8/int16/int32 shifts are rewritten (unsigned ones are plain shifts)"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import numpy as np

        dtype = site.dtype(0)
        assert dtype is not None
        width = SIGNED_WIDTHS[dtype.name]
        int32 = 6

        def const(value: int) -> ir.Value:
            return b.const(np.array([value], np.int32))

        def power_of_two(exponent: ir.Value) -> ir.Value:  # 2^k, exact in float32 for k < 32
            raised = b.op("Pow", b.const(np.array(2.0, np.float32)), b.op("Cast", exponent, to=1))
            return b.op("Cast", raised, to=int32)

        x = b.op("Cast", site.input(0), to=int32)
        shift = b.op("Cast", site.input(1), to=int32)
        zero = const(0)
        right = site.attr("direction") == "RIGHT"
        limit = width - 1 if right else width  # a right shift by w-1 is the sign fill already
        outside = b.op("Or", b.op("Less", shift, zero), b.op("GreaterOrEqual", shift, const(limit)))
        exponent = b.op("Where", outside, zero, shift)
        if right:
            power = power_of_two(exponent)
            quotient = b.op("Div", x, power)  # truncated or floored by the backend: corrected below
            remainder = b.op("Sub", x, b.op("Mul", quotient, power))
            floored = b.op("Sub", quotient, b.op("Cast", b.op("Less", remainder, zero), to=int32))
            fill = b.op("Where", b.op("Less", x, zero), const(-1), zero)
            result = b.op("Where", outside, fill, floored)
        elif width == 32:
            first = b.op("Min", exponent, const(30))
            product = b.op("Mul", b.op("Mul", x, power_of_two(first)),
                           power_of_two(b.op("Sub", exponent, first)))  # int32 multiplication wraps
            result = b.op("Where", outside, zero, product)
        else:
            half = const(1 << (width - 1))
            shifted = b.op("Mul", x, power_of_two(exponent))  # < 2^(2w) fits int32 for w <= 16
            wrapped = b.op("Sub", b.op("Mod", b.op("Add", shifted, half), const(1 << width)), half)
            result = b.op("Where", outside, zero, wrapped)
        return [b.op("Cast", result, to=int(dtype))]


class _SpatialScaleFlattened(Rule):
    """x * c (or x / c) with c varying over the spatial axes of NC... data, done on x's spatial axes
    flattened into one: Reshape(Reshape(x, [0, 0, -1, 1]) * c', Shape(x)), c' the same values
    broadcast to x's positions and laid out alike (and Shape(x) widened where c broadcasts x's batch
    or channels). Equal element for element; the Reshapes keep
    OpenVINO's MultiplyConvolutionFusion from folding c into the next Conv's weights as if it were
    per channel (predicate not_spatial_scale_into_conv)."""

    family = "arithmetic"

    def check(self, site: Site) -> str | None:
        from deploycc.legality.predicates import spatial_scale_into_conv

        dtype = site.dtype(0)
        if dtype is None or not dtype.is_floating_point():
            return "only floating-point scales are folded into a Conv"
        if spatial_scale_into_conv(site.node) is None:
            return "not a per-position constant scale read by a Conv alone"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import numpy as np

        from deploycc.legality.predicates import spatial_scale
        from deploycc.rules.base import Decline

        scaled = spatial_scale(site.node)
        if scaled is None:
            raise Decline("not a per-position constant scale")
        data_index, aligned = scaled
        shape = site.shape(data_index)
        if shape is None:
            raise Decline("the scaled tensor's rank is not known")
        positions = []  # the spatial dims of the product, which the scale's flat form must cover
        for axis in range(2, len(shape)):
            dim, known = int(aligned.shape[axis]), shape[axis]
            if dim != 1 and known is not None and known != dim:
                raise Decline(f"the scale broadcasts the tensor on axis {axis}")
            if dim == 1 and known is None:
                raise Decline(f"the scale is spread over axis {axis}, whose size is not static")
            positions.append(dim if dim != 1 else int(known))  # type: ignore[arg-type]
        full = np.broadcast_to(aligned, aligned.shape[:2] + tuple(positions))
        scale = b.const(np.ascontiguousarray(full.reshape(full.shape[0], full.shape[1], -1, 1)))
        flat = b.op("Reshape", site.input(data_index), b.ints([0, 0, -1, 1]))
        operands = (flat, scale) if data_index == 0 else (scale, flat)
        product = b.op(site.op_type, *operands)
        shape_of = b.op("Shape", site.input(data_index))
        if any(int(dim) != 1 for dim in aligned.shape[:2]):
            if b.opset < 12:
                raise Decline("Max on int64 (the product's shape) needs opset 12")
            # the product's shape: x's, widened where the scale broadcasts it on batch or channels
            shape_of = b.op("Max", shape_of, b.ints(aligned.shape))
        return [b.op("Reshape", product, shape_of)]


@register
class SpatialScaleMulRule(_SpatialScaleFlattened):
    """Mul(x, c), c per position, before a Conv -> Reshape(Reshape(x, [0, 0, -1, 1]) * c', Shape(x))."""

    name = "spatial-scale-mul"
    op_type = "Mul"
    since = 7  # multidirectional broadcasting


@register
class SpatialScaleDivRule(_SpatialScaleFlattened):
    """Div(x, c), c per position, before a Conv -> Reshape(Reshape(x, [0, 0, -1, 1]) / c', Shape(x))."""

    name = "spatial-scale-div"
    op_type = "Div"
    since = 7
