"""Overview: runs by status and the most recent runs, refreshed live; a clear empty state
that sends a new user to the Build form (the quick demo is filled in there)."""

import pandas as pd
import streamlit as st

from db.rows import RunProgressRow
from domain.core.access import Action
from domain.core.i18n import t
from pages.parts.auth import can
from pages.parts.common import cached_counts, cached_runs, current_language, db_guard, source_label
from pages.parts.curve_numbers import curve_number_section
from pages.parts.runs_table import runs_table
from pages.parts.watch_controls import open_regressions_section

lang = current_language()
st.title(t("overview.heading", lang))


def _runs_frame(runs: list[RunProgressRow]) -> pd.DataFrame:
    rows = [
        {
            t("col.id", lang): run.id,
            t("runs.detail", lang): f"run?run={run.id}&lang={lang}",
            t("col.name", lang): run.name,
            t("col.status", lang): t(f"status.{run.status}", lang),
            t("col.source", lang): source_label(run.source, lang),
            t("col.model", lang): run.model,
            t("col.gpu", lang): f"{run.gpu_count}×{run.gpu_type}",
            t("col.points", lang): f"{run.points_done}/{run.total_points}",
            t("col.failure", lang): run.failure_kind or "",
            t("col.submitted_by", lang): run.submitted_by,
            t("col.submitted_at", lang): run.submitted_at,
        }
        for run in runs
    ]
    return pd.DataFrame(rows)


def _empty_state() -> None:
    """First visit: the form is the way in (a YAML plan and the CLI are the other ways).
    A link, not a button: this fragment reruns every 3 s, and a link's click cannot be lost
    to a rerun that redraws it."""
    if not can(Action.SUBMIT):
        st.info(t("overview.viewer_empty", lang), icon=":material/inbox:")
        return
    st.info(t("overview.empty_start", lang), icon=":material/inbox:")
    st.page_link("pages/build.py", label=t("overview.start_build", lang), icon=":material/add_circle:")
    st.caption(t("overview.other_ways", lang))


@st.fragment(run_every="3s")
def live_overview() -> None:
    with db_guard(lang) as guard:
        counts = cached_counts()
        runs = cached_runs(50)
    if guard.failed:
        return
    if not runs:
        _empty_state()
        return
    st.subheader(t("overview.counts", lang))
    columns = st.columns(5)
    for column, status in zip(columns, ["queued", "running", "succeeded", "failed", "cancelled"], strict=True):
        column.metric(t(f"status.{status}", lang), counts.get(status, 0))
    st.subheader(t("overview.recent", lang))
    st.caption(t("runs.open_hint", lang))
    runs_table(_runs_frame(runs), [run.id for run in runs], "overview.runs", lang, column_config={
        t("runs.detail", lang): st.column_config.LinkColumn(display_text=t("runs.open", lang))})
    if any(run.source == "emulated" for run in runs):
        st.caption("⚠️ " + t("overview.emulated_note", lang))
    curve_number_section(runs, lang)


open_regressions_section(lang)
live_overview()
