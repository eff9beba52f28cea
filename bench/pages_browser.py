"""Every page of the real app in headless Chromium, with 10,000 runs × 20 points in the DB.

The app is started as ``make run`` starts it (``scripts/serve_app.py``, local sign-in,
English) on a free loopback port against a synthetic store (``bench/synthetic.py``, every
run given a real plan so that the run page renders it as it would a queued one).  One
browser profile on disk serves every tab, so the browser keeps Streamlit's scripts and
their compiled code as a user's browser does (``_browser_context``).  Each
page is timed three ways, from the user's action (``performance.now()`` in the page) to:

- **first content**: the page's own main element is on screen (``FIRST_CONTENT``: the
  runs table, the form's button, the compare page's metrics table, ...);
- **settled**: Streamlit reports its script as not running
  (``[data-testid="stApp"][data-test-script-state="notRunning"]``, the attribute behind
  the running indicator), no skeleton (``stSkeleton``) and no stale element
  (``data-stale="true"``) are left, and this has held for ``_STABLE_MS``.  A skeleton is
  an element whose code is still loading (charts, tables): the user sees a placeholder.
  The window is short because the live pages rerun a fragment every 2–3 s.

The three visits:

- **cold**: the first visit of that page after the app process started (its caches
  empty), by URL in a fresh tab (a new Streamlit session, Streamlit's scripts loaded and
  its websocket opened first), in a browser that has opened the app before (an earlier
  app process on the same port was visited twice, then stopped: ``_prime``), once the
  server has imported the pages' modules (it says so in its output: scripts/serve_app.py).
  One such visit varied by half a second from one app start to the next here, so the app
  is started ``COLD_ROUNDS`` times and every page visited cold once per start, in menu
  order and nothing else between (the reloads and returns come after the last start's
  cold visits): the line gives the median and, in brackets, the fastest and slowest
  settled time.  In the first start the browser has cached only what the pages before it
  loaded (a page's first visit fetches the scripts of elements no page before it drew);
  in the later ones, everything, as a returning user's browser has;
- **reload**: the median of 5 more such fresh-tab visits;
- **in app** (warm): the median of 5 returns to the page inside the open app, as a user
  moves between pages: from the page, the sidebar's link to another page, then the
  browser's Back button, which Streamlit answers in the same tab and session with the
  page and its query string (the compare page's selection, the run page's run).  The
  other page is the Imports page (no table or chart, so nothing of it can pass for the
  measured page's content), or the Overview when the Imports page is measured.

``FLOOR`` is a one-page Streamlit app showing a ten-row table, measured the same three
ways: what Streamlit itself costs on this machine before benchdeck does anything; and
once more in a private window (``FLOOR private``), whose compiled code is not kept.
Pages are visited in menu order, so a page's cold visit may profit from what an earlier
page cached (the runs list, the store).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import synthetic
from db.connection import transaction
from db.store import Store
from domain.plan.run_plan import RunPlan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support is not a package of the app

from scripts.serve_app import WARMED_UP  # noqa: E402
from tests.support.app_server import CHROMIUM, CHROMIUM_ARGS, free_port, running_app  # noqa: E402

WARM_VISITS = 5
COLD_ROUNDS = 3  # app starts, each with one cold visit of every page
_STABLE_MS = 100
_TIMEOUT_MS = 60_000
_COMPARED = 8  # runs compared with the baseline

# What each page is for, on screen: the first of these in the main area counts as content.
_TABLE_OR_CHART = ('[data-testid="stMain"] [data-testid="stDataFrame"], '
                   '[data-testid="stMain"] [data-testid="stVegaLiteChart"]')
FIRST_CONTENT = {
    "overview": '[data-testid="stMain"] [data-testid="stDataFrame"]',
    "build": '[data-testid="stMain"] [data-testid="stFormSubmitButton"]',
    "runs": '[data-testid="stMain"] [data-testid="stDataFrame"]',
    "run": _TABLE_OR_CHART,
    "compare": _TABLE_OR_CHART,
    "checklist": '[data-testid="stMain"] [data-testid="stDataFrame"]',
    "imports": '[data-testid="stMain"] [data-testid="stFileUploader"]',
}

# Installed in every page before its scripts: window.__bdStart(first, stableMs, t0) stamps
# first content and settled in window.__bd, relative to t0 (0: navigation start), so that
# the timing does not depend on how often Python polls.  Called again for an in-app visit.
_PROBE = """
window.__bdStart = (firstSel, stableMs, t0) => {
  const bd = {first: null, settled: null, error: false};
  window.__bd = bd;
  let since = null;
  const tick = () => {
    if (window.__bd !== bd) return;  // re-armed for another visit
    const now = performance.now();
    if (bd.first === null && document.querySelector(firstSel)) bd.first = now - t0;
    if (document.querySelector('[data-testid="stException"]')) bd.error = true;
    const app = document.querySelector('[data-testid="stApp"]');
    const idle = (bd.first !== null || bd.error)
      && app && app.getAttribute('data-test-script-state') === 'notRunning'
      && !document.querySelector('[data-testid="stSkeleton"]') && !document.querySelector('[data-stale="true"]');
    if (!idle) { since = null; }
    else if (since === null) { since = now; }
    else if (bd.settled === null && now - since >= stableMs) { bd.settled = since - t0; return; }
    setTimeout(tick, 10);
  };
  tick();
};
"""
_ARM_AT_LOAD = "window.__bdStart(%s, %d, 0);"
# An in-app return: armed, then the browser's Back in the same task, so t0 is the click.
_ARM_AND_GO_BACK = "([sel, ms]) => { window.__bdStart(sel, ms, performance.now()); history.back(); }"


@dataclass(frozen=True)
class Visit:
    first_s: float
    settled_s: float
    error: bool = False  # the page showed an exception (st.exception box): its times are not the page's


@dataclass(frozen=True)
class PageTimes:
    cold: list[Visit]  # one per app start
    reload: list[Visit]
    in_app: list[Visit]


def build_store(db: Path, *, runs: int, points_per_run: int) -> Store:
    """The synthetic runs, each with the quick preset's plan (the generator stores ``{}``)."""
    store = Store(db, lock_timeout_s=120)
    synthetic.fill(store, runs=runs, points_per_run=points_per_run)
    plan = RunPlan(name="synthetic", engine="emulator", model="Qwen/Qwen3-30B-A3B",
                   gpu={"type": "H200", "count": 1})  # type: ignore[arg-type]
    with transaction(db, lock_timeout_s=120) as con:
        con.execute("UPDATE runs SET plan = ? WHERE submitted_by = 'synthetic'", [plan.model_dump_json()])
    return store


