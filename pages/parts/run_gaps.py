"""The run page's "Why not N×?" of a succeeded attempt (pages/run.py), computed once per
attempt and written once per language, here rather than in the page so that the server can
compute it for a link before the page's first run does (:func:`warm_run`,
scripts/page_warmup.py), as it does for a linked comparison; the warm-up draws the picture
of the run's points too (pages/parts/run_charts.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd
import streamlit as st

from db.scaling_gap_inputs import explained_run
from domain.core.i18n import t
from domain.core.markdown import md_text
from domain.render.charts import AnyChart, scaling_gap_chart
from domain.results.scaling_gap import gap_sentences
from pages.parts.common import language_of_link, store
from pages.parts.run_charts import picture, points_chart_data, points_picture


@st.cache_data(show_spinner=False, max_entries=32)
def finished_attempt_gaps(run_id: int, attempt_id: int, startup_facts: str) -> pd.DataFrame:
    """The "why not N×" split of a succeeded attempt, computed once: its points and telemetry
    are final, while the live fragment around it reruns every 2 s.  ``attempt_id`` keys the
    cache, so a later attempt of the run is computed afresh."""
    return explained_run(store(), run_id, json.loads(startup_facts or "{}"))


@st.cache_data(show_spinner=False, max_entries=64)
def finished_attempt_gap_lists(run_id: int, attempt_id: int, startup_facts: str, language: str) -> list[str]:
    """:func:`gap_list` of each scenario of a succeeded attempt, written once per language:
    the sentences are final as the split is, and writing them (a pandas group per step) was
    a third of the page's own time on each visit."""
    gaps = finished_attempt_gaps(run_id, attempt_id, startup_facts)
    return [gap_list(str(scenario), steps, language) for scenario, steps in gaps.groupby("scenario", sort=True)]


def finished_attempt_gap_chart(run_id: int, attempt_id: int, startup_facts: str, language: str) -> AnyChart:
    """The split's chart of a succeeded attempt, as its picture draws it (styled there:
    ``pictures.page_spec``); built only when the picture is, which is cached."""
    # Untitled: the page's heading above it says "Why not N×?" (the exports keep the title).
    return scaling_gap_chart(finished_attempt_gaps(run_id, attempt_id, startup_facts), language, titled=False)


@st.cache_data(show_spinner=False, max_entries=32)
def finished_attempt_gap_picture(run_id: int, attempt_id: int, startup_facts: str, language: str) -> str:
    """:func:`finished_attempt_gap_chart` as the picture the page shows (pages/parts/run_charts.py)."""
    return picture(finished_attempt_gap_chart(run_id, attempt_id, startup_facts, language))


def gap_list(scenario: str, steps: pd.DataFrame, language: str) -> str:
    """One scenario's steps as one Markdown list, each step's causes under it.  Per scenario:
    two scenarios' steps share their concurrencies, and one flat list said "c=1→2" twice
    without saying of which; one element per scenario, not two per step (18 steps drew 36
    elements, each one a fresh tab draws)."""
    items = []
    for _, step in steps.groupby(["run_id", "c_from", "c_to"], sort=True):
        summary, *causes = gap_sentences(step, language)
        items += [f"- {summary}", *(f"    - {cause}" for cause in causes)]
    return "\n".join([f"**{t('compare.col.scenario', language)} {md_text(scenario)}**", "", *items])


def warm_run(query: Mapping[str, list[str]]) -> None:
    """What the run page computes first for a fresh session opened on ``/run?run=N`` (and
    ``lang``), with the same keys: the picture of the points of the run's latest attempt,
    and, when it has succeeded, the split, its lists and its picture (the page shows them
    for no other).  Called by the server when it sends the page's HTML
    (scripts/page_warmup.py).  The run and its attempts are read as the page reads them, so
    a run that changed since is keyed as the page will key it."""
    text = next(iter(query.get("run", [])), "")
    if not text.isdigit():  # as the page reads it (pages/run.py _run_id)
        return
    run_id = int(text)
    run = store().get_run(run_id)
    attempts = store().attempts_of(run_id) if run is not None else []
    if run is None or not attempts:
        return
    latest = attempts[-1]
    points = [p for p in store().points_of(run_id) if p.attempt_id == latest.id]
    if points:
        points_picture(points_chart_data(points))
    if run.status != "succeeded":
        return
    language = language_of_link(next(iter(query.get("lang", [])), None))
    finished_attempt_gap_lists(run_id, latest.id, latest.startup_facts or "", language)
    finished_attempt_gap_picture(run_id, latest.id, latest.startup_facts or "", language)
