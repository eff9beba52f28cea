"""Watched configurations on other pages (issue 19): the watch control of the run page and
the open regressions of the Overview.  The History page is pages/history.py."""

from __future__ import annotations

import streamlit as st

from db import LostRace
from db.rows import RunRow
from db.watch_store import WatchStore
from domain.core.access import Action
from domain.core.i18n import t
from pages.parts.auth import can, current_actor
from pages.parts.common import current_language, db_guard, store

HISTORY_PAGE = "pages/history.py"


def watch_store() -> WatchStore:
    return WatchStore(store())


def watch_controls(run: RunRow) -> None:
    """Watch this run's configuration (operators and admins), or say which watch follows it."""
    lang = current_language()
    with db_guard(lang) as guard:
        watched = [w for w in watch_store().watches_of_run(run.id) if w.state == "active"]
    if guard.failed:
        return
    if watched:
        st.caption(t("watch.controls.watched", lang, watch_id=watched[0].id))
        st.page_link(HISTORY_PAGE, label=t("watch.controls.open_history", lang), icon=":material/timeline:",
                     query_params={"watch": str(watched[0].id), "lang": lang})
        return
    if not can(Action.SUBMIT) or run.status != "succeeded" or run.source not in ("measured", "emulated"):
        return
    with st.popover(t("watch.controls.watch", lang), icon=":material/visibility:"):
        _watch_form(run, lang)


def _watch_form(run: RunRow, lang: str) -> None:
    st.caption(t("watch.controls.explain", lang))
    with db_guard(lang) as guard:
        points = sorted({(p.scenario, p.concurrency) for p in store().points_of(run.id)})
    if guard.failed:
        return
    labels = {f"{s} @ c{c}": (s, c) for s, c in points}
    chosen = st.multiselect(t("watch.controls.points", lang), list(labels), default=list(labels),
                            key=f"watch.points.{run.id}")
    if not st.button(t("watch.controls.confirm", lang), type="primary", key=f"watch.start.{run.id}",
                     disabled=not chosen):
        return
    with db_guard(lang) as guard:
        try:
            watch_id = watch_store().watch_run(run.id, actor=current_actor(), points=[labels[c] for c in chosen])
        except LostRace:
            st.warning(t("watch.controls.not_eligible", lang))
            return
    if not guard.failed:
        st.success(t("watch.controls.started", lang, watch_id=watch_id))
        st.page_link(HISTORY_PAGE, label=t("watch.controls.open_history", lang), icon=":material/timeline:",
                     query_params={"watch": str(watch_id), "lang": lang})


def open_regressions_section(lang: str) -> None:
    """Open regressions (an active watch whose latest re-run is a regression), for the Overview."""
    with db_guard(lang) as guard:
        regressions = watch_store().open_regressions()
    if guard.failed or not regressions:
        return
    st.subheader(t("watch.overview.heading", lang))
    for r in regressions:
        change = f"{r.change:+.1%}" if r.change is not None else "?"
        st.error(t("watch.overview.line", lang, name=r.name, watch_id=r.watch_id, scenario=r.scenario,
                   concurrency=r.concurrency, metric=t(f"watch.metric.{r.metric}", lang), change=change,
                   version=r.sglang_version or "?", run_id=r.run_id), icon=":material/trending_down:")
    st.caption(t("watch.report.method", lang))
    first = regressions[0]
    st.page_link(HISTORY_PAGE, label=t("watch.controls.open_history", lang), icon=":material/timeline:",
                 query_params={"watch": str(first.watch_id), "lang": lang})
