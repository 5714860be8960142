"""The "how to load" lines of an artifact: the Python a user writes to run it with the settings the
manifest records (the same ones `bench` and `run` load it with), its inputs' names, dtypes and
dims, and what it returns. A backend gives its own load lines; the feeds are written here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Port:
    """An input or output as the runtime reports it: numpy's dtype name and the dims, a name
    for a dim the runtime leaves open."""

    name: str
    dtype: str
    dims: tuple[int | str, ...]

    @property
    def written(self) -> str:
        return f"{self.dtype} [{', '.join(str(dim) for dim in self.dims)}]"


def feeds_lines(inputs: Sequence[Port]) -> list[str]:
    """`feeds = {...}` with an array of the right dtype and shape per input; an open dim is
    written as 1, with its name in a comment."""
    lines = ["feeds = {"]
    for port in inputs:
        shape = ", ".join(str(dim) if isinstance(dim, int) else "1" for dim in port.dims)
        shape += "," if len(port.dims) == 1 else ""
        open_dims = [str(dim) for dim in port.dims if not isinstance(dim, int)]
        comment = f"  # open: {', '.join(open_dims)}" if open_dims else ""
        dtype = "object" if port.dtype == "object" else f"np.{port.dtype}"  # strings: numpy has no np.object
        lines.append(f"    {port.name!r}: np.zeros(({shape}), {dtype}),{comment}")
    return [*lines, "}"]


def outputs_comment(outputs: Sequence[Port]) -> list[str]:
    return [f"# {port.name}: {port.written}" for port in outputs]
