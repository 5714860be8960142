"""The strings in a `.pt2`'s program (models/NAME.json) that torch turns into code, each held to
the forms torch itself writes before torch.export.load sees them (pt2_archive.py calls this).

    expr_str     sympy.sympify: Python's eval with sympy's and the builtins' names in scope
    guards_code  pasted into a function's source and exec'd by ExportedProgram.module() and
                 run_decompositions (the export), which also paste string inputs and the
                 sample inputs' keys into it
    in_spec, out_spec   pytree contexts: an enum's or a defaultdict factory's module is imported
    as_operator  an operator argument resolved by name from torch, operator or math and called

Node targets need no check here: torch's verifier, run as the program is built, allows only
operators and its own list of functions.
"""

from __future__ import annotations

import ast
import builtins
import enum
import json
import re
import sys
from pathlib import Path
from typing import Any

from deploycc.errors import ModelInputError

HINT = "deploycc reads only what torch.export.save writes: save the program again with it"
# no quote, backslash or control character: text that stays inside a string literal when torch
# pastes it, quoted, into the code it generates
PLAIN_TEXT = re.compile(r"[^'\"\\\x00-\x1f\x7f]*")
# what sympy.srepr writes for torch's shape expressions, and torch's own sympy functions (the
# names GraphModuleDeserializer puts in scope)
SYMPY_CALLS = frozenset({
    "Symbol", "Dummy", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs",
    "floor", "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality",
    "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "And", "Or", "Not", "Xor",
    "Piecewise", "ExprCondPair", "ITE", "BooleanTrue", "BooleanFalse", "NegativeOne", "One", "Zero",
    "Half", "Infinity", "NegativeInfinity", "NaN", "ComplexInfinity",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal",
    "ToFloat", "Identity",
})
SYMPY_NAMES = frozenset({"oo", "zoo", "nan", "true", "false"}) | SYMPY_CALLS
# the only calls whose string arguments sympy does not evaluate in turn (a Function's or Max's
# arguments go through sympify, and a string there is eval'd): a name, or a number's digits
SYMPY_STRING_CALLS = {"Symbol": re.compile(r"[A-Za-z_]\w*"), "Dummy": re.compile(r"[A-Za-z_]\w*"),
                      "Integer": re.compile(r"[\w.+\-]+"), "Float": re.compile(r"[\w.+\-]+"),
                      "Rational": re.compile(r"[\w.+\-/]+")}
OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
             ast.BitXor, ast.LShift, ast.RShift, ast.USub, ast.UAdd, ast.Not, ast.Invert, ast.And, ast.Or,
             ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
# guards: what ShapeGuardPythonPrinter writes, over L (the inputs), math and torch.sym_*
GUARD_CHARS = re.compile(r"[\w \[\]().,'+\-*/%<>=!&|~]*")
GUARD_NAMES = frozenset({"L", "math", "torch", "inf", "int", "float", "bool", "abs", "min", "max", "round",
                         "IsNonOverlappingAndDenseIndicator", "cast_symbool_to_symint_guardless"})
TENSOR_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})
FACTORIES = frozenset({"list", "dict", "set", "int", "float", "str", "tuple", "bool"})


def plain_text(text: str) -> bool:
    return PLAIN_TEXT.fullmatch(text) is not None


def check_program(path: Path, member: str, program: Any, torch: Any) -> None:
    """A ModelInputError (exit 2) where a string in `program` (the member's parsed JSON) is not of
    a form torch writes and torch would run it."""
    stack: list[Any] = [program]
    while stack:  # by hand: a deep document must not end in RecursionError
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            problem = _problem(key, value, torch)
            if problem is not None:
                raise ModelInputError(f"{path}: {member} holds {problem}, which could run code; refused",
                                      hint=HINT)
            stack.append(value)


def _problem(key: str, value: Any, torch: Any) -> str | None:
    if key == "expr_str" and isinstance(value, str) and not _sympy_ok(value):
        return f"the shape expression {value[:80]!r} for torch to evaluate as Python"
    if key == "guards_code" and isinstance(value, list):
        for guard in value:
            if not isinstance(guard, str) or not _guard_ok(guard):
                return f"the guard {str(guard)[:80]!r} for torch to run as Python"
    if key in ("as_string", "as_strings"):
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not plain_text(text):
                return f"the string {text[:80]!r} (a quote, backslash or control code) to paste into code"
    if key in ("in_spec", "out_spec") and isinstance(value, str):
        return _treespec_problem(value)
    if key == "as_operator" and isinstance(value, str) and not _operator_ok(value, torch):
        return f"the operator {value[:80]!r}, not one of torch's, for torch to call"
    return None


