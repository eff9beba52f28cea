"""Issue 19 in a real browser: a watched configuration whose 0.5.23 re-runs regressed.  The
History page shows the chart, the verdicts, the re-runs with their versions and flags, and
gives the regression report; the Overview lists the open regression; the run page starts a
watch.  Both languages; screenshots in test-artifacts/.

The runs are stored through the real Store and judged by the real watch pass
(runner/watch.py) without an engine: the emulator path is tests/test_watch_e2e.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from db.watch_store import WatchStore
from domain.plan.run_plan import RunPlan
from tests.support.actors import operator
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tests.test_watch import _complete, _finished_run, _plan, _tick

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def regressed(store: Store) -> tuple[int, int]:
    """(watch id, a second succeeded run nobody watches yet)."""
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000, 1010, 990])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1), ("short", 2)])
    _tick(store, "0.5.20")
    [(_, rerun)] = _tick(store, "0.5.23").queued
    plan = RunPlan.model_validate_json(store.get_run(rerun).plan)
    _complete(store, rerun, plan, [850, 860, 845], version="0.5.23")
    [(_, confirm)] = _tick(store, "0.5.23").queued
    _complete(store, confirm, plan, [855, 850, 848], version="0.5.23")
    _tick(store, "0.5.23")
    other = _finished_run(store, _plan(), [1000])
    return watch_id, other


def test_history_overview_and_watch_button(regressed: tuple[int, int], browser_page: Page, env: dict[str, str],
                                           tmp_path: Path) -> None:
    watch_id, other = regressed
    page = browser_page
    with running_app(env) as url:
        page.goto(f"{url}/history?watch={watch_id}&lang=en")
        expect(page.get_by_role("heading", name="History of watched configurations")).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)
        expect(page.get_by_text(re.compile(r"Current version: 0\.5\.23"))).to_be_visible()
        page.get_by_test_id("stDataFrame").first.wait_for()
        expect(page.get_by_text("How it is judged", exact=False)).to_be_visible()
        page.wait_for_timeout(3000)  # the chart and the tables draw after the text
        screenshot(page, "history-en")
        with page.expect_download() as info:
            page.get_by_role("button", name="Regression report (Markdown)").click()
        report = info.value.path().read_text(encoding="utf-8")
        assert "SGLang 0.5.20 → 0.5.23" in report and "| regression |" in report

        page.goto(f"{url}/?lang=en")
        expect(page.get_by_text("Open regressions")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        expect(page.get_by_text(re.compile(
            rf"watch #{watch_id}\): Output throughput .* at short @ 2 changed -1\d\.\d% \(SGLang 0\.5\.23"))
        ).to_be_visible()
        expect(page.get_by_text("Runs by status")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        page.get_by_test_id("stDataFrame").first.wait_for()
        screenshot(page, "overview-regression-en")

        page.goto(f"{url}/history?watch={watch_id}&lang=ja")
        expect(page.get_by_role("heading", name="ウォッチ中の構成の推移")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        expect(page.get_by_text("性能低下レポート(Markdown)")).to_be_visible()
        page.wait_for_timeout(3000)
        screenshot(page, "history-ja")
        page.goto(f"{url}/?lang=ja")
        expect(page.get_by_text("未解決の性能低下")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        page.get_by_test_id("stDataFrame").first.wait_for()
        screenshot(page, "overview-regression-ja")

        page.goto(f"{url}/run?run={other}&lang=en")
        page.get_by_role("button", name=re.compile("Watch this configuration")).click(timeout=ACTION_TIMEOUT_MS)
        page.get_by_role("button", name="Start watching").click()
        expect(page.get_by_text(re.compile(r"Watch #\d+ started"))).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        screenshot(page, "run-watch-started-en")
    assert [w.origin_run_id for w in WatchStore(Store(env_db(env))).active()][-1] == other


def env_db(env: dict[str, str]) -> Path:
    return Path(env["BENCHDECK_DB"])
