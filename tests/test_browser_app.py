"""The real app in a real browser: navigation in both languages, empty state, queueing."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page

from db import Store
from tests.plans import minimal_plan
from tests.support.actors import operator
from tests.support.app_server import ACTION_TIMEOUT_MS, queued_line, running_app, screenshot

pytestmark = pytest.mark.browser


def test_navigation_in_both_languages_and_empty_state(env, browser_page, db_path) -> None:
    env["BENCHDECK_LANGUAGE"] = "ja"
    page = browser_page
    with running_app(env) as url:
        page.goto(url)
        nav = page.get_by_test_id("stSidebarNav")
        nav.get_by_text("概要").wait_for(timeout=ACTION_TIMEOUT_MS)
        assert nav.get_by_text("プランを投入").is_visible()
        page.get_by_text("キューは空で").wait_for()
        screenshot(page, "overview-ja-empty")
        page.get_by_text("English").click()
        nav.get_by_text("Overview").wait_for(timeout=60_000)
        assert nav.get_by_text("Queue a plan").is_visible()
        page.get_by_text("The queue is empty").wait_for()
        screenshot(page, "overview-en-empty")


def test_queue_quick_preset_from_the_browser(env, browser_page, db_path) -> None:
    env["BENCHDECK_LANGUAGE"] = "en"
    page = browser_page
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    with running_app(env) as url:
        page.goto(f"{url}/queue_plan")  # a deep link as the process's first request
        page.get_by_role("button", name="Quick preset").click()
        assert page.get_by_text("Page not found").count() == 0
        assert page.get_by_test_id("stSidebarNav").get_by_text("Overview").is_visible()
        page.get_by_text("quick-demo").first.wait_for(timeout=60_000)
        submit = page.get_by_role("button", name="Validate and queue")
        submit.click()
        queued_line(page, 1).wait_for(timeout=60_000)
        submit.click()  # a second click of the same form queues nothing new
        page.get_by_text("already run #1").wait_for(timeout=60_000)
        screenshot(page, "queue-plan-en")
    # Everything came from the app (the tab's icon too: a GPU host may be off the internet),
    # and Streamlit found its server without probing under the page (scripts/index_page.py).
    assert [a for a in asked if not a.startswith(url)] == []
    assert [a for a in asked if "/queue_plan/_stcore/" in a] == []
    runs = Store(db_path).list_runs()
    assert [(r.id, r.name, r.status) for r in runs] == [(1, "quick-demo", "queued")]


def _pick_row(page: Page, table: Locator, row: int) -> None:
    """Click the selection box of ``row`` (0 = first under the header) of a Streamlit
    dataframe: its grid draws on a canvas, a header then rows of 35 px, selection boxes
    in the first column."""
    table.wait_for()
    box = table.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 16, box["y"] + 35 * (row + 1) + 17)


def test_a_selected_row_opens_its_run_in_this_tab(env, browser_page, db_path) -> None:
    """The overview's and the runs page's tables: a row picked opens that run's page in
    the same tab (no new tab to load), Back returns to the table, which stays put."""
    env["BENCHDECK_LANGUAGE"] = "en"
    store = Store(db_path)
    store.migrate()
    for name in ("first", "second", "third"):
        store.submit_run(minimal_plan(name=name), submitted_by=operator("alice"))
    page = browser_page
    with running_app(env) as url:
        page.goto(url)
        page.get_by_text("Select a row to open its run in this tab").wait_for()
        _pick_row(page, page.get_by_test_id("stDataFrame").first, 1)  # newest first: run 2
        page.wait_for_url(re.compile(r"/run\?run=2\b"))
        page.get_by_role("heading", name=re.compile(r"#2\b")).wait_for()
        assert len(page.context.pages) == 1
        page.go_back()
        page.get_by_text("Select a row to open its run in this tab").wait_for()
        page.wait_for_timeout(4_000)  # a refresh of the table (every 3 s) opens nothing
        assert not re.search(r"/run\?", page.url)
        page.get_by_test_id("stSidebarNav").get_by_text("Queue & runs").click()
        page.get_by_text("Select a row to open its run in this tab").wait_for()
        _pick_row(page, page.get_by_test_id("stDataFrame").nth(1), 2)  # the runs list, after the queue
        page.wait_for_url(re.compile(r"/run\?run=1\b"))
        page.get_by_role("heading", name=re.compile(r"#1\b")).wait_for()
        screenshot(page, "run-opened-from-the-runs-table-en")
        assert len(page.context.pages) == 1
