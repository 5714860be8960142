"""The rule catalog: every rewrite rule, registered by name, looked up by the op it replaces.

Families live one per module; importing `deploycc.rules.catalog` imports them all, so a new
family is one file plus one line in FAMILIES.
"""

from __future__ import annotations

import importlib

from deploycc.rules.base import ANY_OP, GraphRule, Rule

FAMILIES = (
    "arithmetic",
    "normalization",
    "activations",
    "einsum",
    "attention",
    "old_forms",
    "contrib",
    "resize_pad",
    "sampling",
    "types",
    "shapes",
    "functions",
    "widen",
    "ml",
    "svm",
    "quantized",
)

RULES: dict[str, Rule] = {}
_BY_OP: dict[tuple[str, str], list[Rule]] = {}
GRAPH_RULES: dict[str, GraphRule] = {}  # in the order they run


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add a rule to the catalog under its name (names are unique)."""
    if cls.name in RULES:
        raise ValueError(f"rule {cls.name!r} registered twice")
    rule = cls()
    RULES[cls.name] = rule
    _BY_OP.setdefault((cls.domain, cls.op_type), []).append(rule)
    return cls


def register_graph(cls: type[GraphRule]) -> type[GraphRule]:
    """Class decorator: add a whole-graph rule; they run in the order they are registered."""
    if cls.name in GRAPH_RULES or cls.name in RULES:
        raise ValueError(f"rule {cls.name!r} registered twice")
    GRAPH_RULES[cls.name] = cls()
    return cls


def graph_rules() -> list[GraphRule]:
    _load()
    return list(GRAPH_RULES.values())


_loaded = False


def _load() -> None:
    """Import every family (importing one family alone must not hide the others)."""
    global _loaded
    if _loaded:
        return
    for family in FAMILIES:
        importlib.import_module(f"deploycc.rules.{family}")
    _loaded = True


def rules_for(domain: str, op_type: str) -> list[Rule]:
    _load()
    domain = "" if domain == "ai.onnx" else domain
    return list(_BY_OP.get((domain, op_type), [])) + list(_BY_OP.get((domain, ANY_OP), []))


def all_rules() -> dict[str, Rule]:
    _load()
    return dict(RULES)