def page_urls(base: str, store: Store) -> dict[str, str]:
    newest = max(r.id for r in store.list_runs(limit=_COMPARED + 1))
    others = ",".join(str(newest - i) for i in range(1, _COMPARED + 1))
    return {
        "overview": f"{base}/",
        "build": f"{base}/build",
        "runs": f"{base}/runs",
        "run": f"{base}/run?run={newest}",
        "compare": f"{base}/compare?baseline={newest}&runs={others}",
        "checklist": f"{base}/checklist?baseline={newest}&runs={others}",
        "imports": f"{base}/imports",
    }


# The sidebar link each in-app visit leaves by (href ends with it), and what shows it arrived.
_AWAY = {"default": ("/imports", FIRST_CONTENT["imports"]), "imports": ("/", FIRST_CONTENT["overview"])}


def _stamps(page: Any) -> Visit:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("window.__bd && window.__bd.settled !== null", timeout=_TIMEOUT_MS, polling=100)
    except PlaywrightTimeout:
        pass  # reported as a time of "nan": the page never settled within the timeout
    stamps = page.evaluate("window.__bd")
    return Visit(_seconds(stamps["first"]), _seconds(stamps["settled"]), bool(stamps["error"]))


def visit(context: Any, name: str, url: str, first: str | None = None) -> Visit:
    """One visit in a fresh tab of ``context`` (a new Streamlit session; the browser's
    cache is the context's, kept between tabs as a user's browser keeps it)."""
    page = context.new_page()
    try:
        page.add_init_script(_PROBE + _ARM_AT_LOAD % (repr(first or FIRST_CONTENT[name]), _STABLE_MS))
        page.goto(url, wait_until="commit")
        return _stamps(page)
    finally:
        page.close()


