"""The rooms of the tree and the one-way arrows between them (docs/architecture.md), read
from the code's own imports.

Every ``.py`` file is parsed with :mod:`ast`; every ``import x`` and ``from x import y`` is
counted wherever it stands (inside a function, under ``TYPE_CHECKING``, in a ``try``), and a
relative import is resolved against the file's package.  A rule names the files it covers
(path prefixes) and the top-level modules they must not import; a failure lists each
offending ``file:line → module``.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Top-level packages (and app.py's module) that are benchdeck's own.
BENCHDECK = frozenset({"app", "pages", "runner", "db", "domain", "emulator", "tools", "bench", "tests", "scripts"})
ROOMS = frozenset({"app.py", *BENCHDECK - {"app"}})
# Not source: virtual environments, caches, and the ignored build/ and data/ folders
# (build/ holds the SGLang clients' own files fetched for the import fixtures).
SKIPPED_DIRS = frozenset({"build", "data", "__pycache__", "node_modules", "test-artifacts"})
CHART_AND_SLIDE_LIBRARIES = ("altair", "vl_convert", "pptx")


@dataclass(frozen=True)
class Import:
    path: str  # relative to the repository root, with '/'
    line: int
    module: str  # absolute dotted name

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} → {self.module}"


@dataclass(frozen=True)
class Rule:
    name: str
    sources: tuple[str, ...]  # path prefixes ('runner/') or whole files ('app.py')
    forbidden: frozenset[str]  # top-level module names
    exempt: tuple[str, ...] = ()  # path prefixes inside ``sources`` the rule leaves out

    def covers(self, path: str) -> bool:
        return path.startswith(self.sources) and not path.startswith(self.exempt)  # startswith(()) is False

    def breaches(self, imports: list[Import]) -> list[Import]:
        return [i for i in imports if self.covers(i.path) and i.top in self.forbidden]


RULES = (
    Rule("pages do not import the runner", ("pages/", "app.py"), frozenset({"runner"})),
    Rule("the runner does not import streamlit, pages or tools", ("runner/",),
         frozenset({"streamlit", "pages", "tools"})),
    Rule("the runner does not import duckdb (it goes through db/)", ("runner/",), frozenset({"duckdb"})),
    Rule("db does not import pages, the runner or streamlit", ("db/",), frozenset({"pages", "runner", "streamlit"})),
    Rule("domain imports no db, runner, pages, streamlit or emulator", ("domain/",),
         frozenset({"db", "runner", "pages", "streamlit", "emulator"})),
    Rule("the emulator imports only itself, domain and third-party code", ("emulator/",),
         BENCHDECK - {"emulator", "domain"}),
    Rule("runner/sglang_side/ (run by the SGLang interpreter) imports nothing of benchdeck",
         ("runner/sglang_side/",), BENCHDECK),
    # Every file ('' prefixes all); tests open the exports they check with these libraries.
    Rule("only domain/render/ imports altair, vl-convert and python-pptx", ("",),
         frozenset(CHART_AND_SLIDE_LIBRARIES), exempt=("domain/render/", "tests/")),
)


# -- reading the tree ----------------------------------------------------------------------------


def source_files(root: Path = ROOT) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)  # prune, don't walk
        yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def package_of(relative: Path) -> list[str]:
    """The dotted package a file's relative imports start from ('runner/sglang_side/x.py' →
    ['runner', 'sglang_side'])."""
    return list(relative.parts[:-1])


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    relative = path.relative_to(root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(relative))
    return [
        Import(relative.as_posix(), node.lineno, module)
        for node in ast.walk(tree)  # every depth: imports inside functions count too
        if isinstance(node, ast.Import | ast.ImportFrom)
        for module in _modules(node, package_of(relative))
    ]


def _modules(node: ast.Import | ast.ImportFrom, package: list[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module or ""]
    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
    if node.module:
        return [".".join([*base, node.module])]
    # 'from . import x': each name may be a module of the package.
    return [".".join([*base, alias.name]) for alias in node.names]


@pytest.fixture(scope="module")
def all_imports() -> list[Import]:
    return [i for path in source_files() for i in imports_of(path)]


def report(rule: Rule, breaches: list[Import]) -> str:
    return f"{rule.name}; offending imports:\n" + "\n".join(f"  {b}" for b in breaches)


# -- the arrows ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_no_import_crosses_a_forbidden_direction(rule: Rule, all_imports: list[Import]) -> None:
    breaches = rule.breaches(all_imports)
    assert not breaches, report(rule, breaches)


def test_every_source_file_is_in_a_known_room() -> None:
    strays = sorted(p.relative_to(ROOT).as_posix() for p in source_files()
                    if p.relative_to(ROOT).parts[0] not in ROOMS)
    assert not strays, f"files outside the rooms {sorted(ROOMS)}:\n" + "\n".join(f"  {s}" for s in strays)


# -- the reader itself ---------------------------------------------------------------------------


def test_imports_inside_functions_and_relative_imports_are_read(tmp_path: Path) -> None:
    package = tmp_path / "runner" / "sglang_side"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(
        "import os.path\n"
        "from . import sibling\n"
        "from ..lease import Lease\n"
        "def late():\n"
        "    from db.store import Store\n",
        encoding="utf-8")
    found = imports_of(package / "probe.py", root=tmp_path)
    assert [(i.line, i.module) for i in found] == [
        (1, "os.path"), (2, "runner.sglang_side.sibling"), (3, "runner.lease"), (5, "db.store")]


def test_a_rule_reports_file_line_and_module() -> None:
    rule = RULES[0]
    breach = Import("pages/x.py", 7, "runner.cli")
    assert rule.breaches([breach, Import("db/y.py", 1, "runner.cli")]) == [breach]
    assert "pages/x.py:7 → runner.cli" in report(rule, [breach])
