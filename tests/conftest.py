from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from db import Store

ROOT = Path(__file__).resolve().parent.parent
APP_PYTHON = sys.executable


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh, real DuckDB file per test."""
    return tmp_path / "bench.duckdb"


@pytest.fixture
def store(db_path: Path) -> Store:
    s = Store(db_path, lock_timeout_s=10)
    s.migrate()
    return s


@pytest.fixture
def env(db_path: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for subprocesses of ours: this test's DB, short timeouts."""
    e = dict(os.environ)
    e.update(
        BENCHDECK_DB=str(db_path),
        BENCHDECK_LANGUAGE="en",
        BENCHDECK_WORK_DIR=str(tmp_path / "runs"),
        PYTHONPATH=str(ROOT),
    )
    yield e
