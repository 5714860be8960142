"""The rule catalog: every rewrite rule, registered by name, looked up by the op it replaces.

Families live one per module; importing `deploycc.rules.catalog` imports them all, so a new
family is one file plus one line in FAMILIES.
"""

from __future__ import annotations

import importlib

from deploycc.rules.base import ANY_OP, Rule

FAMILIES = (
    "arithmetic",
    "normalization",
    "activations",
    "einsum",
    "attention",
    "old_forms",
    "contrib",
    "resize_pad",
    "types",
    "shapes",
    "functions",
    "widen",
    "ml",
)

RULES: dict[str, Rule] = {}
_BY_OP: dict[tuple[str, str], list[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add a rule to the catalog under its name (names are unique)."""
    if cls.name in RULES:
        raise ValueError(f"rule {cls.name!r} registered twice")
    rule = cls()
    RULES[cls.name] = rule
    _BY_OP.setdefault((cls.domain, cls.op_type), []).append(rule)
    return cls


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