def visits_in_app(context: Any, name: str, url: str, times: int, first: str | None = None) -> list[Visit]:
    """``times`` returns to the page in one open tab: away by the sidebar, back by Back."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    sel = first or FIRST_CONTENT[name]
    href, away_sel = _AWAY.get(name, _AWAY["default"])
    page = context.new_page()
    try:
        page.add_init_script(_PROBE + _ARM_AT_LOAD % (repr(sel), _STABLE_MS))
        page.goto(url, wait_until="commit")
        _stamps(page)
        out = []
        for _ in range(times):
            page.evaluate("([sel, ms]) => window.__bdStart(sel, ms, performance.now())", [away_sel, _STABLE_MS])
            try:
                page.locator(f'[data-testid="stSidebarNav"] a[href$="{href}"]').first.click(timeout=_TIMEOUT_MS)
            except PlaywrightTimeout:  # no way away: this return is reported as "nan", not measured
                out.append(Visit(math.nan, math.nan))
                continue
            # Away means the URL changed too: the away page's content may also be on the
            # measured page (the build page has a file uploader), and a Back pressed before
            # Streamlit pushed the new URL would leave the app.
            page.wait_for_function("(h) => location.pathname.endsWith(h)", arg=href, timeout=_TIMEOUT_MS)
            _stamps(page)
            page.evaluate(_ARM_AND_GO_BACK, [sel, _STABLE_MS])
            out.append(_stamps(page))
        return out
    finally:
        page.close()


def _seconds(ms: float | None) -> float:
    return math.nan if ms is None else ms / 1000


def _env(db: Path, tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCHDECK_DB=str(db), BENCHDECK_LANGUAGE="en", BENCHDECK_WORK_DIR=str(tmp / "runs"),
               BENCHDECK_AUTH_MODE="local", PYTHONPATH=str(ROOT))
    return env


_VIEWPORT = {"width": 1400, "height": 1000}


class _Profile:
    """A browser on a profile directory of its own, closed as a browser is."""

    def __init__(self, context: Any, directory: tempfile.TemporaryDirectory[str]) -> None:
        self.context, self.directory = context, directory

    def close(self) -> None:
        self.context.close()
        self.directory.cleanup()


def _browser_context(pw: Any, private: bool = False) -> tuple[Any, Any]:
    """A browser and the one context that opens every tab.  By default a profile on disk,
    as a user's browser has: Chromium keeps compiled scripts in it (V8's code cache, the
    profile's "Code Cache" folder).  Playwright's ``browser.new_context()`` is a private
    (incognito) context, which keeps none on disk; measured here (the floor app, four runs
    each way, primed as below), Streamlit alone was about 0.4 s slower in one, cold and on
    reload.  ``private``: that context, as a private window."""
    if private:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        return browser, browser.new_context(viewport=_VIEWPORT)
    directory = tempfile.TemporaryDirectory(prefix="bench-profile-")
    context = pw.chromium.launch_persistent_context(directory.name, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                    viewport=_VIEWPORT)
    return _Profile(context, directory), context


def _page_times(context: Any, name: str, url: str, first: str | None = None) -> PageTimes:
    cold = visit(context, name, url, first)
    return PageTimes([cold], *_warm_times(context, name, url, first))


def _warm_times(context: Any, name: str, url: str, first: str | None = None) -> tuple[list[Visit], list[Visit]]:
    """The reloads and the returns in the app, after the page's cold visit."""
    reload = [visit(context, name, url, first) for _ in range(WARM_VISITS)]
    return reload, visits_in_app(context, name, url, WARM_VISITS, first)


PRIMING_VISITS = 2


def _prime(context: Any, url: str, first: str) -> None:
    """Visits, so that the browser holds Streamlit's scripts as a user's browser that has
    opened the app before does: in its HTTP cache from the first, compiled (the profile's
    "Code Cache", 0.2 → 1.7 MB here) from the second."""
    for _ in range(PRIMING_VISITS):
        visit(context, "", url, first)


def _await_warm_up(log: Path, timeout_s: float = 60) -> None:
    """Until the server says it imported the pages' modules (scripts/serve_app.py): the
    first visitor of a started app arrives after that, not during it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and WARMED_UP in log.read_text(encoding="utf-8", errors="replace"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the app did not finish its warm-up in {timeout_s:.0f} s ({log})")


def measure(db: Path, tmp: Path, store: Store) -> dict[str, PageTimes]:
    """Per page, as measured.  The app is started on one port: first only to prime the
    browser, then ``COLD_ROUNDS`` times, each measured from its start (caches empty): one
    cold visit of every page, in menu order, in each start (so that every cold visit
    follows the same pages), then, in the last start, every page's reloads and returns."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    cold: dict[str, list[Visit]] = {}
    with sync_playwright() as pw:
        browser, context = _browser_context(pw)
        try:
            with running_app(_env(db, tmp), timeout_s=120, port=port) as base:
                _prime(context, f"{base}/imports", FIRST_CONTENT["imports"])
            for round_index in range(COLD_ROUNDS):
                with running_app(_env(db, tmp), timeout_s=120, port=port) as base:
                    _await_warm_up(tmp / f"streamlit-{port}.log")
                    urls = page_urls(base, store)
                    for name, url in urls.items():
                        cold.setdefault(name, []).append(visit(context, name, url))
                    if round_index == COLD_ROUNDS - 1:
                        return {name: PageTimes(cold[name], *_warm_times(context, name, url))
                                for name, url in urls.items()}
        finally:
            browser.close()
    raise AssertionError(f"COLD_ROUNDS must be at least 1, not {COLD_ROUNDS}")


