"""The import page in a real browser: upload a real bench_serving file, see the preview,
state the model, confirm; the same file again is refused as a duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tools.make_import_fixtures import ensure_fixtures

pytestmark = [pytest.mark.browser, pytest.mark.sglang]


def _upload_and_confirm(page: Page, url: str, path: Path) -> None:
    page.goto(f"{url}/imports")
    page.locator("input[type=file]").set_input_files([str(path)])
    expect(page.get_by_text("1 run(s), 3 point(s), 0 problem(s)", exact=False)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
    page.get_by_role("textbox", name="Model").fill("Qwen/Qwen3-30B-A3B")
    page.get_by_role("button", name="Import (lines with problems are left out)").click()


def test_upload_preview_confirm_then_duplicate(env, browser_page, db_path: Path) -> None:
    source = ensure_fixtures() / "sglang-0.4.6.post5.jsonl"
    page: Page = browser_page
    with running_app(env) as url:
        _upload_and_confirm(page, url, source)
        expect(page.get_by_text("imported 3 point(s) as run(s) #1")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        screenshot(page, "import-en")
        # The imported run's own page and the picker open without an error, although the
        # run has no plan and (in the runs list) no GPU.
        for path in ("run?run=1", "compare?baseline=1"):
            page.goto(f"{url}/{path}")
            expect(page.get_by_text("Qwen/Qwen3-30B-A3B").first).to_be_visible(timeout=ACTION_TIMEOUT_MS)
            expect(page.locator("[data-testid=stException]")).to_have_count(0)
        screenshot(page, "import-run-en")
        _upload_and_confirm(page, url, source)
        expect(page.get_by_text("was imported already (#1)")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
    [run] = Store(db_path).list_runs()
    assert (run.source, run.model, run.gpu_type) == ("imported", "Qwen/Qwen3-30B-A3B", None)


def test_a_json_array_is_named_and_offers_no_import(env, browser_page, tmp_path: Path, db_path: Path) -> None:
    """One JSON array of real records: the page says what the file is and what it expects,
    blames no failed request, and offers no Import button; nothing is written or logged."""
    source = ensure_fixtures() / "sglang-0.4.6.post5.jsonl"
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    array = tmp_path / "records.json"
    array.write_text(json.dumps(records, indent=2), encoding="utf-8")
    page: Page = browser_page
    with running_app(env) as url:
        for lang, said in (("en", "This file is one JSON array"), ("ja", "このファイルは 1 つの JSON 配列")):
            page.goto(f"{url}/imports?lang={lang}")
            page.locator("input[type=file]").set_input_files([str(array)])
            expect(page.get_by_text(said, exact=False)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
            expect(page.locator("[data-testid=stFormSubmitButton]")).to_have_count(0)
            expect(page.get_by_text("every request fails", exact=False)).to_have_count(0)
            screenshot(page, f"import-json-array-{lang}")
    assert not db_path.exists() or Store(db_path).list_imports() == []


def test_a_file_name_with_markup_is_a_plain_name(env, browser_page, tmp_path: Path, db_path: Path) -> None:
    """The upload's stem becomes the run name as text: shown as typed on the import and run pages."""
    stem = '=HYPERLINK("x","y") <img src=x> **b** [a](b) :red[c]'  # "/" cannot be in a file name
    named = tmp_path / f"{stem}.jsonl"
    named.write_bytes((ensure_fixtures() / "sglang-0.4.6.post5.jsonl").read_bytes())
    page: Page = browser_page
    with running_app(env) as url:
        _upload_and_confirm(page, url, named)
        expect(page.get_by_text("imported 3 point(s) as run(s) #1")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        page.goto(f"{url}/run?run=1&lang=en")
        expect(page.get_by_text(f"#1 {stem}#1", exact=True)).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)  # the heading: "#id name"
        expect(page.locator("[data-testid=stException]")).to_have_count(0)
    [run] = Store(db_path).list_runs()
    assert run.name == f"{stem}#1"
