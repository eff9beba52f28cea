"""The Overview's one number per curve (domain/results/curve_number.py) for the latest run
that finished with points: each scenario's output tok/s per GPU at the stated interactivity
with its interval, and the area under its curve."""

from __future__ import annotations

import streamlit as st

from db.rows import RunProgressRow
from domain.core.i18n import t
from domain.core.markdown import md_text
from domain.core.settings import get_settings
from domain.results import analysis, curve_number
from pages.parts.common import db_guard
from pages.parts.selection import cached_points, keep_new_intervals, request_samples


@st.cache_data(show_spinner=False, max_entries=8)
def curve_lines(run_id: int, points_done: int, lang: str) -> list[str]:
    """The run's lines; ``points_done`` keys the cache (a point that lands is a new entry).
    Its points' intervals as kept beside their samples (one bootstrap per point otherwise)."""
    frame = cached_points((run_id,))
    if frame.empty:
        return []
    samples = request_samples(frame)
    memos = samples.memos()
    summary = analysis.summarise_points(frame, requests=samples, bootstrap_memos=memos)
    keep_new_intervals(samples, memos)
    numbers = curve_number.curve_numbers(summary, lang, get_settings().interactivity_target)
    if all(n.span is None for n in numbers):  # no curve at all (no TPOT): nothing to read off
        return []
    return [curve_number.number_line(n, lang) for n in numbers]


def curve_number_section(runs: list[RunProgressRow], lang: str) -> None:
    """The section, for the newest succeeded run with points among ``runs`` (newest first)."""
    latest = next((run for run in runs if run.status == "succeeded" and run.points_done), None)
    if latest is None:
        return
    with db_guard(lang) as guard:
        lines = curve_lines(latest.id, latest.points_done, lang)
    if guard.failed or not lines:
        return
    st.subheader(t("curve_number.title", lang))
    st.caption(md_text(t("curve_number.of_run", lang, run=f"#{latest.id} {latest.name}")))
    st.markdown("\n".join(f"- {md_text(line)}" for line in lines))
    st.caption(md_text(t("curve_number.method", lang)))
