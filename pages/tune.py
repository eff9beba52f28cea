"""Tune: a study's trials live (state, score, SLA met or missed, why a trial was pruned or
failed, where its sweep stopped), the best so far, Optuna's optimisation history,
parameter importance and a parallel-coordinates view, and one button that queues the
best configuration with N repeats and the baseline beside it, then opens the compare page.

A study is started by ``python -m runner tune STUDY.yaml`` on a host that can reach the
database (a page never starts a process); this page reads the study's files under the
work directory (domain/tune/history.py) and its trials' runs from the database.  Every
score is domain/tune/score.py's over the trial's measured points."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from optuna.trial import FrozenTrial

from db.rows import RunProgressRow
from domain.core.access import Action
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.plan.plan_io import PlanError
from domain.render import tune_charts
from domain.render.charts import styled
from domain.tune import history
from domain.tune.study import Study
from pages.parts.auth import can, current_actor
from pages.parts.common import cached_runs, clear_run_caches, current_language, db_guard, store

lang = current_language()
work_dir = get_settings().work_dir
STUDY_KEY = "tune.study"
st.title(t("tune.page.title", lang))
st.caption(t("tune.page.intro", lang))


def _study_choice() -> str | None:
    names = history.study_names(work_dir)
    if not names:
        st.info(t("tune.page.no_studies", lang, path=history.tune_dir(work_dir)), icon=":material/tune:")
        st.code("python -m runner tune STUDY.yaml", language="bash")
        return None
    wanted = st.query_params.get("study")
    index = names.index(wanted) if wanted in names else 0
    name = st.selectbox(t("tune.page.study", lang), names, index=index, key=STUDY_KEY)
    st.query_params.update({"study": name, "lang": lang})
    return str(name)


def _sla_text(study: Study) -> str:
    sla = study.sla
    limits = [f"p99 TTFT ≤ {sla.ttft_p99_ms:g} ms" if sla.ttft_p99_ms is not None else "",
              f"p99 TPOT ≤ {sla.tpot_p99_ms:g} ms" if sla.tpot_p99_ms is not None else ""]
    text = ", ".join(x for x in limits if x) or t("tune.page.no_sla", lang)
    where = (t("tune.page.at_concurrencies", lang, list=", ".join(map(str, sla.concurrencies))) if sla.concurrencies
             else t("tune.page.every_concurrency", lang))
    return t("tune.page.sla_at", lang, limits=text, concurrencies=where)


def study_summary(study: Study) -> None:
    plan = study.base_plan
    facts = [(t("tune.page.objective", lang), t(f"tune.page.objective.{study.objective.value}", lang)),
             (t("tune.page.base", lang), f"{plan.model} · {plan.gpu.count}×{plan.gpu.type}"),
             (t("tune.page.budget", lang), t("tune.page.trials_n", lang, n=study.budget.trials)),
             (t("tune.page.rule_profile", lang), study.rule_profile)]
    for column, (label, value) in zip(st.columns([3, 3, 1, 1.5]), facts, strict=True):
        column.markdown(f"**{label}**  \n{value}")  # text, not st.metric: a long objective name stays whole
    st.caption(_sla_text(study) + " · " + t(f"tune.page.objective_how.{study.objective.value}", lang))
    st.caption(t("tune.page.levers", lang, levers=", ".join(lever.flag for lever in study.space)))


def _state_text(row: pd.Series) -> str:
    text = t(f"tune.page.state.{row['state']}", lang)
    return text + (" · " + t("tune.page.seeded", lang) if pd.notna(row["seeded_from"]) else "")


def _sla_cell(row: pd.Series) -> str:
    if row["state"] != "complete" or row["feasible"] is None or pd.isna(row["feasible"]):
        return ""
    return t("tune.page.sla_met" if row["feasible"] else "tune.page.sla_missed", lang)


def _note(row: pd.Series) -> str:
    reason = row["reason_ja"] if lang == "ja" and isinstance(row["reason_ja"], str) else row["reason"]
    parts = [str(x) for x in (reason, row["early_stop"]) if isinstance(x, str) and x]
    parts += list(row["violations"] or ())
    return " · ".join(parts)


def trials_table(frame: pd.DataFrame, runs: dict[int, RunProgressRow]) -> pd.DataFrame:
    rows = []
    for _, row in frame.iloc[::-1].iterrows():  # newest first: the trial under way is on top
        run = runs.get(int(row["run_id"])) if pd.notna(row["run_id"]) else None
        rows.append({
            t("tune.page.col.trial", lang): int(row["number"]),
            t("tune.page.col.state", lang): _state_text(row),
            t("tune.page.col.value", lang): f"{row['value']:,.1f}" if pd.notna(row["value"]) else "",
            t("tune.page.col.sla", lang): _sla_cell(row),
            t("tune.page.col.run", lang): f"run?run={int(row['run_id'])}&lang={lang}" if run else "",
            t("tune.page.col.run_status", lang): _run_status(run),
            t("tune.page.col.note", lang): _note(row),
            t("tune.page.col.params", lang): row["params"],
        })
    return pd.DataFrame(rows)


def _run_status(run: RunProgressRow | None) -> str:
    if run is None:
        return ""
    text = t(f"status.{run.status}", lang)
    if run.status == "running":
        text += f" {int(run.points_done or 0)}/{int(run.total_points)}"
    return text


def best_panel(study: Study, best: FrozenTrial | None, frame: pd.DataFrame) -> None:
    st.subheader(t("tune.page.best", lang))
    if best is None:
        st.info(t("tune.page.no_best", lang), icon=":material/hourglass_top:")
        return
    c1, c2, c3 = st.columns([1, 1, 2])
    c1.metric(t(f"tune.page.objective.{study.objective.value}", lang), f"{best.value:,.1f}",
              help=t(f"tune.page.objective_how.{study.objective.value}", lang))
    c2.metric(t("tune.page.col.trial", lang), best.number)
    run_id = best.user_attrs.get(history.RUN_ID_ATTR)
    if run_id is not None:
        c2.page_link("pages/run.py", label=f"#{run_id}", query_params={"run": str(run_id)},
                     icon=":material/open_in_new:")
    c3.json(best.params, expanded=True)
    spent = int((frame["seeded_from"].isna()).sum()) if not frame.empty else 0
    st.caption(t("tune.page.best_how", lang, trials=spent, pruned=int((frame["state"] == "pruned").sum())))


def queue_best(study: Study, best: FrozenTrial) -> None:
    """Queue the best with N repeats and the baseline with as many (each once: idempotency
    keys), then open the compare page on them once both have finished."""
    if not can(Action.SUBMIT):
        st.caption(t("auth.viewer_cannot_queue", lang))
        return
    started = history.study_started(work_dir, study.name)
    if started is None:
        return
    # No form: the button's label follows the number as it is typed.
    repeats = int(st.number_input(t("tune.page.repeats", lang), min_value=1, max_value=20, value=study.best_repeats,
                                  step=1, key="tune.repeats"))
    if not st.button(t("tune.page.queue_best", lang, n=repeats), type="primary", icon=":material/compare_arrows:"):
        return
    ids = _submit_best(study, best, started, repeats)
    if ids is None:
        return
    st.session_state["tune.queued"] = ids
    runs = [store().get_run(i) for i in ids.values()]
    if all(run is not None and run.status in ("succeeded", "failed", "cancelled") for run in runs):
        st.switch_page("pages/compare.py",
                       query_params={"baseline": str(ids["baseline"]), "runs": str(ids["best"]), "lang": lang})


def _submit_best(study: Study, best: FrozenTrial, started: str, repeats: int) -> dict[str, int] | None:
    """The best's run and the baseline's, queued (or found: the same keys as the tune command's)."""
    ids: dict[str, int] = {}
    with db_guard(lang) as guard:
        ids["best"], _ = store().submit_run(history.best_plan(study, best, repeats), submitted_by=current_actor(),
                                            idempotency_key=history.best_key(study, started, best.number, repeats))
        ids["baseline"], _ = store().submit_run(history.baseline_plan(study, repeats), submitted_by=current_actor(),
                                                idempotency_key=history.baseline_key(study, started, repeats))
    clear_run_caches()
    return None if guard.failed else ids


def queued_status(runs: dict[int, RunProgressRow]) -> None:
    """The best's and the baseline's runs queued from this page: their progress, then the
    compare page once both have finished."""
    ids = st.session_state.get("tune.queued")
    if not ids:
        return
    best, baseline = runs.get(ids["best"]), runs.get(ids["baseline"])
    st.success(t("tune.page.queued", lang, best=ids["best"], baseline=ids["baseline"],
                 best_status=_run_status(best), baseline_status=_run_status(baseline)), icon=":material/schedule:")
    st.page_link("pages/compare.py", label=t("tune.page.open_compare", lang), icon=":material/compare_arrows:",
                 query_params={"baseline": str(ids["baseline"]), "runs": str(ids["best"]), "lang": lang})


def charts(study: Study, frame: pd.DataFrame, trials: list[FrozenTrial]) -> None:
    scored = frame[(frame["state"] == "complete") & frame["value"].notna()] if not frame.empty else frame
    if scored.empty:
        st.caption(t("tune.page.no_charts", lang))
        return
    objective = study.objective.value
    st.altair_chart(styled(tune_charts.history_chart(frame, objective, lang)), theme=None)
    importances = history.param_importance(trials)
    if importances:
        st.altair_chart(styled(tune_charts.importance_chart(importances, lang)), theme=None)
    else:
        st.caption(t("tune.page.no_importance", lang))
    st.altair_chart(styled(tune_charts.parallel_chart(frame, objective, lang)), theme=None)


def _runs_by_id() -> dict[int, RunProgressRow]:
    with db_guard(lang) as guard:
        rows = cached_runs(2000)
    return {} if guard.failed else {r.id: r for r in rows}


@st.fragment(run_every="3s")
def live(name: str, study: Study) -> None:
    trials = history.load_trials(work_dir, name)
    frame = history.trials_frame(trials)
    runs = _runs_by_id()
    st.subheader(t("tune.page.trials", lang))
    if frame.empty:
        st.info(t("tune.page.no_trials", lang), icon=":material/hourglass_top:")
        return
    counts = frame["state"].value_counts()
    st.caption(t("tune.page.counts", lang, total=len(frame), complete=int(counts.get("complete", 0)),
                 pruned=int(counts.get("pruned", 0)), failed=int(counts.get("fail", 0)),
                 running=int(counts.get("running", 0))))
    st.dataframe(trials_table(frame, runs), hide_index=True, width="stretch", column_config={
        t("tune.page.col.run", lang): st.column_config.LinkColumn(display_text=r"run\?run=(\d+)"),
    })
    best = history.best_trial(trials)
    best_panel(study, best, frame)
    queued_status(runs)
    charts(study, frame, trials)


name = _study_choice()
if name is not None:
    try:
        study = history.read_study(work_dir, name)
    except (OSError, UnicodeDecodeError, PlanError) as exc:  # a study file edited by hand: say so
        st.error(t("tune.page.study_unreadable", lang, name=name, detail=str(exc)), icon=":material/error:")
        st.stop()
    study_summary(study)
    live(name, study)
    best_trial = history.best_trial(history.load_trials(work_dir, name))
    if best_trial is not None:
        queue_best(study, best_trial)
