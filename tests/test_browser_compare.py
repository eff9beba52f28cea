"""Issue 6 in a real browser: two emulated runs that differ in one flag plus one with a
different OSL.  The checklist marks exactly the OSL mismatch, the compare page warns, and
the downloads produce a CSV equal to the DB, a PNG, an SVG and a PPTX with footers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from pptx import Presentation

from db import Store
from tests.support.actors import operator
from tests.support.app_server import ACTION_TIMEOUT_MS, ARTIFACTS, running_app, screenshot
from tests.support.runner_harness import run_burst, runner_env, small_plan

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow]


def _bench(output_len: int) -> dict[str, object]:
    return {"scenarios": [{"name": "short", "input_len": 64, "output_len": output_len}],
            "concurrency": [1, 2], "num_prompts": "3x", "warmup": "1x"}


@pytest.fixture
def three_runs(store: Store, env: dict[str, str]) -> dict[str, str]:
    store.submit_run(small_plan(name="base", benchmark=_bench(32)), submitted_by=operator("t"))
    store.submit_run(small_plan(name="more-running", benchmark=_bench(32),
                                server_args={"max-running-requests": 8, "mem-fraction-static": 0.85}),
                     submitted_by=operator("t"))
    store.submit_run(small_plan(name="longer-osl", benchmark=_bench(48)), submitted_by=operator("t"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert [r.status for r in store.list_runs()] == ["succeeded"] * 3
    return renv


def _download(page: Page, name: str, target: Path) -> Path:
    with page.expect_download() as info:
        page.get_by_role("button", name=name, exact=True).click()
    info.value.save_as(target)
    return target


def test_checklist_compare_and_downloads(three_runs, browser_page, db_path: Path, tmp_path: Path) -> None:
    page: Page = browser_page
    store = Store(db_path)
    with running_app(three_runs) as url:
        page.goto(f"{url}/checklist?baseline=1&runs=2,3&lang=en")
        expect(page.get_by_text("#2 — comparable", exact=True)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        line3 = page.get_by_text(re.compile(r"#3 — not comparable"))
        expect(line3).to_be_visible()
        expect(line3).to_contain_text("OSL")
        page.get_by_test_id("stDataFrame").first.wait_for()
        page.wait_for_timeout(2000)
        screenshot(page, "checklist-en")

        page.goto(f"{url}/compare?baseline=1&runs=2,3&lang=en")
        expect(page.get_by_text(re.compile(r"#3 vs #1 \(baseline\): not comparable"))).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)
        expect(page.locator("td", has_text="max-running-requests").first).to_be_attached()  # the flag diff
        page.wait_for_timeout(3000)
        screenshot(page, "compare-en")
        csv_path = _download(page, "CSV", tmp_path / "compare.csv")
        # The one slide and the full deck are one click each, no toggle before them.
        one = _download(page, "One slide (PPTX)", tmp_path / "slide.pptx")
        deck = _download(page, "Full deck (PPTX)", tmp_path / "deck.pptx")
        page.get_by_text("Prepare chart pictures (PNG/SVG)").click()
        png = _download(page, page.get_by_role("button", name=re.compile(r"^PNG · ")).first.inner_text(),
                        tmp_path / "chart.png")
        svg = _download(page, page.get_by_role("button", name=re.compile(r"^SVG · ")).first.inner_text(),
                        tmp_path / "chart.svg")
        screenshot(page, "compare-downloads-en")

    # The CSV's numbers are the DB's numbers.
    text = csv_path.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#")))))
    flat = " ".join(" ".join(r) for r in rows)
    for point in store.points_of(2):
        assert repr(point.output_throughput) in flat or str(point.output_throughput) in flat
    assert "emulated" in text.lower()  # the caveat says the data is emulated
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    assert svg.read_text(encoding="utf-8").lstrip().startswith(("<svg", "<?xml"))
    [first] = list(Presentation(str(one)).slides)
    title = next(sh for sh in first.shapes if sh.name == "benchdeck-title").text_frame.text
    assert title.startswith("#2 vs #1 (baseline): comparable; the change under test: --max-running-requests"), title
    slides = list(Presentation(str(deck)).slides)
    assert len(slides) >= 3
    assert sum(any(sh.has_text_frame and sh.text_frame.text.startswith("Why not N×? — ") for sh in s.shapes)
               for s in slides) == 3  # one "why not N×" slide per run with a concurrency step
    for slide in slides:
        assert any(shape.name == "benchdeck-caveat" for shape in slide.shapes)
    (ARTIFACTS / "compare-deck.pptx").write_bytes(deck.read_bytes())
