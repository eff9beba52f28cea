from __future__ import annotations

import gc
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from db import Store
from tests.support.failure_context import failure_context
from tests.support.schedule import long_first_in_each_share

ROOT = Path(__file__).resolve().parent.parent
APP_PYTHON = sys.executable
# Playwright's expect() waits 5 s by default.  CI runs two workers on two cores, each with
# Streamlit, Chromium and often an emulator and the bench client: a page that draws in 1 s
# alone may take 20 s there.  A longer default costs nothing when the page is quick (expect
# returns as soon as the condition holds) and turns a loaded host's slowness into a wait,
# not a failure; an assertion that must stay fast says so with its own timeout.
BROWSER_EXPECT_TIMEOUT_MS = 30_000


def pytest_configure(config: pytest.Config) -> None:
    # A process that collects (an xdist worker, or a run without workers; not xdist's
    # controller, which collects nothing) imports every test module and what they import
    # with the collector off; pytest_collection_finish turns it on and freezes what loaded,
    # so the collector's passes during the tests skip the objects that live as long as the
    # process.
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        gc.disable()
    try:
        from playwright.sync_api import expect
    except ImportError:  # pragma: no cover - the dev requirements install it
        return
    expect.set_options(timeout=BROWSER_EXPECT_TIMEOUT_MS)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.enable()
    gc.freeze()


# Browser tests drive a live Streamlit app from another process, and slow tests run the runner,
# the bench client and emulators as real subprocesses against real timeouts.  On CI's two cores,
# with two test workers and all of those busy, the harness can act at a moment the host has not
# reached yet: four fresh runs of this suite on a new machine each failed one or two different
# tests, none the same twice, each passing alone and in the next run (four browser tests racing
# a Streamlit rerun, a lock probe over a dozen probes, a runner stopped after its short run had
# ended).  Each of those is fixed at its source; beyond that, a browser or slow test gets one
# rerun.  The first failure is still printed (pytest-rerunfailures lists it as a rerun, with
# its traceback: --rerun-show-tracebacks in pyproject.toml), a test that fails twice fails,
# and no other test is rerun.
RERUNS = 1
RERUN_MARKS = ("browser", "slow")


def _is_long(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) is not None for mark in RERUN_MARKS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # set in xdist's workers
    items[:] = long_first_in_each_share(items, workers, lambda item: item.nodeid.split("::")[0], _is_long)
    for item in items:
        if _is_long(item) and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS, reruns_delay=2))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed browser test's report carries what the page showed and the app's log tail:
    CI keeps only the text of a run, and a wait that timed out says what it waited for, not
    what was there instead."""
    report = yield
    if report.failed and call.when == "call":
        # In the failure itself, not in the report's sections: a rerun's summary prints
        # only the failure (pytest-rerunfailures), and a rerun is where a flaky cause hides.
        add = getattr(report.longrepr, "addsection", None)
        for title, text in failure_context(item):
            if add is not None:
                add(title, text)
            else:
                report.sections.append((title, text))
    return report


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

    from tests.support.app_server import ACTION_TIMEOUT_MS, CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # Tall: Streamlit scrolls inside its own container, so screenshots show what fits here.
        page = browser.new_page(viewport={"width": 1400, "height": 2200}, locale="ja-JP")
        page.set_default_timeout(ACTION_TIMEOUT_MS)
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


@pytest.fixture(autouse=True)
def _no_kept_connection_between_tests() -> Iterator[None]:
    """An AppTest run starts Streamlit's runtime in this process, and the app's store then
    keeps its DuckDB connection (pages/parts/common.py ``store``): a process-wide switch
    that would leak into the next test of the same worker.  Switched off after every test."""
    yield
    from db import connection

    connection.keep_open(0)
