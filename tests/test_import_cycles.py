"""No import cycle among benchdeck's own modules, read statically from every module's AST.

An import counts wherever it stands (inside a function, under ``TYPE_CHECKING``): a cycle
that only a late import or a type-checking guard keeps from failing is still two modules
that cannot be read, tested or moved apart.  ``from package import name`` is an arrow to
the submodule ``package.name`` when there is one, else to the package; a relative import
is resolved against the file's package.  The implicit import of a parent package's
``__init__`` is not counted (Python's own order, not a design choice).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

ROOMS = ("app.py", "pages", "runner", "db", "domain", "emulator", "tools", "bench", "tests", "scripts")
SKIPPED_DIRS = frozenset({"build", "data", "__pycache__", "node_modules", "test-artifacts"})


def _files(root: Path) -> Iterator[Path]:
    for room in ROOMS:
        top = root / room
        if top.is_file():
            yield top
            continue
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.Import | ast.ImportFrom, package: list[str], modules: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & modules
    base = package[:len(package) - node.level + 1] if node.level else []
    source = ".".join([*base, *([node.module] if node.module else [])])
    found = set()
    for alias in node.names:
        submodule = f"{source}.{alias.name}" if source else alias.name
        if submodule in modules:
            found.add(submodule)
        elif source in modules:
            found.add(source)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each project module and the project modules it imports."""
    files = {module_name(path.relative_to(root)): path for path in _files(root)}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        relative = path.relative_to(root)
        package = list(relative.parts[:-1])
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(relative))
        graph[name] = {target for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                       for target in _targets(node, package, modules)} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start not in index:
            _visit(start, graph, index, low, stack, on_stack, found)
    return found


def _visit(start: str, graph: dict[str, set[str]], index: dict[str, int], low: dict[str, int],
           stack: list[str], on_stack: set[str], found: list[list[str]]) -> None:
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
        node, targets = work[-1]
        target = next(targets, None)
        if target is not None:
            if target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                on_stack.discard(member)
                component.append(member)
            on_stack.discard(node)
            if component:
                found.append(sorted([node, *component]))


def test_no_module_of_the_project_takes_part_in_an_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (each line: modules that import each other, directly or not):\n" + "\n".join(
        "  " + " ↔ ".join(component) for component in found)


def test_the_reader_finds_late_guarded_and_relative_cycles(tmp_path: Path) -> None:
    package = tmp_path / "domain" / "plan"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def late():\n    from domain.plan import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (package / "c.py").write_text("from . import a\nimport os\n")
    (package / "d.py").write_text("from domain.plan.a import late\n")  # imports into the cycle, not part of it
    graph = import_graph(tmp_path)
    assert graph["domain.plan.c"] == {"domain.plan.a"}
    assert cycles(graph) == [["domain.plan.a", "domain.plan.b", "domain.plan.c"]]
