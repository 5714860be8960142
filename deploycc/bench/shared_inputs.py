"""The input sizes two subjects both accept, for `bench --compare-to`.

The two are timed interleaved on the same arrays, so a dim that one of them fixes (a build made
with `--batch 1`) has that size for both, even where the other leaves it symbolic. A symbolic
dim fixed this way fixes its name everywhere in that model (a batch shared by several inputs).
Two different fixed sizes, or different input names or types, leave no input to compare on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.errors import OptionError
from deploycc.graph.graphs import dims_of

if TYPE_CHECKING:
    import onnx_ir as ir

HINT = "bench each one alone, or compare builds made for the same input shapes"


def signature(onnx: Path) -> list[ir.Value]:
    """The inputs a caller feeds: the graph's inputs that are not initializers."""
    from deploycc import io

    graph = io.load(onnx, check=False).model.graph
    return [v for v in graph.inputs if v.name not in graph.initializers]


@dataclass
class _Slot:
    """One dim of one input, as each side declares it: a size, a symbolic name, or None (unknown)."""

    input: str
    index: int
    mine: int | str | None
    theirs: int | str | None


def _declared(value: ir.Value) -> list[int | str | None] | None:
    dims = dims_of(value)
    return None if dims is None else [None if dim == "?" else dim for dim in dims]


def shared_dims(mine: Sequence[ir.Value], theirs: Sequence[ir.Value], my_label: str, their_label: str
                ) -> dict[str, list[int | None]]:
    """Per input, the size each dim must have so that both sides accept it (None: free in both).
    Raises OptionError naming the input and both declarations when no size fits both."""
    other = {v.name or "": v for v in theirs}
    names, other_names = sorted(v.name or "" for v in mine), sorted(other)
    if names != other_names:
        raise OptionError(f"{my_label} takes inputs {names} and {their_label} takes {other_names}; "
                          "there is no input to time both on", hint=HINT)
    slots: list[_Slot] = []
    needed: dict[str, list[int | None]] = {}
    declared: dict[str, tuple[list[int | str | None] | None, list[int | str | None] | None]] = {}
    for value in mine:
        peer = other[value.name or ""]
        if value.dtype is not None and peer.dtype is not None and value.dtype != peer.dtype:
            raise OptionError(f"input '{value.name}' is {value.dtype} in {my_label} and {peer.dtype} in "
                              f"{their_label}; there is no input to time both on", hint=HINT)
        a, b = _declared(value), _declared(peer)
        declared[value.name or ""] = (a, b)
        if a is not None and b is not None and len(a) != len(b):
            raise _disagree(value.name or "", a, b, my_label, their_label)
        known = a if a is not None else b
        if known is None:
            continue  # rank unknown on both sides: the inputs' own drawing decides (or refuses)
        needed[value.name or ""] = [None] * len(known)
        slots += [_Slot(value.name or "", i, a[i] if a else None, b[i] if b else None)
                  for i in range(len(known))]

    # A size found for a slot binds the slot's symbolic names on each side; repeat until nothing new.
    bound: tuple[dict[str, int], dict[str, int]] = ({}, {})
    changed = True
    while changed:
        changed = False
        for slot in slots:
            sizes = set()
            for side, dim in enumerate((slot.mine, slot.theirs)):
                if isinstance(dim, int):
                    sizes.add(dim)
                elif isinstance(dim, str) and dim in bound[side]:
                    sizes.add(bound[side][dim])
            if len(sizes) > 1:
                a, b = declared[slot.input]
                raise _disagree(slot.input, a, b, my_label, their_label, slot.index, sorted(sizes))
            if not sizes:
                continue
            size = sizes.pop()
            if needed[slot.input][slot.index] is None:
                needed[slot.input][slot.index], changed = size, True
            for side, dim in enumerate((slot.mine, slot.theirs)):
                if isinstance(dim, str) and dim not in bound[side]:
                    bound[side][dim], changed = size, True
    return needed


def _disagree(name: str, a: list[int | str | None] | None, b: list[int | str | None] | None,
              my_label: str, their_label: str, index: int | None = None,
              sizes: list[int] | None = None) -> OptionError:
    shown = [["?" if d is None else d for d in dims] if dims is not None else "unknown" for dims in (a, b)]
    direct = index is None or (a is not None and b is not None
                               and isinstance(a[index], int) and isinstance(b[index], int))
    why = "" if direct else f" (dim {index} would have to be {' and '.join(map(str, sizes or []))})"
    return OptionError(f"input '{name}' has dims {shown[0]} in {my_label} and {shown[1]} in {their_label}"
                       f"{why}; there is no input to time both on", hint=HINT)
