"""Node order: a graph whose nodes do not come in an order where each reads only what comes before
it is put in one (ONNX Runtime's float16 converter writes such graphs, and ORT sorts them on load);
and a name that two nodes write is read as the node order says, each reader taking the last
writer before it (torch's dynamo exporter writes such graphs).
"""

from __future__ import annotations

from collections import Counter
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


def rename_redefinitions(graph: onnx.GraphProto) -> list[str]:
    """Give each value that more than one node of a graph writes a name per writer, each reader
    reading the last writer before it in node order and the graph's outputs the last writer;
    returns the names so split. Subgraphs are their own scopes, done alike.

    torch.onnx's dynamo exporter gives a graph output the user's name (`output_names`) even where
    a node already writes a value of that name (an `embedding` output of a CLIP text tower, whose
    token lookup the exporter names `embedding` too: pytorch#158094). ONNX Runtime refuses such a
    model; the exporter's own meaning is the node order's, as the onnx reference evaluator runs it."""
    split = [name for node in graph.node for sub in subgraphs(node) for name in rename_redefinitions(sub)]
    writes = Counter(name for node in graph.node for name in node.output if name)
    twice = {name for name, count in writes.items() if count > 1}
    if not twice:
        return split
    taken = set(writes) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    left = {name: writes[name] for name in twice}
    current: dict[str, str] = {}  # a name written twice -> the name its last writer so far got

    def fresh(name: str) -> str:
        index = 1
        while f"{name}__{index}" in taken:
            index += 1
        taken.add(f"{name}__{index}")
        return f"{name}__{index}"

    for node in graph.node:
        for position, name in enumerate(node.input):
            if name in current:
                node.input[position] = current[name]
        for sub in subgraphs(node):  # outer-scope reads inside the node's subgraphs
            _read_renamed(sub, current)
        for position, name in enumerate(node.output):
            if name not in left:
                continue
            left[name] -= 1
            if left[name]:
                current[name] = node.output[position] = fresh(name)
            else:
                current.pop(name, None)  # the last writer keeps the name the graph's outputs read
    kept = [value for value in graph.value_info if value.name not in twice]  # whose type: unknown
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return split + sorted(twice)


def _read_renamed(graph: onnx.GraphProto, renamed: dict[str, str]) -> None:
    """Outer-scope reads of a subgraph follow `renamed`, except names the subgraph defines itself."""
    own = {o for n in graph.node for o in n.output} | {v.name for v in graph.input} | \
        {t.name for t in graph.initializer}
    outer = {name: new for name, new in renamed.items() if name not in own}
    if not outer:
        return
    for node in graph.node:
        for position, name in enumerate(node.input):
            if name in outer:
                node.input[position] = outer[name]
        for sub in subgraphs(node):
            _read_renamed(sub, outer)
    for value in graph.output:
        if value.name in outer:
            value.name = outer[value.name]