# Streamlit alone: the frame (st.navigation) and two pages, one a ten-row table.
_FLOOR_APP = """
import pandas as pd
import streamlit as st
st.set_page_config(page_title="floor", layout="wide")
def table():
    st.title("Table")
    st.dataframe(pd.DataFrame({"x": range(10)}))
def imports():
    st.title("Imports")
    st.file_uploader("file")
st.navigation([st.Page(table, title="Table", url_path="table", default=True),
               st.Page(imports, title="Imports", url_path="imports")]).run()
"""


def measure_floor(tmp: Path, private: bool = False) -> PageTimes:
    """The floor app's table page, measured as the pages are (primed the same way);
    ``private``: in a private window."""
    from playwright.sync_api import sync_playwright

    script = tmp / "floor_app.py"
    script.write_text(_FLOOR_APP, encoding="utf-8")
    command = (sys.executable, "-m", "streamlit", "run", str(script))
    port = free_port()
    with sync_playwright() as pw:
        browser, context = _browser_context(pw, private)
        try:
            with running_app(_env(tmp / "floor.duckdb", tmp), port=port, command=command) as base:
                _prime(context, f"{base}/imports", FIRST_CONTENT["imports"])
            with running_app(_env(tmp / "floor.duckdb", tmp), port=port, command=command) as base:
                times = _page_times(context, "overview", f"{base}/")
            for _ in range(COLD_ROUNDS - 1):
                with running_app(_env(tmp / "floor.duckdb", tmp), port=port, command=command) as base:
                    times.cold.append(visit(context, "overview", f"{base}/"))
            return times
        finally:
            browser.close()


def _median(visits: list[Visit]) -> Visit:
    """The median of the visits that were measured (a visit that never settled is "nan")."""
    kept = [v for v in visits if not math.isnan(v.settled_s)] or visits
    return Visit(statistics.median(v.first_s for v in kept), statistics.median(v.settled_s for v in kept),
                 any(v.error for v in visits))


def _spread(visits: list[Visit]) -> str:
    """The fastest and slowest settled times of the visits that settled: "[1.42–2.10]"."""
    settled = [v.settled_s for v in visits if not math.isnan(v.settled_s)]
    return f"[{min(settled):4.2f}–{max(settled):4.2f}]" if settled else "[ n/a ]"


def _line(name: str, times: PageTimes) -> str:
    cold, reload, in_app = _median(times.cold), _median(times.reload), _median(times.in_app)
    flag = "  (page showed an exception)" if cold.error or reload.error or in_app.error else ""
    unmeasured = sum(math.isnan(v.settled_s) for v in [*times.cold, *times.reload, *times.in_app])
    flag += f"  ({unmeasured} visits never settled: left out)" if unmeasured else ""
    return (f"  {name:<13} cold {cold.first_s:5.2f} / {cold.settled_s:5.2f} {_spread(times.cold)} | "
            f"reload {reload.first_s:5.2f} / {reload.settled_s:5.2f} | "
            f"in app {in_app.first_s:5.2f} / {in_app.settled_s:5.2f}{flag}")


def run(quick: bool = False) -> None:
    runs, points = (1_000, 20) if quick else (10_000, 20)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        db = tmp / "pages.duckdb"
        start = time.perf_counter()
        store = build_store(db, runs=runs, points_per_run=points)
        print(f"pages in Chromium: {runs:,} runs × {points} points (built in {time.perf_counter() - start:.0f} s); "
              f"seconds from the user's action to first content / settled; cold = median of the first "
              f"fresh-tab visit after each of {COLD_ROUNDS} app starts [fastest–slowest settled], reload = "
              f"median of {WARM_VISITS} more, in app = median of {WARM_VISITS} returns inside the open app "
              f"(goals: cold ≤ 2.0 s, in app ≤ 1.0 s settled)", flush=True)
        print(_line("FLOOR", measure_floor(tmp)), "  (Streamlit alone: a ten-row table page)", flush=True)
        print(_line("FLOOR private", measure_floor(tmp, private=True)), "  (the same in a private window)", flush=True)
        for name, times in measure(db, tmp, store).items():
            print(_line(name, times), flush=True)
