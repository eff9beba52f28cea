"""The run page of an imported run, in a real browser, for every import format: bench_serving
JSONL from two SGLang clients (0.5.23, whose server_info says the emulator served it, and
0.4.6.post5, whose records name nothing and are imported without --model) and an AIPerf
JSON export.  Each page opens without the error box and shows the run's name, its source
and its points, and does not refresh (the run is finished); screenshots in Japanese and
English (test-artifacts/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from tests.conftest import ROOT
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tools.make_import_fixtures import ensure_fixtures

pytestmark = [pytest.mark.browser, pytest.mark.sglang]

# format → (file under build/import-fixtures, its first run's points, source badge ja / en)
FORMATS = {
    "sglang-0.5.23": ("sglang-0.5.23.jsonl", 3, "エミュレート(インポート)", "EMULATED (IMPORTED)"),
    "sglang-0.4.6": ("sglang-0.4.6.post5.jsonl", 3, "インポート", "IMPORTED"),
    "aiperf": ("aiperf/concurrency_1/profile_export_aiperf.json", 1, "インポート", "IMPORTED"),
}


def _import(env: dict[str, str], path: Path) -> int:
    done = subprocess.run([sys.executable, "-m", "runner", "import", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def _open(page: Page, url: str, run_id: int, lang: str) -> None:
    page.goto(f"{url}/run?run={run_id}&lang={lang}")
    expect(page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]')).to_have_count(1,
                                                                                                    timeout=ACTION_TIMEOUT_MS)


def _script_runs_within(page: Page, ms: int) -> int:
    """How many times the page's script (or a fragment of it) starts within ``ms``."""
    return int(page.evaluate("""(ms) => new Promise((done) => {
      const app = document.querySelector('[data-testid="stApp"]');
      let runs = 0;
      const seen = new MutationObserver(() => {
        if (app.getAttribute('data-test-script-state') === 'running') runs += 1;
      });
      seen.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
      setTimeout(() => { seen.disconnect(); done(runs); }, ms);
    })""", ms))


def test_every_imported_run_page_opens(env: dict[str, str], browser_page: Page, db_path: Path) -> None:
    fixtures = ensure_fixtures()
    runs = {name: _import(env, fixtures / file) for name, (file, *_rest) in FORMATS.items()}
    store = Store(db_path)
    page = browser_page
    with running_app(env) as url:
        for name, run_id in runs.items():
            _, points, badge_ja, badge_en = FORMATS[name]
            run = store.get_run(run_id)
            for lang, badge, heading in (("ja", badge_ja, f"ポイント({points}/{points})"),
                                         ("en", badge_en, f"Points ({points}/{points})")):
                _open(page, url, run_id, lang)
                expect(page.get_by_text(heading)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
                expect(page.get_by_text(f"#{run_id} {run.name}", exact=True)).to_be_visible()  # the heading: "#id name"
                expect(page.get_by_text(badge, exact=True)).to_be_visible()
                rows = page.locator("[data-testid=stDataFrame]").first
                expect(rows).to_be_visible()
                expect(page.locator("[data-testid=stException]")).to_have_count(0)
                expect(page.get_by_text("This app has encountered an error")).to_have_count(0)
                screenshot(page, f"imported-run-{name}-{lang}")
            # A finished run's page is drawn once (a queued or running one refreshes every 2 s).
            assert _script_runs_within(page, 4500) == 0
            _assert_no_none(page)


def _assert_no_none(page: Page) -> None:
    """Unknown facts (model, GPU, engine of a file that names none) read "unknown", never "None"."""
    facts = page.locator("[data-testid=stText]").all_inner_texts()
    assert facts and not any(re.search(r"\bNone\b", text) for text in facts), facts
