"""Errors beside the fields they name on the Build page (issue 20, list 4), through AppTest
against a real DuckDB file: each error that names a field is drawn right under that
field's widget, in the session's language, live (the form validates on every edit) and
still after a refused Queue click, the input stays as typed, and the summary at the end
of the form still lists every error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.i18n import t
from domain.plan.plan_io import PlanProblem
from pages.parts.build_field_errors import (
    CUSTOM_SCENARIO_SLOT,
    flag_errors,
    problem_errors,
    widget_for,
)
from tests.conftest import ROOT

APP = str(ROOT / "app.py")
ERROR_MARK = ":material/error:"


def _build_page(lang: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["lang"] = lang  # pages/parts/common.py LANG_KEY
    at.run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    return at


def _children(node: Any) -> list[Any]:
    children = getattr(node, "children", None)
    return [] if children is None else [children[k] for k in sorted(children)]


def _under(at: AppTest, key: str) -> str:
    """The text of the element drawn right after the widget ``key`` in its block ("" when
    that element is empty or there is none)."""
    def search(block: Any) -> str | None:
        kids = _children(block)
        for index, kid in enumerate(kids):
            if getattr(kid, "key", None) == key:
                after = kids[index + 1] if index + 1 < len(kids) else None
                return str(getattr(after, "value", "") or "")
            found = search(kid)
            if found is not None:
                return found
        return None
    found = search(at._tree)
    assert found is not None, f"no widget {key}"
    return found


def _queue_button(at: AppTest, lang: str) -> Any:
    return next(b for b in at.button if b.label == t("build.submit", lang))


def _submit(at: AppTest, lang: str) -> None:
    _queue_button(at, lang).click().run()


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_two_field_errors_show_under_their_widgets_in_the_users_language(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    assert ERROR_MARK not in _under(at, "b.name") and ERROR_MARK not in _under(at, "b.concurrency")
    at.text_input(key="b.name").set_value("")
    at.text_input(key="b.concurrency").set_value("1, x, 0").run()
    name_error = PlanProblem("name", "", "name_empty").text(lang)
    item_2 = PlanProblem("benchmark.concurrency.1", "", "int_type").text(lang)
    item_3 = PlanProblem("benchmark.concurrency.2", "", "greater_than_equal", {"ge": 1}).text(lang)
    assert name_error in _under(at, "b.name")
    assert item_2 in _under(at, "b.concurrency") and item_3 in _under(at, "b.concurrency")
    assert name_error not in _under(at, "b.concurrency")  # each under its own field
    summary = "\n".join(e.value for e in at.error)
    assert name_error in summary and item_2 in summary  # the summaries keep every error
    assert at.text_input(key="b.name").value == "" and at.text_input(key="b.concurrency").value == "1, x, 0"
    assert _queue_button(at, lang).disabled  # no plan can be read from the form: nothing to queue
    at.text_input(key="b.name").set_value("fixed")
    at.text_input(key="b.concurrency").set_value("1, 8").run()
    assert ERROR_MARK not in _under(at, "b.name") and ERROR_MARK not in _under(at, "b.concurrency")


def test_a_flag_error_shows_under_the_flags_widget_live_and_after_a_refused_click(app_env: Path) -> None:
    at = _build_page("en")
    next(n for n in at.number_input if n.label == "--max-running-requests").set_value(-5).run()
    for _ in range(2):  # live, then after the refused Queue click
        assert "--max-running-requests -5 is out of range" in _under(at, "b.flag.max-running-requests")
        assert ERROR_MARK not in _under(at, "b.flag.chunked-prefill-size")
        assert next(n for n in at.number_input if n.label == "--max-running-requests").value == -5
        _submit(at, "en")
        assert not at.exception
    assert any(t("submit.refused", "en") in e.value for e in at.error)
    assert Store(app_env).list_runs() == []


def test_plan_fields_map_to_the_widgets_that_edit_them() -> None:
    mapping = {"benchmark": {"scenarios": [{"name": "chat"}, {"name": "custom"}]}}
    assert widget_for("name") == "b.name" and widget_for("gpu.count") == "b.gpu_count"
    assert widget_for("benchmark.concurrency.3") == "b.concurrency"
    assert widget_for("benchmark.scenarios.0.input_len", mapping) == "b.scenarios"
    assert widget_for("benchmark.scenarios.1.input_len", mapping) == CUSTOM_SCENARIO_SLOT
    assert widget_for("server_args.tp-size") == "flag:tp-size"
    assert widget_for("") is None and widget_for("topology.kind") is None
    errors = problem_errors([PlanProblem("model", "", "string_too_short", {"min_length": 1})], "ja", None)
    assert errors == {"b.model": [PlanProblem("model", "", "string_too_short", {"min_length": 1}).text("ja")]}
    assert flag_errors([], "en") == {}
