"""The run page's "Why not N×?" lists (pages/run.py, pages/parts/run_gaps.py): written once
per finished attempt and language, shown in the language of each visit, and computed by the
server for a link before the page's first run (AppTest against a real DuckDB file with
synthetic succeeded runs, bench/synthetic.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import synthetic
from db import Store
from domain.core.i18n import t
from pages.parts import run_gaps
from tests.support.actors import operator
from tests.support.calls import counted
from tests.support.pages import open_page
from tests.support.runner_harness import small_plan

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


def test_a_linked_runs_split_warmed_by_the_server_is_the_one_the_page_shows(
        app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/page_warmup.py calls warm_run with a run link's query when the page's HTML is
    asked for: the page's first run then computes none of the split, its lists and its chart anew; a
    link the page reads otherwise, or a run with no split to show, computes nothing."""
    store = Store(app_env)
    synthetic.fill(store, runs=1, points_per_run=8)
    run = store.list_runs(limit=1)[0]
    queued, _ = store.submit_run(small_plan(), submitted_by=operator("t"))
    computed: list[str] = []
    monkeypatch.setattr(run_gaps, "explained_run", counted(run_gaps.explained_run, "split", computed))
    monkeypatch.setattr(run_gaps, "gap_list", counted(run_gaps.gap_list, "list", computed))
    monkeypatch.setattr(run_gaps, "scaling_gap_chart", counted(run_gaps.scaling_gap_chart, "chart", computed))
    run_gaps.warm_run({"run": [str(run.id)], "lang": ["ja"]})
    warmed = list(computed)
    assert warmed[0] == "split" and set(warmed[1:]) == {"list", "chart"} and warmed.count("chart") == 1
    japanese = _gap_lists(run.id, "ja")
    assert japanese and all("線形なら" in text for text in japanese)
    assert computed == warmed  # the page found both cached
    for query in ({"run": ["x"]}, {"run": [f" {run.id}"]}, {"run": [str(run.id + 1000)]}, {}, {"run": [str(queued)]}):
        run_gaps.warm_run(query)
    assert computed == warmed


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_why_not_n_is_said_once_on_the_page_and_kept_in_the_export(app_env: Path, lang: str) -> None:
    """The section's heading says "Why not N×?"; its chart, right under it, names its
    scenarios only (it said the title a second time).  The exported chart keeps the title."""
    import json

    from domain.render.charts import scaling_gap_chart

    store = Store(app_env)
    synthetic.fill(store, runs=1, points_per_run=8)
    run = store.list_runs(limit=1)[0]
    title = t("scaling_gap.title", lang)
    at = open_page("run", run=str(run.id), lang=lang)
    assert [h.value for h in at.subheader].count(title) == 1
    attempt = store.attempts_of(run.id)[-1]
    gaps = run_gaps.finished_attempt_gaps(run.id, attempt.id, attempt.startup_facts or "")
    page_spec = json.dumps(run_gaps.finished_attempt_gap_chart(run.id, attempt.id, attempt.startup_facts or "",
                                                               lang).to_dict(), ensure_ascii=False)
    assert title not in page_spec
    assert title in json.dumps(scaling_gap_chart(gaps, lang).to_dict(), ensure_ascii=False)
