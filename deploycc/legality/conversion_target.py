"""ConversionTarget: judge one node against one target, the MLIR way.

A node is *legal*, *illegal*, or *conditional* (legal only because a named condition held:
a vendor restriction checked by a predicate, expansion into an ONNX function body, or vendor
data marked uncertain). Every illegal verdict carries a category and a reason naming what is
wrong; the reasons' `summary` is the same for every node that fails the same way, so reports
can group them (`op | count | reason | nodes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deploycc.dtypes import type_name
from deploycc.legality import onnx_schemas as schemas
from deploycc.legality import predicates
from deploycc.taxonomy import Condition, Legality, Refusal

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.targets.schema import OpSupport, Target

# The fixed taxonomy of reasons a node is refused (audits reuse it).
CATEGORIES = tuple(Refusal)

# How each condition deploycc acts on reads in a verdict. RUNTIME_EXPANDS is the condition on a
# function op the target has no kernel for; deploycc expands such bodies itself
# (rules/functions.py) rather than trust the runtime's copy of onnx to know the op.
CONDITION_TEXT = {Condition.RUNTIME_EXPANDS: "expanded into its ONNX function body by the runtime"}


@dataclass(frozen=True)
class Reason:
    category: str
    summary: str  # the same for every node failing the same way
    detail: str = ""  # what is wrong at this node


@dataclass
class NodeVerdict:
    node: str
    op: str
    domain: str
    graph: str
    status: Legality = Legality.LEGAL
    reasons: list[Reason] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)  # as the reports say them
    acted_on: set[Condition] = field(default_factory=set)  # those among them deploycc acts on
    dla: str | None = None

    def refuse(self, category: str, summary: str, detail: str = "") -> None:
        self.status = Legality.ILLEGAL
        self.reasons.append(Reason(category, summary, detail))

    def allow_if(self, condition: str | Condition) -> None:
        """Legal only if `condition` holds: a sentence, or a Condition deploycc acts on."""
        if isinstance(condition, Condition):
            self.acted_on.add(condition)
            condition = CONDITION_TEXT[condition]
        self.conditions.append(condition)
        if self.status == Legality.LEGAL:
            self.status = Legality.CONDITIONAL


def _values_bound(node: ir.Node, schema: Any, constraint: str) -> list[ir.Value]:
    """The node's inputs and outputs whose formal parameter uses type constraint `constraint`."""
    bound: list[ir.Value] = []
    bindings = schemas.constraint_bindings(schema).get(constraint, [])
    for kind, index in bindings:
        values = node.inputs if kind == "input" else node.outputs
        if schemas.is_variadic(schema, kind, index):
            bound.extend(v for v in values[index:] if v is not None)
        elif index < len(values):
            value = values[index]
            if value is not None:
                bound.append(value)
    return bound


