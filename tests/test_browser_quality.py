"""Issue 42 in a real browser: the quality probe is switched on in the build form (which
shows the minutes it adds), the run is queued and executed by the real runner on the
emulator, and the compare page shows each run's quality row beside its speed delta, in
English and Japanese, an FP8 KV-cache run's as changed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from pptx import Presentation

from db import Store
from domain.plan.presets import quick_demo_plan
from domain.plan.run_plan import RunPlan
from tests.support.actors import operator
from tests.support.app_server import ACTION_TIMEOUT_MS, queued_line, running_app, screenshot
from tests.support.runner_harness import runner_env, start_runner, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow,
              pytest.mark.timeout(1200)]  # three emulated runs and the app; wall time depends on the load
SHOTS = Path("/work/shots/42")
PROBE = {"prompts": 16, "output_len": 32, "concurrency": 8, "seed": 1234}


def _plan(name: str, **flags: object) -> RunPlan:
    demo = quick_demo_plan()
    data = demo.model_dump(mode="json")
    data.update(name=name, server_args={**demo.server_args, **flags}, quality=PROBE)
    # What the form's run below will be (the quick demo at concurrency 1, 2 prompts), so the
    # speed rows compare like with like.
    data["benchmark"].update(concurrency=[1], num_prompts=2)
    return RunPlan.model_validate(data)


def _set_text(page: Page, name: str, value: str) -> None:
    box = page.get_by_role("textbox", name=name, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(800)


def _set_number(page: Page, name: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=name, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(800)


def _shot(page: Page, name: str) -> None:
    path = screenshot(page, f"quality-{name}")
    if SHOTS.parent.is_dir():  # the team's screenshot folder, where there is one
        SHOTS.mkdir(exist_ok=True)
        shutil.copy(path, SHOTS / path.name)


def test_probe_switched_on_in_the_form_and_quality_rows_on_the_compare_page(env, browser_page,
                                                                            db_path: Path) -> None:
    page: Page = browser_page
    store = Store(db_path)
    store.migrate()
    renv = runner_env(env)
    baseline, _ = store.submit_run(_plan("quality-base"), submitted_by=operator("test"))
    with running_app(renv) as url:
        page.goto(f"{url}/build?lang=en")
        expect(page.get_by_role("textbox", name="Name", exact=True)).to_have_value("quick-demo", timeout=60_000)
        _set_text(page, "Concurrency (comma-separated)", "1")
        _set_text(page, "Prompts per point", "2")
        page.get_by_text("Run the quality probe after the sweep").click()
        _set_number(page, "Prompts", "16")
        _set_number(page, "Output tokens", "32")
        expect(page.get_by_text(re.compile(r"The quality probe adds about [0-9.]+ min"))).to_be_visible(
            timeout=60_000)
        _shot(page, "build-switch-en")
        page.get_by_role("button", name="Queue this run").click()
        expect(queued_line(page, 2)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        queued = RunPlan.model_validate_json(store.get_run(2).plan)
        assert queued.quality is not None and queued.quality.prompts == 16 and queued.quality.output_len == 32
        fp8, _ = store.submit_run(_plan("quality-fp8", **{"kv-cache-dtype": "fp8_e4m3"}),
                                  submitted_by=operator("test"))

        runner = start_runner(renv, "--burst")
        wait_for(lambda: all(store.get_run(r).status == "succeeded" for r in (baseline, 2, fp8)), 420,
                 "three probed runs")
        assert runner.wait(timeout=60) == 0

        page.goto(f"{url}/compare?baseline={baseline}&runs=2,{fp8}&lang=en")
        expect(page.get_by_text("Quality (outputs against the baseline's, accuracy)")).to_be_visible(timeout=90_000)
        expect(page.get_by_text(re.compile(r"#2 quality: (same within the floor|cannot tell)"))).to_be_visible()
        expect(page.get_by_text(re.compile(rf"#{fp8} quality: changed"))).to_be_visible()
        page.wait_for_timeout(1500)
        _shot(page, "compare-en")
        page.goto(f"{url}/compare?baseline={baseline}&runs=2,{fp8}&lang=ja")
        expect(page.get_by_text("品質(基準との出力の同一性、正解率)")).to_be_visible(timeout=90_000)
        expect(page.get_by_text(re.compile(rf"#{fp8} 品質: 変化あり"))).to_be_visible()
        page.wait_for_timeout(1500)
        _shot(page, "compare-ja")

    # The same rows open every export (runner export: the page's files, for scripts).
    out = db_path.parent / "exports"
    done = subprocess.run([sys.executable, "-m", "runner", "export", "--baseline", str(baseline), "--runs",
                           f"2,{fp8}", "--format", "csv", "--format", "md", "--format", "slide", "--out", str(out)],
                          env=renv, capture_output=True, text=True, timeout=300, check=True)
    assert done.returncode == 0
    stem = f"compare-{baseline}-2-{fp8}"
    csv_text = (out / f"{stem}.csv").read_text(encoding="utf-8-sig")
    assert f"# #{fp8} quality: changed" in csv_text and "# #2 quality:" in csv_text
    assert f"#{fp8} quality: changed" in (out / f"{stem}.md").read_text(encoding="utf-8").replace("\\", "")
    slide = Presentation(str(out / f"{stem}-slide.pptx")).slides[0]
    table_text = " ".join(shape.table.cell(r, col).text for shape in slide.shapes if shape.has_table
                          for r in range(len(shape.table.rows)) for col in range(len(shape.table.columns)))
    assert "Quality vs baseline" in table_text and "changed" in table_text
