"""Errors beside the fields they name on the Build page, in a real browser (issue 20, list
4): two fields made invalid (the name only spaces, the model empty) each show their error
right under their own box, in English and in Japanese, what was typed stays, and the
summary beside the Queue button still lists both.  Screens at 1400 px:
test-artifacts/build-field-errors-{en,ja}-1400.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

from domain.core.i18n import t
from domain.plan.plan_io import PlanProblem
from tests.support.app_server import ARTIFACTS, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTH = 1400
SETTLE_MS = 400


def _idle(page: Page) -> None:
    page.wait_for_timeout(SETTLE_MS)
    expect(page.get_by_test_id("stStatusWidget")).to_be_hidden(timeout=60_000)


def _under(box: Locator) -> Locator:
    """The element Streamlit draws right after the one holding ``box``."""
    return box.locator("xpath=ancestor::div[@data-testid='stElementContainer'][1]/following-sibling::div[1]")


def _type(box: Locator, text: str) -> None:
    box.fill(text)
    box.press("Enter")


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_two_field_errors_show_under_their_boxes(env: dict[str, str], browser_page: Page, lang: str) -> None:
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 1000})
    name_error = PlanProblem("name", "", "name_empty").text(lang)
    model_error = PlanProblem("model", "", "string_too_short", {"min_length": 1}).text(lang)
    with running_app(env) as url:
        page.goto(f"{url}/build?lang={lang}")
        expect(page.get_by_test_id("stBaseButton-primaryFormSubmit")).to_be_enabled(timeout=60_000)
        _idle(page)
        name = page.get_by_role("textbox", name=t("build.name", lang), exact=True)
        model = page.get_by_role("textbox", name=t("build.model", lang), exact=True)
        _type(name, "   ")
        _idle(page)
        _type(model, "")
        expect(_under(model)).to_contain_text(model_error, timeout=60_000)
        _idle(page)
        expect(_under(name)).to_contain_text(name_error)
        expect(_under(name)).not_to_contain_text(model_error)  # each under its own box
        expect(name).to_have_value("   ")  # what was typed stays
        summary = page.get_by_test_id("stAlertContentError").last  # beside the (disabled) Queue button
        expect(summary).to_contain_text(name_error)
        expect(summary).to_contain_text(model_error)
        name.scroll_into_view_if_needed()
        page.mouse.wheel(0, -400)  # the page's title and the section heading in view too
        page.wait_for_timeout(300)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"build-field-errors-{lang}-{WIDTH}.png"))
