"""The Tune page in a real browser (issue 17): a study run for real first — ``python -m
runner.tune`` through the queue, the runner daemon, the emulator and the pinned bench
client — then its page in English and Japanese (screenshots in test-artifacts/), and the
button that queues the best with repeats and the baseline beside it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from db import Store
from domain.plan.run_plan import RunPlan
from domain.tune import history
from tests.conftest import ROOT
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tests.support.runner_harness import MARK, assert_nothing_left, runner_env, start_runner

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow,
              pytest.mark.timeout(900)]  # two emulated runs and the app; wall time depends on the machine's load

STUDY = ROOT / "tests" / "fixtures" / "tune_e2e" / "study.yaml"
TRIALS = 3  # with the study's seed: two runs and one configuration pruned before launch


@pytest.fixture
def tuned(store: Store, env: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    renv = runner_env(env)
    runner = start_runner(renv)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "runner.tune", str(STUDY), "--trials", str(TRIALS), "--json", "--poll", "0.3"],
            cwd=ROOT, env=renv, capture_output=True, text=True, timeout=700)
    finally:
        runner.send_signal(signal.SIGTERM)  # a warm stop: the best's run, if claimed, goes back to the queue
        runner.wait(timeout=120)
    assert done.returncode == 0, done.stderr
    assert_nothing_left(renv[MARK])
    return renv, json.loads(done.stdout)


def _open(page: Page, url: str, lang: str) -> None:
    page.goto(f"{url}/tune?study=e2e-tune&lang={lang}")
    page.get_by_test_id("stDataFrame").first.wait_for(timeout=60_000)
    expect(page.locator(".vega-embed").nth(2)).to_be_attached(
        timeout=ACTION_TIMEOUT_MS)  # history, importance, parallel
    page.wait_for_timeout(2500)  # the charts' own rendering


def test_tune_page_shows_the_study_and_queues_the_best(tuned, browser_page, db_path) -> None:
    renv, outcome = tuned
    page: Page = browser_page
    assert outcome["trials"] == TRIALS and outcome["pruned"] == 1 and outcome["best_trial"] is not None
    with running_app(renv) as url:
        _open(page, url, "en")
        expect(page.get_by_role("heading", name="Tune", exact=True)).to_be_visible()
        expect(page.get_by_text(re.compile(r"3 trials: 2 complete, 1 pruned before launch, 0 failed"))).to_be_visible()
        expect(page.get_by_text("Best so far")).to_be_visible()
        expect(page.get_by_text("Optimisation history")).to_be_attached()
        screenshot(page, "tune-en")

        _open(page, url, "ja")
        expect(page.get_by_role("heading", name="チューニング", exact=True)).to_be_visible()
        expect(page.get_by_text("これまでの最良")).to_be_visible()
        screenshot(page, "tune-ja")

        _open(page, url, "en")
        page.get_by_role("button", name="Queue the best with 3 repeats and compare it with the baseline").click()
        # The tune command queued the same two runs already: the page gets them back (idempotency), no third.
        queued = page.get_by_text(re.compile(rf"Queued the best as run #{outcome['best_run_id']} .* baseline as run "
                                             rf"#{outcome['baseline_run_id']} "))
        expect(queued).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        screenshot(page, "tune-queued-en")
        page.get_by_role("link", name="Open the compare page").click()
        page.wait_for_url(re.compile(rf"/compare\?.*baseline={outcome['baseline_run_id']}"), timeout=ACTION_TIMEOUT_MS)
    store = Store(db_path)
    tagged = [r for r in store.list_runs(limit=100) if history.BEST_TAG in json.loads(r.tags)]
    assert [r.id for r in tagged] == [outcome["best_run_id"]]
    assert RunPlan.model_validate_json(tagged[0].plan).benchmark.repeats == 3
