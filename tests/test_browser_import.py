"""The import page in a real browser: upload a real bench_serving file, see the preview,
state the model, confirm; the same file again is refused as a duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from tests.support.app_server import running_app, screenshot
from tools.make_import_fixtures import ensure_fixtures

pytestmark = [pytest.mark.browser, pytest.mark.sglang]


def _upload_and_confirm(page: Page, url: str, path: Path) -> None:
    page.goto(f"{url}/imports")
    page.locator("input[type=file]").set_input_files([str(path)])
    expect(page.get_by_text("1 run(s), 3 point(s), 0 problem(s)", exact=False)).to_be_visible(timeout=30_000)
    page.get_by_role("textbox", name="Model").fill("Qwen/Qwen3-30B-A3B")
    page.get_by_role("button", name="Import (lines with problems are left out)").click()


def test_upload_preview_confirm_then_duplicate(env, browser_page, db_path: Path) -> None:
    source = ensure_fixtures() / "sglang-0.4.6.post5.jsonl"
    page: Page = browser_page
    with running_app(env) as url:
        _upload_and_confirm(page, url, source)
        expect(page.get_by_text("imported 3 point(s) as run(s) #1")).to_be_visible(timeout=30_000)
        screenshot(page, "import-en")
        # The imported run's own page and the picker open without an error, although the
        # run has no plan and (in the runs list) no GPU.
        for path in ("run?run=1", "compare?baseline=1"):
            page.goto(f"{url}/{path}")
            expect(page.get_by_text("Qwen/Qwen3-30B-A3B").first).to_be_visible(timeout=30_000)
            expect(page.locator("[data-testid=stException]")).to_have_count(0)
        screenshot(page, "import-run-en")
        _upload_and_confirm(page, url, source)
        expect(page.get_by_text("was imported already (#1)")).to_be_visible(timeout=30_000)
    [run] = Store(db_path).list_runs()
    assert (run.source, run.model, run.gpu_type) == ("imported", "Qwen/Qwen3-30B-A3B", None)
