"""Translations the TorchScript exporter has only from a newer opset than the ONNX ops they write
need, registered at the target's lower ceiling while one export runs.

torch registers `aten::scaled_dot_product_attention` at opset 14, for the Trilu of its causal
mask alone; everything else it writes reads the same at opset 13 (Softmax over the last axis,
MatMul, Where). So every attention layer refused the Nano (TensorRT 8.2 reads 13) although it
has a form there. The back-port builds the causal mask from Range and LessOrEqual instead and
hands the rest to torch's own translation. The export is proven against torch like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

# makes the symbolic function (torch is imported only when one is needed)
Factory = Callable[[], Callable[..., Any]]
# symbolic name -> (the opsets the back-port is written for, its factory)
BACKPORTS: dict[str, tuple[range, Factory]] = {}


def backport(name: str, opsets: range) -> Callable[[Factory], Factory]:
    def register(factory: Factory) -> Factory:
        BACKPORTS[name] = (opsets, factory)
        return factory
    return register


@contextlib.contextmanager
def backported(opset: int) -> Iterator[list[str]]:
    """While the block runs, the back-ports written for `opset` are registered at it (the names
    are yielded); they are gone afterwards, so nothing else torch exports sees them."""
    import torch

    registered = []
    try:
        for name, (opsets, factory) in BACKPORTS.items():
            if opset in opsets:
                torch.onnx.register_custom_op_symbolic(name, factory(), opset)
                registered.append(name)
        yield registered
    finally:
        for name in registered:
            torch.onnx.unregister_custom_op_symbolic(name, opset)


@backport("aten::scaled_dot_product_attention", range(13, 14))
def _attention() -> Callable[..., Any]:
    import torch
    from torch.onnx import symbolic_helper, symbolic_opset14

    @symbolic_helper.parse_args("v", "v", "v", "v", "f", "b", "v", "b")
    def attention(g: Any, query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                  is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
        if is_causal:
            attn_mask = _causal_mask(g, query, key)
        return symbolic_opset14.scaled_dot_product_attention(
            g, query, key, value, attn_mask, dropout_p, False, scale, enable_gqa)

    def _causal_mask(g: Any, query: Any, key: Any) -> Any:
        """0 where the key's position is at most the query's, -inf elsewhere: [L, S], torch's
        `ones(L, S).tril()` turned into an additive mask, in the query's type."""
        def length(tensor: Any) -> Any:  # the size of axis -2, a scalar for Range
            return g.op("Gather", g.op("Shape", tensor), g.op("Constant", value_t=torch.tensor(-2)), axis_i=0)

        zero, one = g.op("Constant", value_t=torch.tensor(0)), g.op("Constant", value_t=torch.tensor(1))
        rows = g.op("Range", zero, length(query), one)
        columns = g.op("Range", zero, length(key), one)
        rows = g.op("Unsqueeze", rows, g.op("Constant", value_t=torch.tensor([1])))
        allowed = g.op("LessOrEqual", columns, rows)
        dtype = {"Half": torch.float16, "BFloat16": torch.bfloat16, "Double": torch.float64}.get(
            query.type().scalarType() or "Float", torch.float32)
        return g.op("Where", allowed, g.op("Constant", value_t=torch.tensor([0.0], dtype=dtype)),
                    g.op("Constant", value_t=torch.tensor([-float("inf")], dtype=dtype)))

    return attention
