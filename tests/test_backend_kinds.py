"""Nothing outside deploycc/backends/ tests a backend's kind: no `kind == "openvino"`, no
`get_backend("tensorrt")`, no table keyed by kind. What the engine is, the target file says
(`targets.schema.BackendSpec`); what only some backends do is what they contribute to
`backends.base.Backend` (its options, its `stages`: the int8 recipe, the device half; its
`runners`), so a new backend is one module and one line in `targets.schema.BACKENDS`. The bar is
zero."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from deploycc.targets.schema import BACKENDS

PACKAGE = Path(__file__).parents[1] / "deploycc"
KINDS = frozenset(BACKENDS)  # the built-in kinds, as the table spells them
# The one table of kinds (what a target file may name, and the class for each), and the board's
# runner, a program of its own whose `--engine` takes engine names, not target kinds.
EXEMPT = {("targets/schema.py", "BACKENDS"), ("device/run_on_device.py", None)}
# ONNX Runtime on the CPU is deploycc's reference and its host, whatever the target: the runner
# that judges int8 models and runs a partitioned model's host segments. No other module outside
# backends/ imports one backend's module.
REFERENCE_RUNTIME = {("quantize/run.py", "deploycc.backends.onnxruntime"),
                     ("runtime.py", "deploycc.backends.onnxruntime")}
LOOKUPS = {"startswith", "endswith", "get", "pop", "setdefault", "index", "count", "removeprefix",
           "removesuffix"}


def _kind(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in KINDS


def _kind_or_kinds(node: ast.AST) -> bool:
    return _kind(node) or (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(_kind, node.elts)))


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def kind_tests(source: str, skip_assigned: str | None = None) -> list[tuple[int, str]]:
    """(line, code) of every comparison with, or lookup by, a kind's string in `source`; the
    value assigned to the name `skip_assigned` is not looked at."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if skip_assigned and any(isinstance(t, ast.Name) and t.id == skip_assigned for t in targets):
            skipped |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        hit = (
            (isinstance(node, ast.Compare) and any(map(_kind_or_kinds, [node.left, *node.comparators])))
            or (isinstance(node, ast.Call) and (_called(node) == "get_backend" or _called(node) in LOOKUPS)
                and any(map(_kind, node.args)))
            or (isinstance(node, ast.Subscript) and _kind(node.slice))
            # a table keyed by kind (a document with a field named like one, as reference.json's
            # "tensorrt" version, is not)
            or (isinstance(node, ast.Dict) and bool(node.keys)
                and all(key is not None and _kind(key) for key in node.keys))
            or (isinstance(node, ast.MatchValue) and _kind(node.value))
        )
        if hit:
            found.append((getattr(node, "lineno", 0), ast.unparse(node)))
    return found


def backend_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of one backend's own module (deploycc.backends.<kind>)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [(node.lineno, name) for name in names
                  if name.startswith("deploycc.backends.") and name.split(".")[2] in KINDS]
    return found


def outside_backends(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("backends/") or (relative, None) in EXEMPT:
            continue
        source = path.read_text()
        skip = next((name for file, name in EXEMPT if file == relative), None)
        found += [f"{relative}:{line}: {code}" for line, code in kind_tests(source, skip)]
        found += [f"{relative}:{line}: import {module}" for line, module in backend_imports(source)
                  if (relative, module) not in REFERENCE_RUNTIME]
    return found


def test_nothing_outside_backends_tests_a_kind() -> None:
    found = outside_backends(PACKAGE)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("code", [
    'if target.backend.kind == "openvino": pass',
    'ready = "tensorrt" != kind',
    'on_device = kind in ("tensorrt", "onnxruntime")',
    'backend = get_backend("tensorrt")',
    'RUNNERS = {"onnxruntime": run_ort, "openvino": run_ov}',
    'run = RUNNERS["openvino"]',
    'stood_in = not engine.startswith("tensorrt")',
    'match kind:\n    case "onnxruntime":\n        pass',
])
def test_the_check_sees_each_way_of_testing_a_kind(code: str) -> None:
    assert kind_tests(code), code


@pytest.mark.parametrize("code", [
    'PACKAGES = ("onnx", "onnxruntime", "openvino", "tensorrt")',  # names to print, not to test
    'index = {"schema": 1, "tensorrt": version}',  # a document's field
    'backend = get_backend(target.backend.kind)',
    'BACKENDS = {"onnxruntime": "a:B"}',  # the table itself, when it is the one skipped
])
def test_the_check_leaves_what_tests_no_kind(code: str) -> None:
    assert not kind_tests(code, skip_assigned="BACKENDS"), code


def test_the_check_sees_a_backend_module_imported() -> None:
    assert backend_imports("from deploycc.backends.openvino import default_cache_dir")
    assert backend_imports("import deploycc.backends.tensorrt.bundle")
    assert not backend_imports("from deploycc.backends.registry import get_backend")
