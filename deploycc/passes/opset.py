"""Opset: bring the default-domain opset into the target's range.

A model already inside the range is left alone (unless `--opset N` asks for another), except
where a node's op version at the model's opset has no kernel on the target while an older
version does (ORT 1.32 implements QuantizeLinear up to an older version than onnx 1.23's): then
the model goes down to the highest opset at which that node runs and no other node stops
running, if the converter can take it there; and where a node the target refuses can only be
rewritten at a newer opset (the tree walk's Where, 9), up to that opset. One outside the range is
converted to the target's preferred opset. Converting up within 18..25 uses onnxscript's
converter on the IR; everything else uses onnx's converter on the graph without its large
initializers. Converting down, ops born after the destination opset have no adapter:
the rule catalog rewrites them first, and an op no rule can rewrite is named with its versions.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deploycc.dtypes import stored_bytes
from deploycc.errors import DeployccError
from deploycc.passes.base import Pass, PassOutcome, PipelineState
from deploycc.passes.opset_meaning import drop_stale_attributes, respell_values, unchanged_between
from deploycc.taxonomy import Legality, Refusal

if TYPE_CHECKING:
    from collections.abc import Iterator

    import onnx
    import onnx_ir as ir


class OpsetConversionError(DeployccError):
    """The model cannot be brought to the target's opset."""

    exit_code = 1


def destination(state: PipelineState) -> tuple[int | None, int]:
    """(current default-domain opset, the opset it should have)."""
    current = state.opsets.get("")
    target = state.target
    if state.options.opset is not None:
        return current, state.options.opset
    if current is None or target.opset.contains(current):
        return current, current if current is not None else target.opset.preferred
    return current, target.opset.preferred


def _fold_changed_constants(state: PipelineState, current: int, version: int) -> dict[str, int]:
    """Evaluate, before converting down, the nodes of the main graph whose form changed since
    `version` and whose inputs are all constants: their value is all the older opset needs. NaFlexViT
    resizes its position embedding (an initializer) with Resize 18's antialias, which onnx's
    converter cannot take below 18. Returns the ops folded, with counts."""
    from onnxscript.optimizer import fold_constants

    from deploycc.legality import onnx_schemas as schemas
    from deploycc.legality.predicates import is_constant

    chosen = {node for node in state.model.graph if node.domain in ("", "ai.onnx")
              and (schemas.first_version(node.op_type, "") or version + 1) <= version
              and not unchanged_between(node, current, version)
              and all(value is None or is_constant(value) for value in node.inputs)}
    if not chosen:
        return {}
    fold_constants(state.model, input_size_limit=1 << 24, output_size_limit=1 << 24,
                   should_fold=lambda node: node in chosen)
    counts: dict[str, int] = {}
    remaining = set(state.model.graph)
    for node in chosen:
        if node not in remaining:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _rewrite_unborn(state: PipelineState, version: int) -> tuple[list[str], list[str]]:
    """Rewrite, with the catalog, every node whose op does not exist at `version`, to a fixed
    point: a replacement may hold ops born after `version` too (Gelu's ONNX body has CastLike).
    A node whose form changed since `version` is rewritten by an old_forms rule where one applies,
    else left to the converter's adapter."""
    from deploycc.graph.graphs import all_graphs
    from deploycc.graph.shapes import infer_shapes
    from deploycc.legality import onnx_schemas as schemas
    from deploycc.rules.engine import decide

    fired: list[str] = []
    current = state.opsets.get("", version)
    for _ in range(4):
        blocked = []
        progressed = False
        for graph in list(all_graphs(state.model.graph)):
            for node in list(graph):
                if node.domain not in ("", "ai.onnx"):
                    continue
                born = schemas.first_version(node.op_type, "")
                if born is None:
                    continue
                if born <= version:  # Shape with start/end at 15 means something else below 15
                    if unchanged_between(node, current, version):
                        continue
                    decision = decide(node, graph, state.opsets, prove=state.options.prove,
                                      families=("old_forms",), disabled=state.options.disable_rules)
                    if decision.rewrite is not None:
                        state.rewrites.append(decision.rewrite)
                        fired.append(f"{decision.node}: {decision.rewrite.rule}")
                        progressed = True
                    continue
                decision = decide(node, graph, state.opsets, prove=state.options.prove,
                                  disabled=state.options.disable_rules)
                if decision.rewrite is not None:
                    state.rewrites.append(decision.rewrite)
                    fired.append(f"{decision.node}: {decision.rewrite.rule}")
                    progressed = True
                else:
                    blocked.append(f"{node.op_type} (first at opset {born}; {decision.explain()})")
        if not progressed:
            break
        infer_shapes(state.model)  # the next sweep reads the replacements' types
    return fired, blocked