def _sympy_ok(text: str) -> bool:
    """`text` an expression of calls to SYMPY_CALLS (or names sympy makes undefined functions
    of), numbers, symbols and operators: nothing that reaches a Python function by name."""
    import sympy

    defined = set(vars(sympy)) | set(dir(builtins))
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False

    def ok(node: ast.AST, strings: re.Pattern[str] | None = None) -> bool:
        if isinstance(node, ast.Expression):
            return ok(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return strings is not None and strings.fullmatch(node.value) is not None
            return isinstance(node.value, (int, float, bool)) or node.value is None
        if isinstance(node, ast.Name):  # an undefined name becomes a Symbol
            return not node.id.startswith("_") and (node.id not in defined or node.id in SYMPY_NAMES)
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else ""
            if not name or name.startswith("_") or (name in defined and name not in SYMPY_CALLS):
                return False
            pattern = SYMPY_STRING_CALLS.get(name)
            return all(ok(arg, pattern) for arg in node.args) and all(map(_assumption_ok, node.keywords))
        return _operator_node_ok(node, ok)

    return ok(tree)


def _assumption_ok(keyword: ast.keyword) -> bool:
    """Symbol('s0', positive=True), Float('0.5', precision=53): a plain value, never a string."""
    value = keyword.value
    return (keyword.arg is not None and not keyword.arg.startswith("_") and isinstance(value, ast.Constant)
            and isinstance(value.value, (int, float, bool)))


def _operator_node_ok(node: ast.AST, ok: Any) -> bool:
    """Arithmetic, comparisons and boolean operators over operands `ok` accepts."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, OPERATORS) and ok(node.left) and ok(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, OPERATORS) and ok(node.operand)
    if isinstance(node, ast.BoolOp):
        return isinstance(node.op, OPERATORS) and all(ok(value) for value in node.values)
    if isinstance(node, ast.Compare):
        return all(isinstance(op, OPERATORS) for op in node.ops) and ok(node.left) and all(
            ok(value) for value in node.comparators)
    if isinstance(node, ast.IfExp):
        return ok(node.test) and ok(node.body) and ok(node.orelse)
    return False


def _guard_ok(text: str) -> bool:
    """A guard as torch prints one: L['x'].size()[0] <= 16, math.floor(...), torch.sym_max(...)."""
    if GUARD_CHARS.fullmatch(text) is None:  # nothing that could close the string torch pastes it in
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False

    def attribute_ok(node: ast.Attribute) -> bool:
        if node.attr.startswith("_"):
            return False
        if isinstance(node.value, ast.Name) and node.value.id in ("math", "torch"):
            return node.value.id == "math" or node.attr.startswith("sym_")
        return node.attr in TENSOR_METHODS and ok(node.value)

    def ok(node: ast.AST) -> bool:
        if isinstance(node, ast.Expression):
            return ok(node.body)
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float, bool, str)) or node.value is None
        if isinstance(node, ast.Name):
            return node.id in GUARD_NAMES
        if isinstance(node, ast.Attribute):
            return attribute_ok(node)
        if isinstance(node, ast.Subscript):
            return ok(node.value) and not isinstance(node.slice, ast.Slice) and ok(node.slice)
        if isinstance(node, ast.Call):
            callee_ok = (isinstance(node.func, ast.Name) and node.func.id in GUARD_NAMES) or (
                isinstance(node.func, ast.Attribute) and attribute_ok(node.func))
            return callee_ok and not node.keywords and all(
                not isinstance(arg, ast.Starred) and ok(arg) for arg in node.args)
        return _operator_node_ok(node, ok)

    return ok(tree)


def _treespec_problem(text: str) -> str | None:
    """pytree's reader imports an enum's module (enum_object_hook) and a defaultdict factory's
    (_defaultdict_deserialize) by the names the context gives: only a module already imported
    (importing it again runs nothing) and a builtin factory pass."""
    stack: list[Any] = [text]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and item[:1] in ("[", "{"):
            try:
                item = json.loads(item)
            except ValueError:
                continue  # a context torch does not parse as JSON either
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if "__enum__" in item and not _enum_ok(item.get("fqn")):
                return f"the enum {str(item.get('fqn'))[:80]!r} for torch to import"
            if "default_factory_module" in item and (item.get("default_factory_module") != "builtins"
                                                    or item.get("default_factory_name") not in FACTORIES):
                name = f"{item.get('default_factory_module')}.{item.get('default_factory_name')}"
                return f"the defaultdict factory {name[:80]!r} for torch to import"
            stack.extend(item.values())
    return None


def _enum_ok(fqn: Any) -> bool:
    if not isinstance(fqn, str):
        return False
    module_name, _, class_name = fqn.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in class_name.split("."):
        if found is None or not part or part.startswith("_"):
            return False
        found = getattr(found, part, None)
    return isinstance(found, type) and issubclass(found, enum.Enum)


def _operator_ok(name: str, torch: Any) -> bool:
    """`name` resolved as GraphModuleDeserializer.deserialize_operator resolves it, to an operator
    or one of the functions torch's verifier allows."""
    import math
    import operator

    if name.startswith("#"):
        return True  # resolved only through torch's registry of extension handlers
    roots = (("_operator", operator), ("torch", torch), ("math", math))
    root = next((module for prefix, module in roots if name.startswith(prefix)), None)
    if root is None:
        return True  # torch leaves it a string, which nothing calls
    found: Any = root
    for part in name.split(".")[1:]:
        if part.startswith("__"):
            return False
        if not hasattr(found, part):
            return True  # torch stops here and leaves the string
        found = getattr(found, part)
    from torch._export.verifier import Verifier

    kinds = (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)
    return isinstance(found, kinds) or any(found is allowed for allowed in Verifier().allowed_builtin_ops())
