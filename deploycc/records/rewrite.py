"""A rewrite the catalog made (which rule, on which node, how many nodes it added) and the
certificate of its proof: the runtime that ran the original, the errors, the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Certificate:
    rule: str
    node: str
    op: str
    status: str
    reference: str = ""
    samples: int = 0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    added_ops: dict[str, int] = field(default_factory=dict)
    detail: str = ""


@dataclass
class Rewrite:
    rule: str
    node: str
    op: str
    graph: str
    added_nodes: int
    certificate: Certificate | None