class ConversionTarget:
    """What one target accepts, as judgments on nodes."""

    def __init__(self, target: Target, *, dla: bool = False, probed: dict[str, str] | None = None) -> None:
        self.target = target
        self.probed = probed or {}  # from `deploycc probe`: "domain|op|version|dtype" -> pass | fail
        self.table = target.ops
        self.with_dla = dla and target.dla is not None and target.dla.table is not None
        self.product = f"{self.table.product} {self.table.product_version}".strip()

    # ----------------------------------------------------------------- the judgment

    def accepts(self, model_opsets: dict[str, int], graph: str = "main") -> Callable[[ir.Node], bool]:
        """What a rule asks of the node it would write (compute-wider's op in the wider type): that
        this target does not refuse it. The legalize pass and `check --explain` ask the same."""
        return lambda node: self.judge(node, model_opsets, graph).status != Legality.ILLEGAL

    def judge(self, node: ir.Node, model_opsets: dict[str, int], graph: str = "main") -> NodeVerdict:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        from deploycc.graph.graphs import node_label

        verdict = NodeVerdict(node=node_label(node), op=node.op_type,
                              domain=domain, graph=graph)
        model_opset = model_opsets.get(domain, model_opsets.get("ai.onnx" if not domain else domain))
        opset = model_opset if model_opset is not None else 1
        version: int | None = None
        if domain in ("", "ai.onnx.ml", "ai.onnx.preview.training"):
            if domain == "" and opset > self.target.opset.max:
                born = schemas.first_version(node.op_type, domain)
                if born is not None and born > self.target.opset.max:
                    verdict.refuse(
                        Refusal.OPSET,
                        f"{node.op_type} first appears at opset {born}, after the target's "
                        f"maximum opset {self.target.opset.max}",
                    )
                    return verdict
                opset = self.target.opset.max  # the opset converter will bring it down
            version = schemas.op_version(node.op_type, domain, opset)
        schema = schemas.get_schema(node.op_type, domain, opset) if version is not None else None
        entry = self._entry(node, domain, version, opset, verdict)
        if entry is not None:
            self._check_dtypes(node, schema, entry, verdict)
            self._check_predicates(node, schema, entry, verdict)
        self._check_carried_dtypes(node, verdict)
        self._check_static_shapes(node, verdict)
        if self.probed:
            self._apply_probe(node, domain, version, verdict)
        if self.with_dla:
            verdict.dla = self._dla_status(node)
        return verdict

    def _apply_probe(self, node: ir.Node, domain: str, version: int | None, verdict: NodeVerdict) -> None:
        """Lay the probed behaviour of the real backend over the declared table."""
        first = next((v for v in node.inputs if v is not None), None)
        dtype = type_name(first) if first is not None else None
        numpy_names = {"float32": "float32", "float64": "float64", "float16": "float16", "bool": "bool"}
        found = self.probed.get(f"{domain}|{node.op_type}|{version}|{numpy_names.get(dtype or '', dtype)}")
        if found == "fail" and verdict.status != Legality.ILLEGAL:
            verdict.refuse(Refusal.UNSUPPORTED_OP,
                           f"{node.op_type}-{version} on {dtype} failed when probed on {self.product}")
        elif found == "pass" and verdict.status == Legality.ILLEGAL and \
                all(r.category in (Refusal.UNSUPPORTED_OP, Refusal.OPSET, Refusal.DTYPE)
                    for r in verdict.reasons):
            verdict.status, verdict.reasons = Legality.CONDITIONAL, []
            verdict.conditions.append(f"ran when probed on {self.product}")

    def _entry(self, node: ir.Node, domain: str, version: int | None, opset: int,
               verdict: NodeVerdict) -> OpSupport | None:
        label = node.op_type if not domain else f"{domain}::{node.op_type}"
        entry, problem = self._lookup(node.op_type, domain, version)
        if problem is None:
            if entry is not None and entry.status == "uncertain":
                verdict.allow_if(f"vendor data uncertain: {entry.note or 'sources disagree'}")
            return entry
        # Runtimes expand function ops of the default domain only (ORT: "ai.onnx.preview:...
        # is not a registered function/op").
        if (self.table.function_expansion and domain == ""
                and schemas.has_function_body(node.op_type, domain, opset)):
            blocked = self._body_blocker(node.op_type, domain, opset, depth=0)
            if blocked is None:
                verdict.allow_if(Condition.RUNTIME_EXPANDS)
            else:
                verdict.refuse(Refusal.UNSUPPORTED_OP,
                               f"{label} has no implementation in {self.product} and its function "
                               f"body needs {blocked}, which has none either")
            return None
        category, summary = problem
        verdict.refuse(category, summary.format(label=label, product=self.product),
                       entry.note if entry is not None and entry.note else "")
        return None

    def _lookup(self, op: str, domain: str,
                version: int | None) -> tuple[OpSupport | None, tuple[str, str] | None]:
        """The table entry covering op at `version`, or (entry or None, (category, summary))."""
        entries = self.table.lookup(domain, op)
        if not entries:
            return None, (Refusal.UNSUPPORTED_OP, "{label} is not supported by {product}")
        usable = [e for e in entries if e.status != "unsupported"]
        if not usable:
            return entries[0], (Refusal.UNSUPPORTED_OP, "{label} is listed as unsupported by {product}")
        if version is not None and any(e.since is not None or e.until is not None for e in usable):
            covering = [e for e in usable if self._covers(e, op, domain, version)]
            if not covering:
                ranges = ", ".join(f"{e.since or 1}..{e.until if e.until is not None else ''}"
                                   for e in usable)
                return None, (Refusal.OPSET, f"{{label}}-{version} has no implementation in {{product}} "
                                       f"(it implements versions {ranges})")
            usable = covering
        return usable[-1], None

    def _covers(self, entry: OpSupport, op: str, domain: str, version: int) -> bool:
        if entry.until is None and entry.since is not None and \
                self.table.open_range == "next_schema_version":
            following = schemas.next_version_after(op, domain, entry.since)
            if following is not None and version >= following:
                return False
        return entry.covers(version)

    def _body_blocker(self, op: str, domain: str, opset: int, depth: int) -> str | None:
        """The first op in op's function body the target cannot run (expanding nested bodies)."""
        body = schemas.function_body_ops(op, domain, opset)
        if body is None or depth > 4:
            return None  # a context-dependent body cannot be listed; give the runtime the benefit
        for inner_domain, inner_op in body:
            version = schemas.op_version(inner_op, inner_domain, opset)
            _, problem = self._lookup(inner_op, inner_domain, version)
            if problem is None:
                continue
            if schemas.has_function_body(inner_op, inner_domain, opset):
                deeper = self._body_blocker(inner_op, inner_domain, opset, depth + 1)
                if deeper is None:
                    continue
                return deeper
            return f"{inner_op}-{version}" if version is not None else inner_op
        return None

    def _check_dtypes(self, node: ir.Node, schema: Any, entry: OpSupport, verdict: NodeVerdict) -> None:
        mode = self.table.dtype_mode
        if mode == "primary" and entry.dtypes is not None:
            if schema is not None:
                formals = schema.inputs or schema.outputs
                if not formals:
                    return
                constraint = formals[0].type_str
                values = (_values_bound(node, schema, constraint)
                          if not constraint.startswith("tensor(") else [])
            else:
                values = [v for v in node.inputs[:1] if v is not None]
            self._require(values, entry.dtypes, node, verdict)
        elif mode == "constraints" and entry.type_constraints and schema is not None:
            for constraint, allowed in entry.type_constraints:
                values = _values_bound(node, schema, constraint)
                self._require(values, allowed, node, verdict)

    def _require(self, values: list[ir.Value], allowed: tuple[str, ...], node: ir.Node,
                 verdict: NodeVerdict) -> None:
        for value in values:
            found = type_name(value)
            if found is None:
                continue
            carried = self.target.dtypes.computed_as_dtype(found)
            if carried not in allowed and found not in allowed:
                verdict.refuse(
                    Refusal.DTYPE,
                    f"{node.op_type} on {found} is not supported by {self.product} "
                    f"(supports {', '.join(allowed)})",
                    f"'{value.name}' is {found}",
                )
                return

    def _check_predicates(self, node: ir.Node, schema: Any, entry: OpSupport,
                          verdict: NodeVerdict) -> None:
        for ref in entry.predicates:
            problem = predicates.REGISTRY[ref.name].check(node, ref, schema)
            if problem:
                verdict.refuse(Refusal.WRONG_RESULT if ref.wrong_result else Refusal.RESTRICTION,
                               f"{node.op_type}: {problem}", ref.describe())
            else:
                verdict.allow_if(ref.describe())

    def _check_carried_dtypes(self, node: ir.Node, verdict: NodeVerdict) -> None:
        banned = set(self.target.dtypes.unsupported)
        if not banned:
            return
        for value in [*node.inputs, *node.outputs]:
            if value is None:
                continue
            found = type_name(value)
            if found in banned:
                verdict.refuse(Refusal.DTYPE, f"{found} tensors cannot be carried by {self.target.name}",
                               f"'{value.name}' is {found}")
                return

    def _check_static_shapes(self, node: ir.Node, verdict: NodeVerdict) -> None:
        if self.target.shapes.policy != "static":
            return
        from deploycc.graph.graphs import dynamic_dims

        for value in node.inputs:
            if value is None or value.const_value is not None:
                continue
            dynamic = dynamic_dims(value)
            if dynamic:
                dims = ", ".join(f"dim {i} '{d}'" if i >= 0 else d for i, d in dynamic)
                verdict.refuse(Refusal.DYNAMIC_SHAPE,
                               f"{self.target.name} needs static shapes; fix them with --shape",
                               f"'{value.name}' has {dims}")
                return

    def _dla_status(self, node: ir.Node) -> str:
        assert self.target.dla is not None and self.target.dla.table is not None
        entries = self.target.dla.table.lookup("", node.op_type)
        if not entries:
            return "gpu-fallback"
        status = entries[0].status
        return {"supported": "dla", "unsupported": "gpu-fallback"}.get(status, "uncertain")
