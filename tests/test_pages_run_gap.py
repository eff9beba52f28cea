"""The run page's "Why not N×?" lists (pages/run.py): written once per finished attempt and
language, and shown in the language of each visit (AppTest against a real DuckDB file with
synthetic succeeded runs, bench/synthetic.py)."""

from __future__ import annotations

from pathlib import Path

from bench import synthetic
from db import Store
from domain.core.i18n import t
from tests.support.pages import open_page

_SCENARIO_LABEL = {lang: f"**{t('compare.col.scenario', lang)} " for lang in ("en", "ja")}


def _gap_lists(run_id: int, lang: str) -> list[str]:
    at = open_page("run", run=str(run_id), lang=lang)
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
