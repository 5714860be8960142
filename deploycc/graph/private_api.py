"""The private APIs of onnx-ir and onnxscript that deploycc uses, all here, imported from nowhere else.

A private name can move or change in any release, so each is named once, below, with what deploycc
needs it for. They were read at the versions in READ_AT; tests/graph/test_private_api.py fails when
the installed onnx-ir or onnxscript is another version, so that whoever upgrades reads each entry
again against the new source, then sets READ_AT.

- `call_onnx_api` (onnx_ir.passes.common._c_api_utils.call_onnx_api, read at onnx-ir 1.1.0):
  calls an onnx C API (shape inference) on the model's protobuf without its large initializers
  (over 1000 bytes they travel as typed graph inputs) and puts them back afterwards, whether the
  call succeeded or not. onnx-ir's own ShapeInferencePass works so; deploycc uses it for onnx's
  shape inference on large models (graph/shapes.py; graph/dim_ties.py, on a copy whose input dims
  are renamed) and for ONNX Runtime's symbolic shape
  inference (passes/shape_values.py), so a model's weights are never copied for either.
- `merge_inferred_shapes` (onnx_ir.passes.common.shape_inference._merge_func, read at onnx-ir
  1.1.0): writes the shapes and dtypes of an inferred protobuf model onto the IR model's values,
  graph by graph and value by value by name; returns whether anything changed (graph/shapes.py).
- `MatchResult` (onnxscript.rewriter._basics.MatchResult, read at onnxscript 0.7.2): what a
  rewrite rule's `check` returns: a success until `.fail(reason)` (passes/tidy.py, passes/fuse.py).
  onnxscript 0.7.2 also exports it as `onnxscript.rewriter.MatchResult`; that public name is the
  one to take once the lowest onnxscript deploycc supports has it.

Not here: ONNX Runtime's symbolic shape inference, whose private methods passes/shape_values.py
drives; it is loaded from the installed onnxruntime, which the dev extra pins.

Each name is imported on first use (`from deploycc.graph.private_api import MatchResult`), so
shape inference does not import onnxscript.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnx_ir.passes.common._c_api_utils import call_onnx_api
    from onnx_ir.passes.common.shape_inference import _merge_func as merge_inferred_shapes
    from onnxscript.rewriter._basics import MatchResult

__all__ = ["MatchResult", "call_onnx_api", "merge_inferred_shapes"]

# The distributions, as pip names them, and the versions whose source the entries were read in.
READ_AT = {"onnx-ir": "1.1.0", "onnxscript": "0.7.2"}

# deploycc's name -> (module, name there).
PRIVATE_NAMES = {
    "call_onnx_api": ("onnx_ir.passes.common._c_api_utils", "call_onnx_api"),
    "merge_inferred_shapes": ("onnx_ir.passes.common.shape_inference", "_merge_func"),
    "MatchResult": ("onnxscript.rewriter._basics", "MatchResult"),
}


def __getattr__(name: str) -> Any:
    if name not in PRIVATE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, private_name = PRIVATE_NAMES[name]
    found = getattr(importlib.import_module(module), private_name)
    globals()[name] = found  # imported once
    return found
