"""Run names in any language (domain/plan/naming.py): accepted by the plan, kept through its
YAML and the Build form, refused with a sentence when too long, and slugged for files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.settings import get_settings
from domain.plan.naming import MAX_NAME_CHARS, clean_name, is_slug, slug
from domain.plan.plan_io import PlanError, dump_plan, load_plan, load_yaml_mapping, plan_from_mapping
from domain.plan.run_plan import RunPlan
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML

APP = str(ROOT / "app.py")
NAME = 'ベースライン =HYPERLINK("x") | <b>x</b> 🚀'
LIMIT = 256 * 1024


def _plan(name: object) -> RunPlan:
    data = load_yaml_mapping(MINIMAL_PLAN_YAML, max_bytes=LIMIT)
    data["name"] = name
    return plan_from_mapping(data)


@pytest.mark.parametrize("name", [NAME, "  ベースライン  ", "tp1-baseline", "👨‍👩‍👧 family", "x" * MAX_NAME_CHARS,
                                  "Qwen3 / TP=2 · 「本番」"])
def test_names_in_any_language_are_accepted_and_trimmed(name: str) -> None:
    assert _plan(name).name == name.strip()


def test_a_name_survives_the_plan_yaml() -> None:
    plan = _plan(NAME)
    text = dump_plan(plan)
    assert NAME in text  # written as the characters themselves, not escapes
    again = load_plan(text, max_bytes=LIMIT)
    assert again == plan and again.name == NAME


def test_a_name_typed_two_ways_is_one_name() -> None:
    decomposed = "ヘ\u3099ースライン"  # ベ as ヘ + a combining voiced mark
    assert _plan(decomposed).name == "ベースライン" == clean_name(decomposed)


@pytest.mark.parametrize(("name", "ja", "en"), [
    ("x" * 200, "名前は 80 文字以内にしてください(いまは 200 文字です)。",
     "The name may have at most 80 characters; it has 200."),
    ("   ", "名前を入力してください(空白だけの名前は使えません)。",
     "Give the run a name (one of only spaces is empty)."),
    ("a\nb", "名前に制御文字(U+000A)が含まれています。改行やタブなどを取り除いてください。",
     "The name contains a control character (U+000A); remove line breaks, tabs and the like."),
    ("a\u202eb", "名前に制御文字(U+202E)が含まれています。改行やタブなどを取り除いてください。",
     "The name contains a control character (U+202E); remove line breaks, tabs and the like."),
])
def test_a_name_that_cannot_be_one_is_refused_with_a_sentence(name: str, ja: str, en: str) -> None:
    with pytest.raises(PlanError) as info:
        _plan(name)
    [problem] = info.value.problems
    assert problem.field == "name"
    assert problem.text("ja") == ja and problem.text("en") == en


@pytest.mark.parametrize(("name", "expected"), [
    (NAME, "HYPERLINK-x-b-x-b"),
    ("ベースライン", "run-7"),  # nothing ASCII is left: the fallback
    ("🚀🚀", "run-7"),
    ("café Ｈ２００ tp-2", "cafe-H200-tp-2"),  # accents dropped, full-width letters folded
    ("tp1-baseline", "tp1-baseline"),
    ("con", "run-7"),  # a Windows device name
    ("  --a..b--  ", "a-b"),
])
def test_slug_is_ascii_for_file_names(name: str, expected: str) -> None:
    assert slug(name, "run-7") == expected
    assert is_slug(slug(name, "run-7"))


def test_slug_refuses_a_fallback_that_is_no_slug() -> None:
    with pytest.raises(ValueError, match="not a slug"):
        slug("ベースライン", "ラン")


def test_slug_stays_within_its_length() -> None:
    assert len(slug("a b " * 60, "run-1")) <= 80


# --- the Build form ------------------------------------------------------------------------------


def _build_page(lang: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("BENCHDECK_LANGUAGE", lang)
    get_settings.cache_clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    return at


def _name_box(at: AppTest) -> Any:
    return next(box for box in at.text_input if box.key == "b.name")


def test_the_form_queues_a_run_under_a_japanese_name(app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _build_page("en", monkeypatch)
    _name_box(at).set_value(NAME).run()
    assert not at.exception and not at.error
    at.session_state["build.yaml_open"] = True  # the user opens the plan's YAML (pages/build.py YAML_OPEN)
    at.run()
    assert any(NAME in code.value for code in at.code)  # the plan's YAML, as it will be queued
    next(b for b in at.button if b.label == "Queue this run").click().run()
    [run] = Store(app_env).list_runs()
    assert run.name == NAME and RunPlan.model_validate_json(run.plan).name == NAME


def test_the_form_refuses_a_long_name_with_a_japanese_sentence(app_env: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    at = _build_page("ja", monkeypatch)
    _name_box(at).set_value("長" * 200).run()
    errors = "\n".join(e.value for e in at.error)
    assert "名前は 80 文字以内にしてください(いまは 200 文字です)。" in errors
    assert "^[" not in errors and "pattern" not in errors
