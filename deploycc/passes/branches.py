"""Branches that cannot run: an If whose one branch fails shape inference once the inputs are
static keeps the other branch.

Silero VAD chooses its 16 kHz or 8 kHz network with an If on the sample rate. Fixed at the 16 kHz
chunk ([1, 576]), the 8 kHz branch squeezes a dim of size 1 its LSTM needs and fails, at run time
(ONNX Runtime: "Input X must have 3 dimensions") and, with static shapes, already when ONNX
Runtime loads the model, so a TensorRT-bound model with fixed shapes could not even be verified.
With those input shapes only the other branch can produce a result, so the If is that branch:
the graph computes the same wherever the original computes anything. The condition input stays
(unread) so the signature does not change, and the report says which branch was kept and why.

Judged per top-level If, on a copy with the branch inlined, by whether ONNX Runtime loads it.
Only for graphs whose inputs are all static (dynamic dims keep inference lenient, and ORT loads
those models), and never on large models, whose copies would cost more than the check is worth.
The copies are protobuf (inline_branch): each is only serialized for ONNX Runtime and thrown
away, so none needs to become an IR model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploycc.taxonomy import Failed

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnx_ir as ir

MAX_WEIGHT_BYTES = 64 << 20
MAX_CANDIDATES = 8


def _loads(model: bytes, feeds: dict[str, np.ndarray]) -> bool | None:
    """Whether ONNX Runtime loads the copy as it loads a model to run it, optimizations on (its
    optimizer's shape propagation is what refuses Silero's 8 kHz branch; onnx's strict inference
    lets it pass); None when ORT crashed, which says nothing about the branch. In a separate
    process: ORT's constant folding segfaults on some graphs."""
    from deploycc.verify.runner import RunError, run_ort_isolated

    try:
        run_ort_isolated(model, feeds, optimize=True, timeout=300)
    except RunError as error:
        return None if error.stage == Failed.CRASH else error.stage == Failed.RUN
    return True


def inline_branch(proto: onnx.ModelProto, index: int, branch_name: str) -> onnx.ModelProto:
    """A copy of the model with the If at top-level position `index` replaced by the nodes of
    one branch (`then_branch` or `else_branch`), its outputs named as the If's."""
    import onnx

    candidate = onnx.ModelProto()
    candidate.CopyFrom(proto)
    graph = candidate.graph
    node = graph.node[index]
    branch = next(a.g for a in node.attribute if a.name == branch_name)
    renames = {out.name: name for out, name in zip(branch.output, node.output, strict=True)}
    produced = {name for inner in branch.node for name in inner.output}
    nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.output[:] = [renames.get(name, name) for name in copy.output]
        copy.input[:] = [renames.get(name, name) for name in copy.input]
        nodes.append(copy)
    for out in branch.output:  # an output passed straight from outer scope or a branch constant
        if out.name not in produced:
            nodes.append(onnx.NodeProto(op_type="Identity", input=[out.name], output=[renames[out.name]]))
    graph.initializer.extend(branch.initializer)
    del graph.node[index]
    for offset, inner in enumerate(nodes):
        graph.node.insert(index + offset, inner)
    return candidate


def keep_runnable_branches(model: ir.Model, judged: set[ir.Node] | None = None) -> list[str]:
    """Set the condition of each top-level If with exactly one branch that cannot run under the
    static input shapes to the other branch (the folder then inlines it); returns the notes.
    Ifs in `judged` are passed over, and those judged here are added to it: the refold pass
    meets the same Ifs, rewritten only in ways that keep their meaning, and each judgement costs
    two ONNX Runtime processes."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnx_ir as ir

    from deploycc import io
    from deploycc.dtypes import stored_bytes
    from deploycc.graph.graphs import constant_tensor
    from deploycc.verify.inputs import generate

    graph = model.graph
    inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    if any(v.shape is None or not v.shape.is_static() for v in inputs):
        return []
    judged = set() if judged is None else judged
    candidates = [(i, node) for i, node in enumerate(graph) if node.op_type == "If"
                  and node.domain in ("", "ai.onnx") and constant_tensor(node.inputs[0]) is None
                  and node not in judged]
    weights = sum(stored_bytes(v.const_value) for v in graph.initializers.values()
                  if v.const_value is not None)
    if not candidates or len(candidates) > MAX_CANDIDATES or weights > MAX_WEIGHT_BYTES:
        return []
    proto = io.to_proto(model)
    feeds = generate(inputs, seed=0)
    notes = []
    branches = [(index, name) for index, _ in candidates for name in ("then_branch", "else_branch")]
    with ThreadPoolExecutor(max_workers=2) as pool:  # each load is its own process
        loads = list(pool.map(lambda job: _loads(inline_branch(proto, *job).SerializeToString(), feeds),
                              branches))
    for number, (index, node) in enumerate(candidates):
        judged.add(node)
        runs = dict(zip(("then_branch", "else_branch"), loads[2 * number: 2 * number + 2], strict=True))
        if None in runs.values() or runs["then_branch"] == runs["else_branch"]:
            continue
        kept = runs["then_branch"]
        condition = ir.Value(name=f"{node.name or 'If'}/runnable_branch", shape=ir.Shape([]),
                             type=ir.TensorType(ir.DataType.BOOL), const_value=ir.tensor(np.array(kept)))
        graph.register_initializer(condition)
        node.replace_input_with(0, condition)
        dropped = "else" if kept else "then"
        notes.append(f"If {node.name or index}: the {dropped} branch cannot run with these input shapes "
                     f"(ONNX Runtime refuses it); the {'then' if kept else 'else'} branch is kept")
    return notes
