"""The legalization passes, one module each, in the order the pipeline runs them.

`PIPELINE` is the one list of them: `default_passes()` and `PASS_NAMES` (what `--disable-pass`
and `--only-pass` accept) derive from it. A new pass is a module with a `Pass` subclass
(`passes/base.py`) and one line here.
"""

from __future__ import annotations

from deploycc.passes.axes import AxesPass
from deploycc.passes.base import Pass
from deploycc.passes.fold import BodyFoldPass, FoldPass, RefoldPass
from deploycc.passes.fuse import FusePass
from deploycc.passes.legalize import LegalizePass
from deploycc.passes.map_outputs import MapOutputsPass
from deploycc.passes.opset import OpsetPass
from deploycc.passes.prune import PrunePass
from deploycc.passes.simplify import SimplifyPass
from deploycc.passes.tidy import TidyPass

PIPELINE: tuple[type[Pass], ...] = (OpsetPass, AxesPass, MapOutputsPass, FoldPass, TidyPass, RefoldPass,
                                    SimplifyPass, PrunePass, FusePass, LegalizePass, BodyFoldPass)
PASS_NAMES = tuple(kind.name for kind in PIPELINE)


def default_passes() -> list[Pass]:
    return [kind() for kind in PIPELINE]
