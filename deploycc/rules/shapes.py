"""Shape ops whose output rank depends on a run-time value, for targets that need a static rank.

- Unsqueeze(x, axes) with axes computed at run time (of static length k): the output rank is
  rank(x) + k all the same, so it is a Reshape to a shape computed from the axes: 1 at each
  inserted position, x's dims in order elsewhere. OpenVINO's CPU plugin refuses the original
  ("Unsqueeze operation with dynamic rank").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir


@register
class UnsqueezeRuntimeAxesRule(Rule):
    """Unsqueeze(x, axes) = Reshape(x, s): s[p] = 1 for p in axes mod R, else x's next dim (R = rank + k)."""

    name = "unsqueeze-runtime-axes"
    family = "shapes"
    op_type = "Unsqueeze"
    since = 13

    def check(self, site: Site) -> str | None:
        if site.constant(1) is not None:
            return "the axes are constant already"
        rank, axes = site.rank(0), site.shape(1)
        if rank is None:
            return "the input rank is unknown"
        if axes is None or len(axes) != 1 or axes[0] is None:
            return "the number of axes is not static"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        import numpy as np

        x, axes = site.input(0), site.input(1)
        count = site.shape(1)[0]  # type: ignore[index]
        out_rank = int(site.rank(0)) + int(count)  # type: ignore[arg-type]
        wrapped = b.op("Mod", b.op("Add", axes, b.ints([out_rank])), b.ints([out_rank]))
        hits = b.op("Equal", b.unsqueeze(wrapped, [1]), b.ints(list(range(out_rank))))  # [k, R]
        inserted = b.reduce("ReduceMax", b.op("Cast", hits, to=7), [0], keepdims=0)  # 1 where inserted
        kept = b.op("Sub", b.ints([1]), inserted)
        source = b.op("Max", b.op("Sub", b.op("CumSum", kept, b.const(np.array(0, np.int64))), b.ints([1])),
                      b.ints([0]))
        dims = b.op("Gather", b.op("Shape", x), source, axis=0)
        shape = b.op("Where", b.op("Cast", inserted, to=9), b.ints([1]), dims)
        return [b.op("Reshape", x, shape)]
