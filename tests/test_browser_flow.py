"""Issue 5's flow in a real browser: the app as a real server on a real DuckDB file, a
real runner in burst mode, the emulator and the real bench_serving client."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from tests.support.actors import operator
from tests.support.app_server import ACTION_TIMEOUT_MS, queued_line, running_app, screenshot
from tests.support.runner_harness import (
    runner_env,
    small_plan,
    start_runner,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow]


def _fill_number(page: Page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(800)


def _settle_tables(page: Page) -> None:
    """Data grids draw on a canvas after they mount; give them a moment before a screenshot."""
    page.get_by_test_id("stDataFrame").first.wait_for(timeout=60_000)  # a loaded host draws late
    page.wait_for_timeout(2500)


def _build_from_preset(page: Page, url: str) -> None:
    page.goto(f"{url}/build")
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="Qwen3-30B-A3B BF16 / 1×H200").click()
    page.get_by_role("button", name="Load preset").click()
    expect(page.get_by_role("textbox", name="Name", exact=True)).to_have_value("qwen3-30b-bf16-1xh200", timeout=60_000)
    concurrency = page.get_by_role("textbox", name="Concurrency (comma-separated)")
    concurrency.fill("1, 2")
    concurrency.press("Enter")
    page.wait_for_timeout(800)
    # 3 prompts per concurrency instead of the preset's 10: the flow, not the statistics, is
    # under test here, and each prompt is 128 emulated decode steps.
    prompts = page.get_by_role("textbox", name="Prompts per point", exact=True)
    prompts.fill("3x")
    prompts.press("Enter")
    page.wait_for_timeout(800)
    # Keep only the short scenario: backspace removes the last chosen ones from the multiselect.
    scenarios = page.get_by_role("combobox", name="Scenarios (ISL/OSL)")
    for _ in range(2):
        scenarios.click()
        scenarios.press("Backspace")
        page.keyboard.press("Escape")
        page.wait_for_timeout(1000)
    expect(page.get_by_label("Remove long_output (1000/4000)", exact=True)).to_have_count(0)
    expect(page.get_by_label("Remove long_prompt (4000/200)", exact=True)).to_have_count(0)
    expect(page.get_by_label("Remove short (128/128)", exact=True)).to_have_count(1)


def test_build_submit_watch_cancel_duplicate_and_switch_language(env, browser_page, db_path: Path) -> None:
    page: Page = browser_page
    store = Store(db_path)
    renv = runner_env(env)
    with running_app(renv) as url:
        _build_from_preset(page, url)
        screenshot(page, "build-preset-en")
        # Two levers and one advanced flag.
        _fill_number(page, "--max-running-requests", "32")
        _fill_number(page, "--mem-fraction-static", "0.8")
        page.get_by_text("All other flags of this version").click()
        search = page.get_by_role("textbox", name="Search by name or help text")
        search.fill("kv-cache-dtype")
        search.press("Enter")
        page.wait_for_timeout(1500)
        kv_dtype = page.get_by_role("combobox", name="--kv-cache-dtype", exact=True)
        kv_dtype.click()
        kv_dtype.fill("fp8_e4m3")
        page.get_by_role("option", name="fp8_e4m3", exact=True).click()
        page.wait_for_timeout(1500)
        # The risk badge and the command preview follow the edits.
        expect(page.get_by_text(re.compile(r"--kv-cache-dtype · .* · high"))).to_be_visible(timeout=60_000)
        preview = page.locator("code").filter(has_text="emulator").first
        expect(preview).to_contain_text("--max-running-requests 32")
        expect(preview).to_contain_text("--mem-fraction-static 0.8")
        expect(preview).to_contain_text("--kv-cache-dtype fp8_e4m3")
        screenshot(page, "build-edited-en")
        page.get_by_role("button", name="Queue this run").click()
        # The form stays, its button disabled beside the run it queued (one run per form
        # instance: tests/test_browser_double_submit.py); the link opens the run.
        expect(queued_line(page, 1)).to_be_visible(timeout=20_000)
        expect(page.get_by_role("button", name="Queue this run")).to_be_disabled()
        expect(page.get_by_role("button", name="Queue another from this form")).to_be_visible()
        screenshot(page, "build-queued-en")
        page.get_by_role("link", name="Open run #1", exact=True).click()  # not the toast's "open run #1"
        expect(page).to_have_url(re.compile(r"/run\?run=1"), timeout=20_000)
        [run] = store.list_runs()
        assert run.status == "queued"
        plan_args = store.get_run(1).server_args
        assert '"max-running-requests": 32' in plan_args and '"kv-cache-dtype": "fp8_e4m3"' in plan_args

        # A runner drains the queue; the page follows the run to "succeeded" with its points.
        runner = start_runner(renv, "--burst")
        expect(page.get_by_text("Points (2/2)")).to_be_visible(timeout=180_000)
        expect(page.get_by_text("succeeded").first).to_be_visible(timeout=60_000)
        assert runner.wait(timeout=60) == 0
        screenshot(page, "run-succeeded-en")
        # The details behind a click are drawn when opened (pages/parts/common.py
        # opened_expander): nothing of them is on the page before, the command after.
        expect(page.locator('[data-testid="stMain"] code')).to_have_count(0)
        page.get_by_text("The command that ran").click()
        expect(page.locator("code").filter(has_text="--max-running-requests 32")).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)
        page.get_by_text("Configuration (plan)").click()
        expect(page.locator("code").filter(has_text="kv-cache-dtype: fp8_e4m3")).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)

        # A second, longer run is cancelled mid-sweep from its page.
        long_plan = small_plan(name="long", benchmark={
            "scenarios": [{"name": "s", "input_len": 64, "output_len": 256}],
            "concurrency": [1, 2, 4, 8], "num_prompts": "4x", "warmup": "1x"})
        second, _ = store.submit_run(long_plan, submitted_by=operator("test"))
        runner = start_runner(renv, "--burst")
        wait_for(lambda: len(store.points_of(second)) >= 1, 120, "the first point of the second run")
        page.goto(f"{url}/run?run={second}")
        page.get_by_role("button", name="Cancel").click()  # asks first
        page.get_by_role("button", name=f"Yes, cancel run #{second}").click()
        expect(page.get_by_text("cancelled").first).to_be_visible(timeout=60_000)
        assert runner.wait(timeout=60) == 0
        assert store.get_run(second).status == "cancelled"
        assert 1 <= len(store.points_of(second)) < 4
        screenshot(page, "run-cancelled-en")

        # The queue and runs page lists both.
        page.goto(f"{url}/runs")
        expect(page.get_by_text("Runner hosts", exact=True)).to_be_visible(timeout=60_000)
        _settle_tables(page)
        screenshot(page, "runs-en")

        # Duplicate run 1 into the form: its levers come along.
        page.goto(f"{url}/run?run=1")
        page.get_by_text("Queue a variant of this run").click()
        expect(page.get_by_text("Duplicated from run #1")).to_be_visible(timeout=60_000)
        # The form renders after the banner; on a loaded host that takes longer than expect's 5 s.
        expect(page.get_by_role("textbox", name="Name", exact=True)).to_have_value("qwen3-30b-bf16-1xh200-copy",
                                                                                timeout=60_000)
        first_lever = page.get_by_role("spinbutton", name="--max-running-requests", exact=True)
        expect(first_lever).to_have_value("32", timeout=60_000)
        expect(page.get_by_role("spinbutton", name="--mem-fraction-static", exact=True)).to_have_value("0.800")
        # A variant changes a flag or two: the first flag field has the cursor (document.activeElement).
        expect(first_lever).to_be_focused(timeout=ACTION_TIMEOUT_MS)
        screenshot(page, "build-duplicated-en")

        # Switch the language: the same page in Japanese.
        page.get_by_text("日本語").click()
        expect(page.get_by_role("heading", name="構成を作成してキューに入れる")).to_be_visible(timeout=60_000)
        screenshot(page, "build-duplicated-ja")
        page.goto(f"{url}/runs?lang=ja")
        # The heading, not the hosts table's header row (its accessible text holds the same word).
        expect(page.get_by_text("ランナーホスト", exact=True)).to_be_visible(timeout=60_000)
        _settle_tables(page)
        screenshot(page, "runs-ja")
        # The succeeded run in Japanese, down to its "why not N×" split.
        page.goto(f"{url}/run?run=1&lang=ja")
        expect(page.get_by_role("heading", name="なぜ N 倍にならないのか")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        page.wait_for_timeout(2000)
        screenshot(page, "run-succeeded-ja")
    if runner.poll() is None:
        runner.send_signal(signal.SIGKILL)