def kernel_opset(state: PipelineState, current: int) -> int | None:
    """The highest opset below `current` that gives a kernel to nodes the target refuses only for
    their op version, without making any other node illegal; None when there is none."""
    from deploycc.graph.graphs import all_graphs
    from deploycc.legality import onnx_schemas as schemas
    from deploycc.legality.conversion_target import ConversionTarget, NodeVerdict

    judge = ConversionTarget(state.target)
    nodes = [node for graph in all_graphs(state.model.graph) for node in graph
             if node.domain in ("", "ai.onnx")]

    def refused_for_version(verdict: NodeVerdict) -> bool:
        return any(reason.category == Refusal.OPSET for reason in verdict.reasons)

    # An op's version follows from the opset alone, so one node per op tells whether any node is
    # refused for it; most models have none, and then the other nodes need not be judged here.
    one_per_op = {node.op_type: node for node in nodes}
    if not any(refused_for_version(judge.judge(node, state.opsets)) for node in one_per_op.values()):
        return None

    def illegal_at(opset: int) -> dict[int, NodeVerdict]:
        opsets = dict(state.opsets, **{"": opset})
        verdicts = {index: judge.judge(node, opsets) for index, node in enumerate(nodes)}
        return {index: verdict for index, verdict in verdicts.items() if verdict.status == Legality.ILLEGAL}

    now = illegal_at(current)
    if not any(all(r.category == Refusal.OPSET for r in verdict.reasons) for verdict in now.values()):
        return None
    born = max((schemas.first_version(node.op_type, "") or 1 for node in nodes), default=1)
    for candidate in range(current - 1, max(born, state.target.opset.min) - 1, -1):
        if illegal_at(candidate).keys() < now.keys():
            return candidate
    return None


def rule_opset(state: PipelineState, current: int) -> int | None:
    """The opset above `current`, inside the target's range, at which the catalog can write a node
    the target refuses and whose every rule needs a newer default domain than `current` (onnxmltools
    writes LightGBM's regressors at opset 8; the tree walk needs Where, 9); None when none does."""
    from deploycc.graph.graphs import all_graphs
    from deploycc.legality.conversion_target import ConversionTarget
    from deploycc.rules.catalog import rules_for

    judge = ConversionTarget(state.target)
    needed = []
    for graph in all_graphs(state.model.graph):
        for node in graph:
            floor = min((rule.min_default_opset for rule in rules_for(node.domain, node.op_type)), default=1)
            if floor > current and judge.judge(node, state.opsets).status == Legality.ILLEGAL:
                needed.append(floor)
    wanted = max(needed, default=None)
    return wanted if wanted is not None and state.target.opset.contains(wanted) else None


