"""benchmarks/, tools/ and examples/ are not run by CI, but they use deploycc's modules: a move
inside the package (console.progress_bar went to report/progress.py) must not break them unseen."""

from __future__ import annotations

import ast
import importlib
import types

from tests.conftest import REPO


def _names_used(script_text: str) -> list[tuple[str, str]]:
    """(module, name) for every `from deploycc... import name` and every `alias.attr` read off a
    deploycc module imported by name."""
    tree = ast.parse(script_text)
    used, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("deploycc"):
            for alias in node.names:
                used.append((node.module, alias.name))
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            used.append((modules[node.value.id], node.attr))
    return used


def _exists(module_name: str, name: str) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False  # a name imported from a module, not a module: its attributes are not checked here
    return hasattr(module, name) or _is_module(f"{module_name}.{name}")


def _is_module(name: str) -> bool:
    try:
        return isinstance(importlib.import_module(name), types.ModuleType)
    except ImportError:
        return False


def test_every_deploycc_name_the_scripts_use_exists() -> None:
    missing = []
    for folder in ("benchmarks", "tools", "examples"):
        for script in sorted((REPO / folder).glob("*.py")):
            for module, name in _names_used(script.read_text()):
                if _is_module(module) and not _exists(module, name):
                    missing.append(f"{script.relative_to(REPO)}: {module}.{name}")
    assert not missing, missing
