"""A study's trials as the Tune page and ``python -m runner tune`` read them back.

A study lives in two files under the work directory (``<work_dir>/tune/``, beside the
attempt directories of domain/core/settings.py): ``<name>.yaml``, the study as
``python -m runner tune`` started it (domain/tune/study_yaml.py ``dump_study``), and
``<name>.journal``, Optuna's journal (``JournalStorage(JournalFileBackend(path))``), an
append-only log that survives a restart of the tune command, of the runner and of the
app.  Every trial that reached the queue carries its run's id as a user attribute
(:data:`RUN_ID_ATTR`); a trial pruned before launch or failed carries the reason
(``search.PRUNED_REASON_ATTR`` / :data:`REASON_ATTR`); a trial added from a run already in DuckDB names that run
(:data:`SEEDED_ATTR`).  The scores and SLA violations are domain/tune/search.py's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from domain.plan.run_plan import RunPlan
from domain.tune.search import CONSTRAINT_ATTR, PRUNED_REASON_ATTR, VIOLATIONS_ATTR
from domain.tune.space import trial_plan
from domain.tune.study import Study, study_tag
from domain.tune.study_yaml import study_from_yaml

RUN_ID_ATTR = "run_id"
REASON_ATTR = "reason"  # why a queued trial's run failed or was cancelled
SEEDED_ATTR = "seeded_from_run"
PRUNED_REASON_JA_ATTR = "pruned_reason_ja"  # the prune reason in Japanese, beside search.PRUNED_REASON_ATTR's English
EARLY_STOP_ATTR = "early_stop"  # the runner's note on a sweep stopped at its first SLA break
BEST_TAG = "tune-best"
BASELINE_TAG = "tune-baseline"
STARTED_ATTR = "started_at"

_STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "fail",
           TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}


def tune_dir(work_dir: Path) -> Path:
    return work_dir / "tune"


def journal_path(work_dir: Path, name: str) -> Path:
    return tune_dir(work_dir) / f"{name}.journal"


def study_file(work_dir: Path, name: str) -> Path:
    """The study's YAML as the tune command started it (the page rebuilds plans from it)."""
    return tune_dir(work_dir) / f"{name}.yaml"


def journal_storage(path: Path) -> JournalStorage:
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def study_names(work_dir: Path) -> list[str]:
    """Studies with both files, newest journal first."""
    folder = tune_dir(work_dir)
    if not folder.is_dir():
        return []
    journals = [p for p in folder.glob("*.journal") if study_file(work_dir, p.stem).is_file()]
    return [p.stem for p in sorted(journals, key=lambda p: p.stat().st_mtime, reverse=True)]


def read_study(work_dir: Path, name: str) -> Study:
    return study_from_yaml(study_file(work_dir, name).read_text(encoding="utf-8"))


def load_trials(work_dir: Path, name: str) -> list[FrozenTrial]:
    """Every trial of the study, in number order; empty when no journal exists yet (reading
    creates nothing: the page never starts a study by looking at it)."""
    path = journal_path(work_dir, name)
    if not path.is_file():
        return []
    try:
        ostudy = optuna.load_study(study_name=study_tag(name), storage=journal_storage(path))
    except KeyError:  # a journal without this study (written by hand, or another name)
        return []
    return ostudy.get_trials(deepcopy=False)


@dataclass(frozen=True)
class TrialRow:
    """One trial as the page lists it."""

    number: int
    state: str  # complete / pruned / fail / running / waiting
    value: float | None  # the objective, for a complete trial
    feasible: bool | None  # every SLA limit met (None: not scored)
    violations: tuple[str, ...]
    params: dict[str, Any]
    run_id: int | None
    reason: str | None  # why pruned or failed (English)
    reason_ja: str | None  # why pruned, in Japanese (a failed run's message stays the runner's English)
    early_stop: str | None  # where the sweep stopped on the SLA, and what it skipped
    seeded_from: int | None  # the earlier run this trial was added from
    started: datetime | None
    finished: datetime | None


def _feasible(trial: FrozenTrial) -> bool | None:
    constraint = trial.user_attrs.get(CONSTRAINT_ATTR)
    if constraint is None or trial.state is not TrialState.COMPLETE:
        return None
    return all(float(c) <= 0 for c in constraint)


def trial_row(trial: FrozenTrial) -> TrialRow:
    attrs = trial.user_attrs
    value = trial.value if trial.state is TrialState.COMPLETE else None
    return TrialRow(
        number=trial.number, state=_STATES.get(trial.state, str(trial.state).lower()),
        value=value if value is not None and math.isfinite(value) else None, feasible=_feasible(trial),
        violations=tuple(attrs.get(VIOLATIONS_ATTR) or ()), params=dict(trial.params),
        run_id=attrs.get(RUN_ID_ATTR), reason=attrs.get(PRUNED_REASON_ATTR) or attrs.get(REASON_ATTR),
        reason_ja=attrs.get(PRUNED_REASON_JA_ATTR),
        early_stop=attrs.get(EARLY_STOP_ATTR), seeded_from=attrs.get(SEEDED_ATTR),
        started=trial.datetime_start, finished=trial.datetime_complete,
    )


