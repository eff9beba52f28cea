"""The real app in a real browser: navigation in both languages, empty state, queueing."""

from __future__ import annotations

import pytest

from db import Store
from tests.support.app_server import running_app, screenshot

pytestmark = pytest.mark.browser


def test_navigation_in_both_languages_and_empty_state(env, browser_page, db_path) -> None:
    env["BENCHDECK_LANGUAGE"] = "ja"
    page = browser_page
    with running_app(env) as url:
        page.goto(url)
        nav = page.get_by_test_id("stSidebarNav")
        nav.get_by_text("概要").wait_for(timeout=30_000)
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
        page.get_by_text("Queued run #1").wait_for(timeout=60_000)
        submit.click()  # a second click of the same form queues nothing new
        page.get_by_text("already run #1").wait_for(timeout=60_000)
        screenshot(page, "queue-plan-en")
    # Everything came from the app (the tab's icon too: a GPU host may be off the internet),
    # and Streamlit found its server without probing under the page (scripts/index_page.py).
    assert [a for a in asked if not a.startswith(url)] == []
    assert [a for a in asked if "/queue_plan/_stcore/" in a] == []
    runs = Store(db_path).list_runs()
    assert [(r.id, r.name, r.status) for r in runs] == [(1, "quick-demo", "queued")]
