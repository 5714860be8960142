"""The predicates a target file may name: what each means and which arguments it takes.

A target file restricts an op with named conditions (`predicates = [{ name = "input_is_constant",
input = "axes" }]`) and cannot add code. The names are declared here, in the targets' layer, so
that loading a target checks each reference without reaching up into legality; legality
implements each name (legality/predicates.py), and refuses at import to implement one that is not
declared here or to leave one declared here without an implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PredicateSignature:
    name: str
    summary: str
    params: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()


def _declare(name: str, summary: str, params: tuple[str, ...] = (),
             required: tuple[str, ...] = ()) -> tuple[str, PredicateSignature]:
    return name, PredicateSignature(name, summary, frozenset(params), frozenset(required))


PREDICATES: dict[str, PredicateSignature] = dict([
    _declare("input_is_constant", "the given input is an initializer or Constant", ("input",), ("input",)),
    _declare("input_is_zero", "the given input is absent or a constant of zeros", ("input",), ("input",)),
    _declare("spatial_rank_in", "input 0 has this many spatial dims (rank - 2)", ("ranks",), ("ranks",)),
    _declare("input_rank_in", "the given input has one of these ranks", ("input", "ranks"), ("ranks",)),
    _declare("output_unused", "the given output is not consumed", ("output",), ("output",)),
    _declare("static_input_shapes", "every input has a fully static shape"),
    _declare("einsum_no_ellipsis_or_diagonal", "Einsum without '...' or repeated subscripts"),
    _declare("attribute_in", "a string attribute takes one of the listed values",
             ("attribute", "values", "default"), ("attribute", "values")),
    _declare("input_dtype_in", "the given input has one of these element types", ("input", "dtypes"),
             ("dtypes",)),
    _declare("saturating_cast_not_to", "a saturating Cast/CastLike does not produce these types",
             ("dtypes",), ("dtypes",)),
    _declare("empty_constant_not_an_output",
             "a Constant with no element is not its graph's output (itself or through Identity)"),
    _declare("float_mod_is_fmod", "Mod on floating-point inputs sets fmod=1"),
    _declare("reduction_rank_is_static",
             "a reduction with keepdims=0 takes constant axes, or a single one computed at run time"),
    _declare("not_spatial_scale_into_conv",
             "a Mul/Div by a constant that varies over spatial positions is not read by a Conv alone"),
])


def validate(name: str, args: dict[str, Any]) -> str | None:
    """Why a predicate reference from a target file is invalid, or None if it is fine."""
    if name not in PREDICATES:
        return f"unknown predicate {name!r} (known: {', '.join(sorted(PREDICATES))})"
    signature = PREDICATES[name]
    unknown = set(args) - signature.params
    if unknown:
        return f"predicate {name!r} takes no argument {sorted(unknown)[0]!r}"
    missing = signature.required - set(args)
    if missing:
        return f"predicate {name!r} needs argument {sorted(missing)[0]!r}"
    return None
