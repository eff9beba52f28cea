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


@pytest.fixture
def browser_page() -> Iterator[object]:
    """A fresh headless Chromium page (Playwright over Debian's chromium)."""
    from playwright.sync_api import sync_playwright

    from tests.support.app_server import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # Tall: Streamlit scrolls inside its own container, so screenshots show what fits here.
        page = browser.new_page(viewport={"width": 1400, "height": 2200}, locale="ja-JP")
        try:
            yield page
        finally:
            browser.close()


@pytest.fixture
def app_env(db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """AppTest runs pages in this process: point the settings at this test's DB and clear
    Streamlit's caches (the Store is cached per process, and each test has its own file)."""
    import streamlit as st

    from domain.core.settings import get_settings

    monkeypatch.setenv("BENCHDECK_DB", str(db_path))
    monkeypatch.setenv("BENCHDECK_LANGUAGE", "en")
    monkeypatch.setenv("BENCHDECK_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BENCHDECK_LOCK_TIMEOUT_S", "0.5")
    get_settings.cache_clear()
    st.cache_data.clear()
    st.cache_resource.clear()
    yield db_path
    get_settings.cache_clear()
    st.cache_resource.clear()
