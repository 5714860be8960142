"""Node order: a graph whose nodes do not come in an order where each reads only what comes before
it is put in one (ONNX Runtime's float16 converter writes such graphs, and ORT sorts them on load).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _names_read(node: onnx.NodeProto) -> set[str]:
    """What a node reads: its inputs and, through its subgraphs, any outer-scope value."""
    names = {name for name in node.input if name}
    for sub in subgraphs(node):
        inner = {o for n in sub.node for o in n.output} | {v.name for v in sub.input} | \
            {t.name for t in sub.initializer}
        for child in sub.node:
            names |= _names_read(child) - inner
    return names


def sort_topologically(graph: onnx.GraphProto) -> int:
    """Put the nodes of a graph (and its subgraphs) in an order where each reads only what comes
    before it, keeping the given order wherever it already works; returns the nodes moved.

    ONNX Runtime's float16 converter leaves graphs unsorted and ORT sorts them on load, so such a
    model is valid input. A cycle is left as it is, for the checker to name."""
    import heapq

    moved = sum(sort_topologically(sub) for node in graph.node for sub in subgraphs(node))
    nodes = list(graph.node)
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    waits_on = [{producer[name] for name in _names_read(node) if name in producer} - {index}
                for index, node in enumerate(nodes)]
    if all(all(p < index for p in deps) for index, deps in enumerate(waits_on)):
        return moved
    readers: dict[int, list[int]] = {}
    for index, deps in enumerate(waits_on):
        for dep in deps:
            readers.setdefault(dep, []).append(index)
    pending = [len(deps) for deps in waits_on]
    ready = [index for index, count in enumerate(pending) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for reader in readers.get(index, []):
            pending[reader] -= 1
            if pending[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) != len(nodes):
        return moved  # a cycle: not ours to fix
    del graph.node[:]
    graph.node.extend(nodes[index] for index in order)
    return moved + sum(1 for position, index in enumerate(order) if position != index)