class OpsetPass(Pass):
    name = "opset"
    summary = "convert the default-domain opset into the target's range"
    in_place = False  # onnx's converter works on protobuf and hands back a new model

    def run(self, state: PipelineState) -> PassOutcome:
        current, wanted = destination(state)
        if current is not None and current == wanted and state.options.opset is None:
            return self._toward_kernels(state, current)
        if current is None:
            # A graph of ai.onnx.ml (or other) nodes only: no node changes meaning when the default
            # domain is declared, and without it no rule could write a standard op in its place.
            state.model.opset_imports[""] = wanted
            return PassOutcome(True, [f"the model imports no ai.onnx opset; declared {wanted} so that "
                                      "rewrites can use standard ops"], {"from": None, "to": wanted})
        if current == wanted:
            return PassOutcome(False, details={"opset": current})
        target = state.target
        if not target.opset.contains(wanted):
            raise OpsetConversionError(
                f"opset {wanted} is outside {target.name}'s range {target.opset.min}..{target.opset.max}")
        notes: list[str] = []
        if wanted < current:
            folded = _fold_changed_constants(state, current, wanted)
            if folded:
                notes.append("folded before converting down (constant inputs, a form the older opset "
                             "lacks): " + ", ".join(f"{op} ×{count}" for op, count in folded.items()))
            fired, blocked = _rewrite_unborn(state, wanted)
            if fired:  # one note, not one per node: "gelu ×3, mish ×1" (each item is "node: rule")
                counts: dict[str, int] = {}
                for rule in (item.rsplit(": ", 1)[-1] for item in fired):
                    counts[rule] = counts.get(rule, 0) + 1
                notes.append("rewrote before converting down: "
                             + ", ".join(f"{rule} ×{count}" for rule, count in counts.items()))
            if blocked:
                raise OpsetConversionError(
                    f"cannot convert opset {current} -> {wanted}: no adapter or rule for "
                    + "; ".join(blocked))
        state.model = self._convert(state.model, current, wanted)
        notes.append(f"converted opset {current} -> {wanted}")
        return PassOutcome(True, notes, {"from": current, "to": wanted})

    def _toward_kernels(self, state: PipelineState, current: int) -> PassOutcome:
        lower = kernel_opset(state, current)
        if lower is None:
            return self._toward_rules(state, current)
        try:
            state.model = self._convert(state.model, current, lower)
        except OpsetConversionError as error:  # stay: the legalizer and the report name the node
            return PassOutcome(False, [f"kept opset {current}: {error}"], {"opset": current})
        return PassOutcome(True, [f"converted opset {current} -> {lower}: the target implements an older "
                                  "version of an op the model uses"], {"from": current, "to": lower})

    def _toward_rules(self, state: PipelineState, current: int) -> PassOutcome:
        higher = rule_opset(state, current)
        if higher is None:
            return PassOutcome(False, details={"opset": current})
        try:
            state.model = self._convert(state.model, current, higher)
        except OpsetConversionError as error:  # stay: the rule's decline names the flag
            return PassOutcome(False, [f"kept opset {current}: {error}"], {"opset": current})
        return PassOutcome(True, [f"converted opset {current} -> {higher}: the rules that write what the "
                                  "target lacks need it"], {"from": current, "to": higher})

    @staticmethod
    def _convert(model: ir.Model, current: int, wanted: int) -> ir.Model:
        if 18 <= current < wanted <= 25:
            import onnxscript.version_converter as converter

            try:
                converter.convert_version(model, wanted)
                if model.opset_imports.get("") == wanted:
                    return model
            except Exception:  # fall through to onnx's converter, which covers more adapters
                pass
        try:
            return convert_opset(model, wanted)
        except Exception as error:
            first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            missing = re.search(r"No Adapter (?:From|To) Version \$?(\d+) for (\w+)", first)
            if missing:
                version, op = missing.groups()
                first = f"onnx's converter has no adapter for {op} from version {version}"
            raise OpsetConversionError(f"cannot convert opset {current} -> {wanted}: {first}",
                                       hint="try --opset with a closer version, or a target whose "
                                            "range includes the model's opset") from None


# The conversion itself: onnx's converter, 2 GB-safe, and what it leaves behind.


