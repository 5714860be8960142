"""ONNX operator schemas: which version of an op a model uses, and its formal parameters."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import onnx.defs


@lru_cache(maxsize=4096)
def get_schema(op: str, domain: str, opset: int) -> Any | None:
    """The schema in force for `op` in a model importing `domain` at `opset`, or None."""
    try:
        return onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None


def op_version(op: str, domain: str, opset: int) -> int | None:
    """The version of `op` a model at `opset` uses (its schema's since_version)."""
    schema = get_schema(op, domain, opset)
    return None if schema is None else int(schema.since_version)


@lru_cache(maxsize=4096)
def first_version(op: str, domain: str) -> int | None:
    """The opset in which `op` first appeared in `domain`, or None if ONNX does not know it."""
    for opset in range(1, onnx.defs.onnx_opset_version() + 1):
        if get_schema(op, domain, opset) is not None:
            return opset
    return None


def input_index(schema: Any, name: str | int) -> int | None:
    """Position of a formal input given by name (e.g. 'axes') or by index."""
    if isinstance(name, int):
        return name
    for index, formal in enumerate(schema.inputs):
        if formal.name == name:
            return index
    return None


def constraint_bindings(schema: Any) -> dict[str, list[tuple[str, int]]]:
    """Type-constraint name -> [('input'|'output', index)] it binds, variadics included."""
    bindings: dict[str, list[tuple[str, int]]] = {}
    for kind, formals in (("input", schema.inputs), ("output", schema.outputs)):
        for index, formal in enumerate(formals):
            bindings.setdefault(formal.type_str, []).append((kind, index))
    return bindings


def is_variadic(schema: Any, kind: str, index: int) -> bool:
    formals = schema.inputs if kind == "input" else schema.outputs
    if not formals:
        return False
    last = formals[-1]
    return index >= len(formals) - 1 and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic


def has_function_body(op: str, domain: str, opset: int) -> bool:
    schema = get_schema(op, domain, opset)
    if schema is None:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def next_version_after(op: str, domain: str, version: int) -> int | None:
    """The first opset after `version` at which ONNX changed `op`, or None if it never did."""
    for opset in range(version + 1, onnx.defs.onnx_opset_version() + 1):
        newer = op_version(op, domain, opset)
        if newer is not None and newer > version:
            return newer
    return None


def function_body_ops(op: str, domain: str, opset: int) -> list[tuple[str, str]] | None:
    """(domain, op) of each node in the op's ONNX function body at `opset`.

    None when the body is built per node (context-dependent) and so cannot be listed here.
    """
    schema = get_schema(op, domain, opset)
    if schema is None or not schema.has_function:
        return None
    body = schema.get_function_with_opset_version(opset) if hasattr(
        schema, "get_function_with_opset_version") else None
    if body is None:
        body = schema.function_body
    if isinstance(body, bytes):  # onnx returns the FunctionProto serialized
        body = onnx.FunctionProto.FromString(body)
    return [(("" if n.domain == "ai.onnx" else n.domain), n.op_type) for n in body.node]


def _default(attr: Any) -> bytes:
    return attr.default_value.SerializeToString()


def valid_at_both(op: str, domain: str, opset_a: int, opset_b: int, set_attributes: frozenset[str],
                  inputs: int, outputs: int, respelled: frozenset[str] = frozenset()) -> bool:
    """True when a node of `op` with `inputs`/`outputs` values, setting `set_attributes`, means
    the same at both opsets.

    That holds when the formal parameters the node uses have the same kinds at both, neither
    version requires one the node lacks, and every attribute the node sets exists at both with
    the same default: the version change only widened types, added optional outputs, or added an
    attribute the node leaves at its default (Reshape's allowzero, BatchNormalization's
    training_mode). onnx's converter lacks adapters for many of these (Sub 14 -> 13, BN 15 -> 14).
    Attributes in `respelled` differ only in how their values are spelled (the caller renames them).
    """
    a, b = get_schema(op, domain, opset_a), get_schema(op, domain, opset_b)
    if a is None or b is None:
        return False
    if a.since_version == b.since_version:
        return True
    for count, kind in ((inputs, "inputs"), (outputs, "outputs")):
        formals_a, formals_b = getattr(a, kind), getattr(b, kind)
        for schema_formals in (formals_a, formals_b):
            required = sum(1 for f in schema_formals if f.option == f.option.Single)
            if count < required and not any(f.option == f.option.Variadic for f in schema_formals):
                return False
        # Inputs and outputs are positional: the names may change between versions (BN's
        # mean became input_mean), what matters is the kind of each position the node uses.
        options_a = [f.option for f in formals_a][:count]
        options_b = [f.option for f in formals_b][:count]
        variadic = bool(formals_a) and formals_a[-1].option == formals_a[-1].option.Variadic
        if len(options_a) < count and not variadic:
            return False
        if options_a != options_b:
            return False
    for name in set(a.attributes) | set(b.attributes):
        in_a, in_b = name in a.attributes, name in b.attributes
        if in_a and in_b:
            if name in respelled:
                continue
            if _default(a.attributes[name]) != _default(b.attributes[name]) or \
                    a.attributes[name].type != b.attributes[name].type:
                return False
        elif name in set_attributes:
            return False
    return True
