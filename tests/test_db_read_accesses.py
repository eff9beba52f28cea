"""The Store's read accesses (``_read``: ``connect(..., reading=True)``) run only SELECTs.

A serving holder runs such an access beside its own writes, in a read-only transaction
(db/serving.py), where DuckDB refuses a write at run time.  This reads the code instead,
so that a write slipped into a read block fails here, by name, not on a busy day."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from types import ModuleType

import pytest

from db import queries, watch_queries
from tests.conftest import ROOT

# Each file with read blocks, and the query module its ``q.``/``wq.`` names come from.
_READERS = {"db/store.py": ("q", queries), "db/watch_store.py": ("wq", watch_queries)}


def _read_blocks(tree: ast.AST) -> Iterator[ast.With]:
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and isinstance(item.context_expr.func, ast.Attribute)
                and item.context_expr.func.attr == "_read" for item in node.items):
            yield node


def _statements(block: ast.With, alias: str, module: ModuleType) -> Iterator[tuple[int, str]]:
    """(line, SQL) of each statement the block runs; a statement that is not one of the
    query module's names (or a literal) fails: it cannot be checked."""
    target = block.items[0].optional_vars
    assert isinstance(target, ast.Name)
    for call in ast.walk(block):
        if not isinstance(call, ast.Call):
            continue
        assert not any(isinstance(a, ast.Name) and a.id == target.id for a in call.args), (
            f"line {call.lineno}: the read connection is handed to {ast.unparse(call.func)}, which this cannot follow")
        if not (isinstance(call.func, ast.Attribute) and call.func.attr in ("execute", "executemany")):
            continue
        sql = call.args[0]
        if isinstance(sql, ast.Constant) and isinstance(sql.value, str):
            yield call.lineno, sql.value
        elif isinstance(sql, ast.Attribute) and isinstance(sql.value, ast.Name) and sql.value.id == alias:
            yield call.lineno, getattr(module, sql.attr)
        else:
            pytest.fail(f"line {call.lineno}: a statement this cannot read: {ast.unparse(sql)}")


def test_every_read_access_runs_only_selects() -> None:
    checked = 0
    for relative, (alias, module) in _READERS.items():
        tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
        for block in _read_blocks(tree):
            for line, sql in _statements(block, alias, module):
                first = sql.lstrip().split(None, 1)[0].upper()
                assert first in ("SELECT", "WITH"), f"{relative}:{line} runs a {first} in a read access"
                checked += 1
    assert checked >= 30  # the Store's and the watch store's reads were all found (32 today)


def test_the_check_finds_a_write_in_a_read_block() -> None:
    source = "def f(self):\n    with self._read() as con:\n        con.execute(q.INSERT_AUDIT, [])\n"
    [block] = _read_blocks(ast.parse(source))
    [(_, sql)] = _statements(block, "q", queries)
    assert sql.lstrip().upper().startswith("INSERT")