def convert_opset(model: ir.Model, version: int) -> ir.Model:
    """onnx.version_converter on the graph without its large initializers (2 GB-safe).

    Large initializers travel as graph inputs (type and shape only) and are put back, by name,
    memory-mapped as they were, into the converted model.
    """
    import onnx

    from deploycc.io import MAP_TYPES, from_proto

    current = model.opset_imports.get("", model.opset_imports.get("ai.onnx", version))
    proto, tensors = _proto_without_large_initializers(model, current, version)
    converted = onnx.version_converter.convert_version(proto, version)
    read, defined = _names(converted.graph)
    _convert_bodies(converted, converted.graph, current, version, _Scope(), read | defined)
    result = from_proto(converted, like=model)
    if MAP_TYPES in model.meta:
        result.meta[MAP_TYPES] = model.meta[MAP_TYPES]
    _release_held_nodes(result)
    drop_stale_attributes(result, current, version)
    respell_values(result, current, version)
    _put_back_initializers(result.graph, tensors)
    return result


def _proto_without_large_initializers(model: ir.Model, current: int, version: int,
                                      ) -> tuple[onnx.ModelProto, dict[str, ir.TensorProtocol]]:
    """The model as protobuf with its large initializers as graph inputs, and their tensors by
    name; the model itself is left as it was."""
    import onnx_ir as ir

    from deploycc.graph.graphs import all_graphs
    from deploycc.graph.held_back import held_back

    with _large_initializers_as_inputs(model.graph) as tensors:
        # Nodes whose op has the same signature at both opsets need no adapter (onnx's converter
        # lacks many, e.g. Sub 14 -> 13): hide them in a private domain while it runs.
        held_nodes = [node for sub in all_graphs(model.graph) for node in sub
                      if node.domain in ("", "ai.onnx") and unchanged_between(node, current, version)]
        with held_back(model, held_nodes):
            proto = ir.serde.serialize_model(model)
    return proto, tensors


@contextmanager
def _large_initializers_as_inputs(graph: ir.Graph) -> Iterator[dict[str, ir.TensorProtocol]]:
    """Inside the block the large initializers are graph inputs without a value; after it they
    are initializers again and the graph inputs are as they were. Yields their tensors by name."""
    from deploycc.io import LARGE_TENSOR_BYTES

    held = {name: value for name, value in graph.initializers.items()
            if value.const_value is not None and stored_bytes(value.const_value) > LARGE_TENSOR_BYTES}
    original_inputs = list(graph.inputs)
    tensors: dict[str, ir.TensorProtocol] = {}
    for name, value in held.items():
        assert value.const_value is not None
        tensors[name] = value.const_value
        if value.shape is None:
            value.shape = value.const_value.shape  # type: ignore[assignment]
        if value.dtype is None:
            value.dtype = value.const_value.dtype
        graph.initializers.pop(name)
        if value not in graph.inputs:
            graph.inputs.append(value)
    for value in held.values():
        value.const_value = None
    try:
        yield tensors
    finally:
        for name, value in held.items():
            value.const_value = tensors[name]
            graph.initializers[name] = value
        graph.inputs.clear()
        graph.inputs.extend(original_inputs)


def _release_held_nodes(model: ir.Model) -> None:
    """The nodes hidden from the converter in the private domain go back to the default one."""
    from deploycc.graph.graphs import all_graphs
    from deploycc.graph.held_back import HOLD_DOMAIN

    model.opset_imports.pop(HOLD_DOMAIN, None)
    for node in (n for sub in all_graphs(model.graph) for n in sub):
        if node.domain == HOLD_DOMAIN:
            node.domain = ""


def _put_back_initializers(graph: ir.Graph, tensors: dict[str, ir.TensorProtocol]) -> None:
    """The graph inputs that stood in for large initializers become those initializers again."""
    for value in list(graph.inputs):
        if value.name in tensors:
            graph.inputs.remove(value)
            value.const_value = tensors[value.name]
            graph.register_initializer(value)


