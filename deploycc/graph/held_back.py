"""Nodes hidden from a tool that would mishandle them: moved into a private domain while it runs
(onnx's version converter, onnxscript's constant folder), since both pass over ops they do not
know, and put back after."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir

HOLD_DOMAIN = "deploycc.hold"


@contextmanager
def held_back(model: ir.Model, nodes: Sequence[ir.Node]) -> Iterator[None]:
    """`nodes` moved into a private domain while a tool that would mishandle them runs (onnx's
    converter, onnxscript's folder): it passes over ops it does not know. Restored after."""
    domains = [node.domain for node in nodes]
    for node in nodes:
        node.domain = HOLD_DOMAIN
    model.opset_imports[HOLD_DOMAIN] = 1
    try:
        yield
    finally:
        model.opset_imports.pop(HOLD_DOMAIN, None)
        for node, domain in zip(nodes, domains, strict=True):
            node.domain = domain
