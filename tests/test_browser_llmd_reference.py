"""In a real browser: a GuideLLM-made llm-d report against a bench_serving run at the same load
(imported through the import page) names the TPOT definitions in the compare page's verdict, and a row of the measured
Qwen3-235B-A22B-FP8 H200 table pinned as a reference joins the comparison with its conditions
checked (screenshots under test-artifacts/ and /work/shots/44/ when that folder exists)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from db import Store
from tests.conftest import ROOT
from tests.support.app_server import running_app, screenshot
from tests.support.llmd_runs import bench_serving_run

pytestmark = [pytest.mark.browser]

TPOT_EN = "TPOT: bench_serving excludes the first token; GuideLLM includes the first token (and the wait for it)"
TPOT_JA = "TPOT: bench_serving は最初のトークンを除く; GuideLLM は最初のトークン(とその待ち時間)を含む"
ROW = "sglang 0.5.6.post2 · 4×H200 TP4 · 1000/100 · c=8 · "
SHOTS = Path("/work/shots/44")
GUIDELLM_REPORT = ROOT / "tests" / "fixtures" / "llmd" / "guidellm_c8.yaml"


def _shot(page: Page, name: str) -> None:
    path = screenshot(page, name)
    if SHOTS.is_dir():
        shutil.copy(path, SHOTS / path.name)


def _choose_row(page: Page, combo: Locator) -> None:
    """Open the rows' list once the page is idle (a rerun still drawing the page replaces the
    widget and closes a list opened during it), then click the row; retried a few times."""
    for _ in range(4):
        expect(page.get_by_test_id("stStatusWidget")).to_be_hidden(timeout=60_000)
        combo.evaluate("box => box.scrollIntoView({block: 'center'})")
        combo.click()
        try:
            page.get_by_role("option").filter(has_text=ROW).first.click(timeout=10_000)
            return
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
    raise AssertionError("the reference row could not be chosen")


def test_tpot_definitions_and_a_pinned_reference_on_the_compare_page(store: Store, env: dict[str, str],
                                                                      browser_page: Page) -> None:
    page = browser_page
    base = bench_serving_run(store, scenarios=[{"name": "s", "input_len": 1000, "output_len": 100}], concurrency=[8])
    with running_app(env) as url:
        # The GuideLLM-made report through the import page: its preview, then the import.
        page.goto(f"{url}/imports?lang=en")
        page.locator("input[type=file]").set_input_files([str(GUIDELLM_REPORT)])
        expect(page.get_by_text("llm-d benchmark report (v0.2.x)", exact=False)).to_be_visible(timeout=60_000)
        expect(page.get_by_text("1 run(s), 1 point(s), 0 problem(s)", exact=False)).to_be_visible()
        page.get_by_role("button", name="Import (lines with problems are left out)").click()
        expect(page.get_by_text(re.compile(r"imported 1 point\(s\) as run\(s\) #\d+"))).to_be_visible(timeout=60_000)
        [other] = [r.id for r in store.list_runs() if r.id != base]
        _shot(page, "llmd-import-en")
        page.goto(f"{url}/compare?baseline={base}&runs={other}&lang=en")
        verdict = page.get_by_text(re.compile(rf"^#{other} vs #{base} \(baseline\): "))
        expect(verdict).to_contain_text(TPOT_EN, timeout=60_000)
        page.get_by_text("Reference point (a published measurement)").click()
        _choose_row(page, page.get_by_role("combobox", name="Row of the measured table"))
        page.get_by_role("button", name="Pin as reference").click()
        pinned = page.get_by_text(re.compile(rf"Reference #\d+ against baseline #{base}: "))
        expect(pinned).to_be_visible(timeout=60_000)
        ref = int(re.search(r"Reference #(\d+)", pinned.inner_text()).group(1))
        # Its conditions checked like any run's: the GPUs the row used, its engine version, its harness.
        expect(pinned).to_contain_text("GPU count: 8 → 4")
        expect(pinned).to_contain_text("engine version: 0.5.23 → 0.5.6.post2")
        expect(page.get_by_text(re.compile(rf"^#{ref} vs #{base} \(baseline\): "))).to_be_visible()
        assert f"runs={other}%2C{ref}" in page.url or f"runs={other},{ref}" in page.url
        page.wait_for_timeout(2000)
        _shot(page, "llmd-reference-compare-en")
        page.goto(f"{url}/compare?baseline={base}&runs={other},{ref}&lang=ja")
        verdict_ja = page.get_by_text(re.compile(rf"^#{other} 対 #{base}"))
        expect(verdict_ja).to_contain_text(TPOT_JA, timeout=60_000)
        pinned_ja = page.get_by_text(re.compile(rf"参照点 #{ref} とベースライン #{base}: "))
        expect(pinned_ja).to_contain_text("GPU 数: 8 → 4")
        page.wait_for_timeout(2000)
        _shot(page, "llmd-reference-compare-ja")
