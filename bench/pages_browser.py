"""Every page of the real app in headless Chromium, with 10,000 runs × 20 points in the DB.

The app is started as ``make run`` starts it (``scripts/serve_app.py``, local sign-in,
English) on a free loopback port against a synthetic store (``bench/synthetic.py``, every
run given a real plan so that the run page renders it as it would a queued one).  Each
page is opened by URL in a fresh tab, as a link or a reload opens it, and timed from
navigation start (``performance.now()`` in the page) to:

- **first content**: the page's own main element is on screen (``FIRST_CONTENT``: the
  runs table, the form's button, the compare page's metrics table, ...);
- **settled**: Streamlit reports its script as not running
  (``[data-testid="stApp"][data-test-script-state="notRunning"]``, the attribute behind
  the running indicator), no skeleton (``stSkeleton``) and no stale element
  (``data-stale="true"``) are left, and this has held for ``_STABLE_MS``.  A skeleton is
  an element whose code is still loading (charts, tables): the user sees a placeholder.
  The window is short because the live pages rerun a fragment every 2–3 s.

**Cold** is the first visit of that page after the app process started (its caches
empty); **warm** is the median of 5 further visits.  Pages are visited in menu order, so a
page's cold visit may profit from what an earlier page cached (the runs list, the store).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import synthetic
from db.connection import transaction
from db.store import Store
from domain.plan.run_plan import RunPlan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support is not a package of the app

from tests.support.app_server import CHROMIUM, CHROMIUM_ARGS, running_app  # noqa: E402

WARM_VISITS = 5
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

# Installed in every page before its scripts: stamps first content and settled in
# window.__bd, so that the timing does not depend on how often Python polls.
_PROBE = """
(() => {
  const firstSel = %s;
  const stableMs = %d;
  window.__bd = {first: null, settled: null, error: false};
  let since = null;
  const tick = () => {
    const now = performance.now();
    if (window.__bd.first === null && document.querySelector(firstSel)) window.__bd.first = now;
    if (document.querySelector('[data-testid="stException"]')) window.__bd.error = true;
    const app = document.querySelector('[data-testid="stApp"]');
    const idle = (window.__bd.first !== null || window.__bd.error)
      && app && app.getAttribute('data-test-script-state') === 'notRunning'
      && !document.querySelector('[data-testid="stSkeleton"]') && !document.querySelector('[data-stale="true"]');
    if (!idle) { since = null; }
    else if (since === null) { since = now; }
    else if (window.__bd.settled === null && now - since >= stableMs) { window.__bd.settled = since; return; }
    setTimeout(tick, 10);
  };
  tick();
})();
"""


@dataclass(frozen=True)
class Visit:
    first_s: float
    settled_s: float
    error: bool = False  # the page showed an exception (st.exception box): its times are not the page's


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


def visit(browser: Any, name: str, url: str) -> Visit:
    """One visit in a fresh tab (a new Streamlit session, the browser's cache kept)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.add_init_script(_PROBE % (repr(FIRST_CONTENT[name]), _STABLE_MS))
        page.goto(url, wait_until="commit")
        try:
            page.wait_for_function("window.__bd && window.__bd.settled !== null", timeout=_TIMEOUT_MS, polling=100)
        except PlaywrightTimeout:
            pass  # reported as a time of "nan": the page never settled within the timeout
        stamps = page.evaluate("window.__bd")
        return Visit(_seconds(stamps["first"]), _seconds(stamps["settled"]), bool(stamps["error"]))
    finally:
        page.close()


def _seconds(ms: float | None) -> float:
    return math.nan if ms is None else ms / 1000


def _env(db: Path, tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCHDECK_DB=str(db), BENCHDECK_LANGUAGE="en", BENCHDECK_WORK_DIR=str(tmp / "runs"),
               BENCHDECK_AUTH_MODE="local", PYTHONPATH=str(ROOT))
    return env


def measure(db: Path, tmp: Path, store: Store) -> Iterator[tuple[str, Visit, list[Visit]]]:
    """Per page, as measured: its cold visit and its warm ones."""
    from playwright.sync_api import sync_playwright

    with running_app(_env(db, tmp), timeout_s=120) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name, url in page_urls(base, store).items():
                cold = visit(browser, name, url)
                yield name, cold, [visit(browser, name, url) for _ in range(WARM_VISITS)]
        finally:
            browser.close()


def _median(visits: list[Visit]) -> Visit:
    return Visit(statistics.median(v.first_s for v in visits), statistics.median(v.settled_s for v in visits),
                 any(v.error for v in visits))


def run(quick: bool = False) -> None:
    runs, points = (1_000, 20) if quick else (10_000, 20)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        db = tmp / "pages.duckdb"
        start = time.perf_counter()
        store = build_store(db, runs=runs, points_per_run=points)
        print(f"pages in Chromium: {runs:,} runs × {points} points (built in {time.perf_counter() - start:.0f} s); "
              f"seconds from navigation start, cold = first visit after app start, "
              f"warm = median of {WARM_VISITS} revisits", flush=True)
        for name, cold, warm in measure(db, tmp, store):
            w = _median(warm)
            flag = "  (page showed an exception)" if cold.error or w.error else ""
            print(f"  {name:<10} cold first {cold.first_s:5.2f} settled {cold.settled_s:5.2f} | "
                  f"warm first {w.first_s:5.2f} settled {w.settled_s:5.2f}{flag}", flush=True)
