"""History: per watched configuration, its metrics over time on one chart (the SGLang version
of each point marked, the noise band, the verdicts), its re-runs with their flags, and the
regression report for slides (issue 19).  The runner does the re-measuring (runner/watch.py)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from db import LostRace
from db.watch_store import HistoryRow, WatchRow, WatchRunRow
from domain.compare.comparability import condition_label
from domain.core.access import Action
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.flags.issues import format_flag_args
from domain.render.regression_report import build_report, history_chart, report_markdown, report_pptx
from domain.results.watch import WatchThresholds
from pages.parts.auth import can, current_actor
from pages.parts.common import current_language, db_guard, store
from pages.parts.watch_controls import watch_store

lang = current_language()
st.title(t("watch.heading", lang))


def _pick(watches: list[WatchRow]) -> WatchRow:
    raw = st.query_params.get("watch")
    ids = [w.id for w in watches]
    index = ids.index(int(raw)) if raw and raw.isdigit() and int(raw) in ids else 0
    chosen = st.selectbox(t("watch.pick", lang), watches, index=index, key="history.watch", format_func=lambda w: t(
        "watch.option", lang, id=w.id, name=w.name, state=t(f"watch.state.{w.state}", lang)))
    st.query_params["watch"] = str(chosen.id)
    return chosen


def stopped_text(reason: str | None) -> str:
    """A stop reason as stored: the runner's JSON (the drift table's notes) or a person's words."""
    try:
        data = json.loads(reason or "")
    except json.JSONDecodeError:
        return reason or ""
    if not isinstance(data, dict):
        return str(reason)
    if data.get("kind") == "no_counterpart":
        flags = [f"--{f['flag']} {f['value']}" for f in data.get("flags", [])]
        notes = [(f.get("note") or {}).get(lang) for f in data.get("flags", [])]
        return " ".join([t("watch.stop.no_counterpart", lang, to=data.get("to"), flags=", ".join(flags)),
                         *(n for n in notes if n)])
    return t("watch.stop.unknown_version", lang, to=data.get("to"))


def summary(watch: WatchRow) -> None:
    points = ", ".join(f"{s} @ c{c}" for s, c in watch.watched_points())
    st.markdown(t("watch.summary", lang, run_id=watch.origin_run_id, who=watch.created_by,
                  when=f"{watch.created_at:%Y-%m-%d %H:%M}", version=watch.current_version or "?", points=points))
    if watch.state == "stopped":
        st.warning(t("watch.stopped_line", lang, when=f"{watch.stopped_at:%Y-%m-%d %H:%M}", who=watch.stopped_by,
                     reason=stopped_text(watch.stopped_reason)), icon=":material/block:")
        return
    if watch.schedule_hours:
        st.caption(t("watch.schedule_line", lang, hours=f"{watch.schedule_hours:g}"))
    if watch.due_reason:
        st.info(t("watch.due_line", lang, reason=t(f"watch.reason.{watch.due_reason}", lang)),
                icon=":material/schedule:")


def controls(watch: WatchRow) -> None:
    if watch.state != "active":
        return
    c1, c2, c3 = st.columns(3)
    if can(Action.SUBMIT) and c1.button(t("watch.request", lang), icon=":material/replay:", key="history.request"):
        with db_guard(lang):
            owed = watch_store().request_run(watch.id, actor=current_actor())
            st.toast(t("watch.requested" if owed else "watch.already_due", lang))
    if can(Action.PRIORITY):
        with c2.popover(t("watch.schedule", lang), icon=":material/schedule:"):
            hours = st.number_input(t("watch.schedule", lang), min_value=0.0, value=float(watch.schedule_hours or 0),
                                    step=1.0, key="history.hours")
            if st.button(t("watch.schedule_save", lang), key="history.schedule_save"):
                with db_guard(lang):
                    watch_store().set_schedule(watch.id, hours or None, actor=current_actor())
                    st.toast(t("watch.schedule_saved", lang))
    if can(Action.CANCEL, owner=watch.created_by):
        with c3.popover(t("watch.stop", lang), icon=":material/stop_circle:"):
            why = st.text_input(t("watch.stop_reason", lang), value=t("watch.stop_default", lang), key="history.why")
            if st.button(t("watch.stop", lang), type="primary", key="history.stop"):
                with db_guard(lang):
                    try:
                        watch_store().stop(watch.id, actor=current_actor(), reason=why)
                        st.toast(t("watch.stopped", lang))
                    except LostRace:
                        st.warning(t("watch.not_active", lang))
                st.rerun()


def history_frame(rows: list[HistoryRow]) -> pd.DataFrame:
    return pd.DataFrame([r.as_dict() for r in rows])


