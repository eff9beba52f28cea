"""The run page's "Why not N×?" lists (pages/run.py): written once per finished attempt and
language, and shown in the language of each visit (AppTest against a real DuckDB file with
synthetic succeeded runs, bench/synthetic.py)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from bench import synthetic
from db import Store
from domain.core.i18n import t
from tests.conftest import ROOT

_SCENARIO_LABEL = {lang: f"**{t('compare.col.scenario', lang)} " for lang in ("en", "ja")}


def _gap_lists(run_id: int, lang: str) -> list[str]:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["run"] = str(run_id)
    at.query_params["lang"] = lang
    at.run()
    at.switch_page("pages/run.py").run()
    assert not at.exception, at.exception
    return [m.value for m in at.markdown if m.value.startswith(_SCENARIO_LABEL[lang])]


def test_a_finished_runs_gap_lists_follow_the_visits_language(app_env: Path) -> None:
    store = Store(app_env)
    synthetic.fill(store, runs=1, points_per_run=8)
    run = store.list_runs(limit=1)[0]
    assert run.status == "succeeded"
    english = _gap_lists(run.id, "en")
    japanese = _gap_lists(run.id, "ja")  # the same attempt, its lists already written in English
    assert english and len(japanese) == len(english)
    assert all("tok/s measured against" in text for text in english)
    assert all("線形なら" in text for text in japanese)
    assert _gap_lists(run.id, "en") == english  # kept: the same text on the next visit