@dataclass
class _Scope:
    """What a body sees of the graphs around it: each value's type, and the constants (small
    initializers, Constant nodes) that adapters read axes, splits and pads from."""

    types: dict[str, onnx.TypeProto] = field(default_factory=dict)
    constants: dict[str, onnx.TensorProto] = field(default_factory=dict)

    def inside(self, graph: onnx.GraphProto) -> _Scope:
        scope = _Scope(dict(self.types), dict(self.constants))
        for info in (*graph.input, *graph.output, *graph.value_info):
            if info.HasField("type"):
                scope.types[info.name] = info.type
        for tensor in graph.initializer:
            scope.constants[tensor.name] = tensor
        for node in graph.node:  # held back or not, onnx's adapters read a Constant by its op type
            if node.op_type == "Constant" and len(node.output) == 1:
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                if value is not None:
                    scope.constants[node.output[0]] = value
        return scope


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    import onnx

    bodies: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            bodies.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            bodies.extend(attribute.graphs)
    return bodies


def _names(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """(names read, names defined) by a graph and every body nested in it."""
    read: set[str] = set()
    defined = {info.name for info in graph.input} | {tensor.name for tensor in graph.initializer}
    for node in graph.node:
        read.update(node.input)
        defined.update(node.output)
        for body in _bodies(node):
            inner_read, inner_defined = _names(body)
            read |= inner_read
            defined |= inner_defined
    read.update(info.name for info in graph.output)
    return read, defined


def _convert_bodies(model: onnx.ModelProto, graph: onnx.GraphProto, source: int, version: int,
                    outer: _Scope, taken: set[str]) -> None:
    """onnx's converter converts the nodes of the main graph only: an If, Loop or Scan body keeps
    its ops at the source opset (ReduceMean-18 with its axes input under ReduceMean-13, an
    invalid model). Each body is converted as a model of its own, outer values as its inputs and
    outer constants as its initializers (the adapters read axes from those), and its nodes are
    put back; then the bodies nested in it, the same way. `taken`: every name in the model, as
    each conversion names the values it adds from the same counter (_v_6 twice: not SSA)."""
    import onnx

    scope = outer.inside(graph)
    for node in graph.node:
        for body in _bodies(node):
            if not any(inner.domain in ("", "ai.onnx") for inner in body.node):
                _convert_bodies(model, body, source, version, scope, taken)  # all held back
                continue
            read, defined = _names(body)
            captured = sorted(name for name in read - defined if name)  # "" is an absent input
            alone = onnx.ModelProto(ir_version=model.ir_version, producer_name="deploycc")
            alone.opset_import.extend(model.opset_import)
            for opset in alone.opset_import:
                if opset.domain in ("", "ai.onnx"):
                    opset.version = source
            alone.graph.CopyFrom(body)
            for name in captured:
                info = alone.graph.input.add(name=name)
                if name in scope.types:
                    info.type.CopyFrom(scope.types[name])
                if name in scope.constants:
                    tensor = alone.graph.initializer.add()
                    tensor.CopyFrom(scope.constants[name])
                    tensor.name = name  # a Constant node's tensor is often unnamed
            converted = onnx.version_converter.convert_version(alone, version).graph
            _rename_added(converted, defined | set(captured), taken)
            outer_names = set(captured)
            del body.node[:]
            body.node.extend(converted.node)
            del body.initializer[:]
            body.initializer.extend(t for t in converted.initializer if t.name not in outer_names)
            _convert_bodies(model, body, source, version, scope, taken)


def _rename_added(graph: onnx.GraphProto, known: set[str], taken: set[str]) -> None:
    """Give the values a conversion added (not in `known`) names no other graph uses."""
    renamed: dict[str, str] = {}
    added = [name for node in graph.node for name in node.output if name and name not in known]
    added += [tensor.name for tensor in graph.initializer if tensor.name not in known]
    for name in added:
        fresh, count = name, 0
        while fresh in taken:
            count += 1
            fresh = f"{name}_{count}"
        taken.add(fresh)
        if fresh != name:
            renamed[name] = fresh
    if not renamed:
        return
    for node in graph.node:  # the added values are read in this graph only: bodies inside it are as they were
        node.input[:] = [renamed.get(name, name) for name in node.input]
        node.output[:] = [renamed.get(name, name) for name in node.output]
    for tensor in graph.initializer:
        tensor.name = renamed.get(tensor.name, tensor.name)