def latest_table(history: pd.DataFrame) -> pd.DataFrame:
    latest = history[history["run_id"] == history["run_id"].iloc[-1]]
    return pd.DataFrame({
        t("watch.col.run", lang): latest["run_id"].map(lambda r: f"#{r}"),
        t("watch.col.scenario", lang): latest["scenario"],
        t("watch.col.concurrency", lang): latest["concurrency"],
        t("watch.col.metric", lang): [t(f"watch.metric.{m}", lang) for m in latest["metric"]],
        t("watch.col.baseline", lang): latest["baseline"].round(1),
        t("watch.col.value", lang): latest["value"].round(1),
        t("watch.col.change", lang): [f"{c:+.1%}" if pd.notna(c) else "" for c in latest["change"]],
        t("watch.col.band", lang): [f"{lo:,.1f} – {hi:,.1f}" if pd.notna(lo) else "" for lo, hi
                                    in zip(latest["band_low"], latest["band_high"], strict=True)],
        t("watch.col.repeats", lang): latest["repeats"],
        t("watch.col.verdict", lang): [t(f"watch.verdict.{v}", lang) for v in latest["verdict"]],
    })


def _translations_text(raw: str) -> str:
    changes = json.loads(raw or "[]")
    return "; ".join(f"{format_flag_args(c.get('removed_values') or {})} → {format_flag_args(c.get('add') or {})}"
                     for c in changes)


def reruns_table(runs: list[WatchRunRow], flags: dict[int, dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame({
        t("watch.col.run", lang): [f"#{r.run_id}" for r in runs],
        t("watch.col.reason", lang): [t(f"watch.reason.{r.reason}", lang) for r in runs],
        t("watch.col.version", lang): [r.sglang_version or "?" for r in runs],
        t("watch.col.status", lang): [t(f"status.{r.status}", lang) for r in runs],
        t("watch.col.series", lang): [r.series_no if r.series_no is not None else "" for r in runs],
        t("watch.col.flags", lang): [format_flag_args(flags.get(r.run_id, {})) for r in runs],
        t("watch.col.translations", lang): [_translations_text(r.translations) for r in runs],
    })


def series_breaks(runs: list[WatchRunRow]) -> None:
    for r in runs:
        if not r.series_reason:
            continue
        conditions = json.loads(r.series_reason).get("conditions", {})
        fields = "; ".join(f"{condition_label(n, lang)}: {b} → {v}" for n, (b, v) in conditions.items())
        st.warning(t("watch.series_break", lang, run_id=r.run_id, fields=fields), icon=":material/call_split:")


def run_side(run_id: int) -> dict[str, Any]:
    """{"version", "server_args", "facts"} of one run, for the regression report."""
    run = store().get_run(run_id)
    attempts = store().attempts_of(run_id)
    facts = json.loads(attempts[-1].startup_facts or "{}") if attempts else {}
    args = json.loads(run.server_args) if run else {}
    version = (run.engine_version if run else None) or facts.get("version")
    return {"version": version, "server_args": args, "facts": facts}


def report_downloads(watch: WatchRow, history: pd.DataFrame, runs: list[WatchRunRow]) -> None:
    latest_run = int(history["run_id"].iloc[-1])
    latest = history[history["run_id"] == latest_run]
    if set(latest["verdict"]) <= {"ok", "baseline"}:
        return
    baseline_runs = sorted({int(r) for raw in latest["baseline_runs"] for r in json.loads(raw)})
    if not baseline_runs:
        return
    translations: list[dict[str, Any]] = next(
        (json.loads(r.translations) for r in reversed(runs) if r.run_id == latest_run), [])
    report = build_report(watch_name=watch.name, history=history, before=run_side(baseline_runs[-1]),
                          after=run_side(latest_run), translations=translations)
    c1, c2 = st.columns(2)
    stem = f"watch-{watch.id}-run-{latest_run}"
    c1.download_button(t("watch.report.download_md", lang), report_markdown(report, lang), f"{stem}.md",
                       mime="text/markdown", icon=":material/description:")
    c2.download_button(t("watch.report.download_pptx", lang), report_pptx(report, lang), f"{stem}.pptx",
                       mime="application/vnd.openxmlformats-officedocument.presentationml.presentation",
                       icon=":material/slideshow:")


def page() -> None:
    with db_guard(lang) as guard:
        watches = watch_store().all_watches()
    if guard.failed:
        return
    if not watches:
        st.info(t("watch.none", lang), icon=":material/visibility:")
        return
    watch = _pick(watches)
    summary(watch)
    controls(watch)
    with db_guard(lang) as guard:
        rows, runs = watch_store().history(watch.id), watch_store().runs_of(watch.id)
        flags = {r.run_id: json.loads(run.server_args) for r in runs if (run := store().get_run(r.run_id))}
    if guard.failed:
        return
    thresholds = WatchThresholds.from_settings(get_settings())
    st.caption(t("watch.method", lang, n=thresholds.baseline_runs, tp=thresholds.throughput, lat=thresholds.latency))
    if rows:
        history = history_frame(rows)
        st.altair_chart(history_chart(history, lang), use_container_width=True)
        st.subheader(t("watch.latest", lang))
        st.dataframe(latest_table(history), hide_index=True)
        report_downloads(watch, history, runs)
    st.subheader(t("watch.reruns", lang))
    series_breaks(runs)
    st.dataframe(reruns_table(runs, flags), hide_index=True)


page()