def best_trial(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The complete, feasible trial with the highest objective (the tuner maximises); the
    earliest one wins a tie, so the answer does not move when a later trial only equals it."""
    feasible = [t for t in trials if _feasible(t) and t.value is not None and math.isfinite(t.value)]
    return max(feasible, key=lambda t: (t.value, -t.number)) if feasible else None


def trials_frame(trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    """One row per trial, with ``best_so_far``: the best feasible objective among the
    trials up to and including this one (the optimisation history)."""
    rows = [trial_row(t) for t in sorted(trials, key=lambda t: t.number)]
    frame = pd.DataFrame([{**r.__dict__, "params": json.dumps(r.params, sort_keys=True, default=str)}
                          for r in rows])
    if frame.empty:
        return frame
    feasible_value = frame["value"].where(frame["feasible"].fillna(False).astype(bool))
    frame["best_so_far"] = feasible_value.astype(float).cummax()
    return frame


def param_importance(trials: Sequence[FrozenTrial]) -> dict[str, float]:
    """Optuna's parameter importance over the complete trials, by its default evaluator
    (PED-ANOVA, ``optuna.importance.PedAnovaImportanceEvaluator``: how much each lever's
    distribution among the best trials differs from its distribution among all, a
    deterministic computation); empty below two complete trials (nothing to attribute)."""
    complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None
                and math.isfinite(t.value)]
    if len(complete) < 2:
        return {}
    study = optuna.create_study(direction="maximize")
    study.add_trials(complete)
    try:
        return dict(optuna.importance.get_param_importances(study))
    except (RuntimeError, ValueError):  # e.g. no parameter that any two trials set differently
        return {}


def _remade(plan: RunPlan, bench: dict[str, Any], **fields: Any) -> RunPlan:
    """``plan`` with some benchmark and plan fields changed, validated again as a whole."""
    data = plan.model_dump(mode="python")
    data["benchmark"].update(bench)
    data.update(fields)
    return RunPlan.model_validate(data)


def best_plan(study: Study, trial: FrozenTrial, repeats: int) -> RunPlan:
    """The best trial's configuration, measured again with ``repeats`` repeats and every
    point (no early stop), tagged :data:`BEST_TAG`, to compare with the baseline."""
    plan = trial_plan(study, trial.params, trial.number)
    return _remade(plan, {"repeats": repeats, "stop_on_sla": None},
                   tags=list(dict.fromkeys([*plan.tags, BEST_TAG])),
                   name=f"{study.name} · best (trial {trial.number}) × {repeats}")


def baseline_plan(study: Study, repeats: int) -> RunPlan:
    """The base plan itself (no lever set), with ``repeats`` repeats: what the best is
    compared with.  Tagged with the study and :data:`BASELINE_TAG`."""
    base = study.base_plan
    return _remade(base, {"repeats": repeats, "stop_on_sla": None},
                   tags=list(dict.fromkeys([*base.tags, study_tag(study.name), BASELINE_TAG])),
                   name=f"{study.name} · baseline × {repeats}")


def stamp_study(ostudy: optuna.Study, now: datetime) -> str:
    """The study's start, written once into its journal as a study attribute (:data:`STARTED_ATTR`):
    part of every idempotency key, so two journals of one study name never share a run."""
    started = ostudy.user_attrs.get(STARTED_ATTR)
    if started is None:
        started = now.isoformat(timespec="seconds")
        ostudy.set_user_attr(STARTED_ATTR, started)
    return str(started)


def study_started(work_dir: Path, name: str) -> str | None:
    """:func:`stamp_study`'s value read back (None: no journal, or a study not yet started)."""
    path = journal_path(work_dir, name)
    if not path.is_file():
        return None
    try:
        ostudy = optuna.load_study(study_name=study_tag(name), storage=journal_storage(path))
    except KeyError:
        return None
    value = ostudy.user_attrs.get(STARTED_ATTR)
    return str(value) if value is not None else None


def trial_key(study: Study, started: str, number: int) -> str:
    """The idempotency key of a trial's run: a restarted tune command that queues a trial
    again gets the first run back, so no trial is ever queued twice."""
    return f"tune:{study.name}:{started}:trial:{number}"


def best_key(study: Study, started: str, number: int, repeats: int) -> str:
    """The idempotency key of the best's run: queued once, whoever asks (command or page)."""
    return f"tune:{study.name}:{started}:best:{number}:x{repeats}"


def baseline_key(study: Study, started: str, repeats: int) -> str:
    return f"tune:{study.name}:{started}:baseline:x{repeats}"
