"""Queue and runs: the queue (position, priority, submitter, estimated start) with cancel and
re-prioritise, every run's live progress, and the runner hosts.  Refreshes itself
(``st.fragment(run_every=…)``) without reloading the page."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from db import LostRace
from db.rows import RunnerRow, RunProgressRow
from domain.core.access import Action
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.plan.claimability import waiting_reason
from domain.plan.eta import eta_from_progress, plan_seconds
from domain.plan.run_plan import RunPlan
from pages.parts.auth import can, current_actor
from pages.parts.common import (
    cached_runners,
    cached_runs,
    clear_run_caches,
    current_language,
    db_guard,
    fmt_duration,
    source_label,
    store,
)
from pages.parts.runs_table import runs_table

lang = current_language()
# A runner beats at least every poll interval while idle, and every heartbeat while busy.
OFFLINE_AFTER_S = 3 * max(get_settings().poll_s, get_settings().heartbeat_s) + 30
st.title(t("runs.title", lang))


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _eta_s(run: RunProgressRow) -> float | None:
    if run.status != "running":
        return None
    plan = RunPlan.model_validate_json(run.plan)
    return eta_from_progress(plan, int(run.points_done or 0), run.mean_point_s)


def queue_frame(runs: list[RunProgressRow], runners: list[RunnerRow] | None = None) -> pd.DataFrame:
    """Queued runs in claim order, each with the time it should start (rough), or why no
    runner can claim it."""
    queued = sorted((r for r in runs if r.status == "queued"), key=lambda r: (-r.priority, r.submitted_at))
    ahead_s = sum(_eta_s(r) or 0.0 for r in runs if r.status == "running")
    rows = []
    for position, run in enumerate(queued, start=1):
        rows.append({
            t("runs.position", lang): position, t("col.id", lang): run.id, t("col.name", lang): run.name,
            t("col.priority", lang): run.priority, t("col.submitted_by", lang): run.submitted_by,
            t("col.source", lang): source_label(run.source, lang),
            t("runs.estimated_start", lang): t("runs.in", lang, duration=fmt_duration(ahead_s)),
            t("claim.column", lang): waiting_reason(run, runners or [], _now(), get_settings(), lang) or "",
        })
        ahead_s += plan_seconds(RunPlan.model_validate_json(run.plan))
    return pd.DataFrame(rows)


def queue_actions(runs: list[RunProgressRow]) -> None:
    """Cancel and re-prioritise, offered only on the runs this user's role may touch
    (db/ checks the role again on the write)."""
    active = [r for r in runs if r.status in ("queued", "running")
              and can(Action.CANCEL, owner=r.submitted_by)]
    if not active:
        if not can(Action.SUBMIT):
            st.caption(t("auth.viewer_cannot_queue", lang))
        return
    may_prioritise = can(Action.PRIORITY)
    with st.form("runs.actions"):
        c1, c2, c3 = st.columns([2, 1, 1])
        run_id = c1.selectbox(t("runs.pick_run", lang), [r.id for r in active],
                              format_func=lambda i: next(f"#{r.id} {r.name} ({t('status.' + r.status, lang)})"
                                                         for r in active if r.id == i))
        priority = (c2.number_input(t("col.priority", lang), min_value=-100, max_value=100, value=0)
                    if may_prioritise else 0)
        cancel = c3.form_submit_button(t("runs.cancel", lang), type="secondary")
        reprioritise = c3.form_submit_button(t("runs.reprioritise", lang)) if may_prioritise else False
    try:
        with db_guard(lang):
            if cancel:
                store().cancel_run(int(run_id), actor=current_actor())
                st.toast(t("runs.cancel_requested", lang, run_id=run_id))
            elif reprioritise:
                store().set_priority(int(run_id), int(priority), actor=current_actor())
                st.toast(t("runs.priority_set", lang, run_id=run_id, priority=priority))
    except LostRace:
        st.warning(t("runs.too_late", lang, run_id=run_id))
    if cancel or reprioritise:
        clear_run_caches()


def _progress_rows(runs: list[RunProgressRow]) -> pd.DataFrame:
    rows = []
    for run in runs:
        done, total = int(run.points_done or 0), int(run.total_points)
        elapsed = (_now() - run.started_at).total_seconds() if run.started_at else None
        if run.finished_at and run.started_at:
            elapsed = (run.finished_at - run.started_at).total_seconds()
        eta = _eta_s(run)
        rows.append({
            t("col.id", lang): run.id, t("runs.detail", lang): f"run?run={run.id}&lang={lang}",
            t("col.name", lang): run.name,
            t("col.status", lang): t(f"status.{run.status}", lang)
            + (f" · {run.attempt_status}" if run.status == "running" and run.attempt_status else ""),
            t("col.source", lang): source_label(run.source, lang),
            t("runs.current_point", lang): run.current_point if run.status == "running" else "",
            t("runs.progress", lang): done / total if total else 0.0,
            t("col.points", lang): f"{done}/{total}",
            t("runs.elapsed", lang): fmt_duration(elapsed),
            t("runs.eta", lang): fmt_duration(eta) if eta is not None else "",
            t("col.failure", lang): run.failure_kind or "",
            t("col.model", lang): run.model, t("col.gpu", lang): f"{run.gpu_count}×{run.gpu_type}",
        })
    return pd.DataFrame(rows)


def _health(runner: RunnerRow, age_s: float) -> str:
    if age_s > OFFLINE_AFTER_S:
        return t("runs.offline", lang)
    if runner.healthy:
        return t("runs.healthy", lang)
    return f"{t('runs.unhealthy', lang)}: {runner.unhealthy_reason}"


def health_summary(runners: list[RunnerRow]) -> None:
    """One line for all runner hosts (local daemons and Ray nodes), and each problem named."""
    now = _now()
    states = [_health(r, (now - r.heartbeat_at).total_seconds()) for r in runners]
    ok_text, offline_text = t("runs.healthy", lang), t("runs.offline", lang)
    healthy = sum(state == ok_text for state in states)
    offline = sum(state == offline_text for state in states)
    gpus = sum(int(r.gpu_count) for r, state in zip(runners, states, strict=True) if state == ok_text)
    st.caption(t("runs.health_summary", lang, total=len(runners), healthy=healthy, offline=offline,
                 unhealthy=len(runners) - healthy - offline, gpus=gpus))
    for runner, state in zip(runners, states, strict=True):
        if state not in (ok_text, offline_text):
            st.warning(f"{runner.id} ({runner.host}): {state}", icon=":material/warning:")


def runners_frame(runners: list[RunnerRow]) -> pd.DataFrame:
    now = _now()
    return pd.DataFrame([{
        t("runs.runner", lang): r.id, t("runs.host", lang): r.host,
        t("col.gpu", lang): f"{r.gpu_count}×{r.gpu_type}",
        "SGLang": r.sglang_version or t("runs.demo_mode", lang),
        t("runs.heartbeat_age", lang): fmt_duration((now - r.heartbeat_at).total_seconds()),
        t("runs.health", lang): _health(r, (now - r.heartbeat_at).total_seconds()),
    } for r in runners])


@st.fragment(run_every="2s")
def live() -> None:
    with db_guard(lang) as guard:
        runs = cached_runs(200)
        runners = cached_runners()
    if guard.failed:
        return
    st.subheader(t("runs.queue", lang))
    queue = queue_frame(runs, runners)
    if queue.empty:
        st.caption(t("runs.queue_empty", lang))
    else:
        st.dataframe(queue, hide_index=True, width="stretch")
    st.subheader(t("runs.runs", lang))
    if not runs:
        st.info(t("overview.empty", lang), icon=":material/inbox:")
    else:
        st.caption(t("runs.open_hint", lang))
        runs_table(_progress_rows(runs), [run.id for run in runs], "runs.runs", lang, column_config={
            t("runs.progress", lang): st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent"),
            t("runs.detail", lang): st.column_config.LinkColumn(display_text=t("runs.open", lang)),
        })
    st.subheader(t("runs.runners", lang))
    if runners:
        health_summary(runners)
        st.dataframe(runners_frame(runners), hide_index=True, width="stretch")
    else:
        st.caption(t("runs.no_runners", lang))


live()
with db_guard(lang):
    queue_actions(cached_runs(200))
