"""benchmarks/ sits above the house: its scripts import deploycc and each other, and no two of them
import each other, however far round; nothing in deploycc/ or tests/ imports them (an arrow up into
code CI does not run). import-linter cannot hold this: benchmarks/ is no package, its scripts put
their folders on sys.path and import one another by bare name (`from catalog import lookup`), which
grimp takes for a third-party package. So the graph is read here with ast, each bare name resolved as
the scripts' sys.path resolves it: the importer's own folder, then the folders above it, then a
module of that name elsewhere under benchmarks/ (a script that puts a subfolder on its path)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

BENCHMARKS = REPO / "benchmarks"


def _scripts() -> list[Path]:
    # benchmarks/zoo/models/ holds the exported zoo (ignored by git), not code
    return sorted(p for p in BENCHMARKS.rglob("*.py") if "models" not in p.relative_to(BENCHMARKS).parts[:-1])


def _imported(path: Path) -> list[str]:
    """The dotted names a module imports, at any depth (a function's lazy import is an arrow too);
    `from a import b` gives a.b as well as a, since b may be a module."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _resolve(importer: Path, name: str, by_stem: dict[str, list[Path]]) -> Path | None:
    """The benchmarks/ module `name` is, as seen from `importer`; None for deploycc, the standard
    library and third-party packages."""
    parts = name.split(".")
    if parts[0] == "benchmarks":
        candidate = REPO.joinpath(*parts).with_suffix(".py")
        return candidate if candidate.is_file() else None
    if len(parts) > 1:
        return None  # a bare name's attribute (`from catalog import lookup`), or a package's module
    folder = importer.parent
    while folder == BENCHMARKS or BENCHMARKS in folder.parents:
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
        folder = folder.parent
    elsewhere = by_stem.get(name, [])
    return elsewhere[0] if len(elsewhere) == 1 else None


def benchmark_graph() -> dict[Path, set[Path]]:
    scripts = _scripts()
    by_stem: dict[str, list[Path]] = {}
    for script in scripts:
        by_stem.setdefault(script.stem, []).append(script)
    graph = {}
    for script in scripts:
        found = {_resolve(script, name, by_stem) for name in _imported(script)}
        graph[script] = {p for p in found if p is not None and p != script}
    return graph


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Each import cycle once, as the modules round it (a depth-first walk's back edges)."""
    found, state = [], {}  # state: 1 on the walk's path, 2 done
    path: list[Path] = []

    def walk(module: Path) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                found.append([*path[path.index(imported):], imported])
            elif imported not in state:
                walk(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return found


def test_the_benchmark_scripts_import_each_other_without_a_cycle() -> None:
    graph = benchmark_graph()
    # the graph is read at all: the zoo's catalog imports more_families, make imports catalog
    zoo = BENCHMARKS / "zoo"
    assert zoo / "more_families.py" in graph[zoo / "catalog.py"]
    assert zoo / "catalog.py" in graph[zoo / "make.py"]
    assert BENCHMARKS / "corpus.py" in graph[zoo / "zoo_model.py"]
    found = [" -> ".join(str(p.relative_to(REPO)) for p in cycle) for cycle in cycles(graph)]
    assert not found, found


def test_a_cycle_is_found_however_far_round() -> None:
    a, b, c = Path("a.py"), Path("b.py"), Path("c.py")
    assert cycles({a: {b}, b: {c}, c: {a}}) == [[a, b, c, a]]
    assert cycles({a: {b, c}, b: {c}, c: set()}) == []


def test_nothing_below_imports_the_benchmarks() -> None:
    stems = {p.stem for p in _scripts()}
    upward = []
    for folder in ("deploycc", "tests"):
        for module in sorted((REPO / folder).rglob("*.py")):
            for name in _imported(module):
                top = name.split(".")[0]
                if top == "benchmarks" or (top in stems and name == top):
                    upward.append(f"{module.relative_to(REPO)} imports {name}")
    assert not upward, upward
