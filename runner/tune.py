"""``python -m runner tune STUDY.yaml [--trials N] [--json]``: search a study's levers through the queue.

One trial at a time: Optuna asks (domain/tune/search.py, TPE seeded by the study), the
study's levers are proposed (domain/tune/space.py) and merged into the base plan; a plan
that cannot start — a flag the version or the policy refuses, a value the rule profile
bans, a layout the GPUs cannot hold, a configuration the memory fit rules out — is told
PRUNED with its reason and costs no run.  Any other trial is an ordinary run, queued
through db.Store.submit_run with the study's and the trial's tags (visible in the queue,
cancellable, comparable), waited for, scored over its points (domain/tune/score.py) and
told.  Its sweep stops at the first point that breaks the SLA (``stop_on_sla``,
runner/attempt.py).

The study survives a restart of this command and of the runner: Optuna's journal
(domain/tune/history.py) keeps every trial, a trial still RUNNING there is picked up again
and its run found by its idempotency key (queued at most once), and a runner that dies
mid-trial only sends the run back to the queue.  Runs already in DuckDB under the same
conditions are added as finished trials before the first ask.  When the budget is spent,
the best feasible configuration is queued with ``best_repeats`` repeats, and the base
plan with as many, so the two can be compared (pages/compare.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FixedTrial, FrozenTrial, TrialState

from db import Store
from db.quality_inputs import trial_quality
from db.rows import RunProgressRow, RunRow
from domain.core.access import Actor, PermissionDenied, local_actor
from domain.core.i18n import t
from domain.core.settings import Settings, get_settings
from domain.core.states import RunStatus
from domain.plan.checks import check_plan
from domain.plan.plan_io import PlanError
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import RunPlan, SlaStop
from domain.results.frames import points_frame
from domain.tune import history
from domain.tune.quality import with_quality
from domain.tune.score import TrialScore, score_points
from domain.tune.search import (
    CONSTRAINT_ATTR,
    MAX_CONCURRENCY_ATTR,
    VIOLATIONS_ATTR,
    constraint_for,
    open_optuna_study,
    tell_pruned,
    tell_score,
)
from domain.tune.space import LAYOUT, BannedProposal, cannot_start, expand_params, propose, trial_plan
from domain.tune.study import Lever, Objective, Study
from domain.tune.study_yaml import dump_study, load_study
from runner.command_args import Subparsers, add_tune
from runner.run_wait import wait_until_finished

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
RUN_LIST_LIMIT = 100_000  # every run: seeding reads the whole list once
# The flags a layout lever sets (domain/tune/space.py LAYOUT): part of the levers, not of the fixed flags.
LAYOUT_FLAGS = {"tp-size", "ep-size", "dp-size", "attn-dp-size", "enable-dp-attention"}


def add_parser(subparsers: Subparsers) -> None:
    add_tune(subparsers, command)


def command(args: argparse.Namespace, settings: Settings) -> int:
    """The form ``runner/cli.py`` calls its commands in."""
    lang = getattr(args, "lang", None) or "en"
    study = _load(args.study, lang)
    if study is None:
        return EXIT_INVALID
    if args.trials is not None:
        study = study.model_copy(update={"budget": study.budget.model_copy(update={"trials": args.trials})})
    store = Store.from_settings(settings)
    store.migrate()
    tuner = Tuner(study, store, settings, local_actor(settings.local_role, via="cli"), lang=lang,
                  poll_s=args.poll, say=_stderr)
    try:
        outcome = tuner.tune()
    except KeyboardInterrupt:  # the journal keeps the trial under way: the same command picks it up again
        print(t("tune.cli.interrupted", lang, study=args.study), file=sys.stderr)
        return EXIT_INTERRUPTED
    except (QuotaExceeded, PermissionDenied) as exc:
        print(exc.text(lang) if isinstance(exc, QuotaExceeded) else t("cli.denied", lang, detail=str(exc)),
              file=sys.stderr)
        return EXIT_INVALID
    print(json.dumps(outcome, ensure_ascii=False) if args.json else _summary(outcome, lang))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return command(args, get_settings())


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _load(path: str, lang: str) -> Study | None:
    try:
        return load_study(Path(path))
    except (OSError, UnicodeDecodeError) as exc:
        print(t("cli.cannot_read", lang, path=path, detail=exc), file=sys.stderr)
    except PlanError as exc:
        print(t("tune.cli.study_invalid", lang, path=path), file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem.field}: {problem.text(lang)}" if problem.field else f"  - {problem.text(lang)}",
                  file=sys.stderr)
    return None


def _summary(outcome: dict[str, Any], lang: str) -> str:
    if outcome["best_trial"] is None:
        return t("tune.cli.no_feasible", lang, trials=outcome["trials"])
    return t("tune.cli.best_queued", lang, trial=outcome["best_trial"], value=outcome["best_value"],
             objective=outcome["objective"], run_id=outcome["best_run_id"], repeats=outcome["best_repeats"],
             baseline=outcome["baseline_run_id"])


# -- the pieces that need no Optuna -----------------------------------------------------------------


def with_sla_stop(plan: RunPlan, study: Study) -> RunPlan:
    """The trial's sweep stops at its first point that breaks the study's SLA: the trial is
    infeasible (output tok/s per GPU) or its crossing is found (max concurrency under the
    SLA).  Not for goodput, where a point over a p99 limit still has good requests to
    count, nor without an SLA limit: every point then counts for the objective."""
    sla = study.sla
    if not sla.limited or study.objective == Objective.GOODPUT:
        return plan
    stop = SlaStop(ttft_p99_ms=sla.ttft_p99_ms, tpot_p99_ms=sla.tpot_p99_ms, concurrencies=sla.concurrencies)
    data = plan.model_dump(mode="python")
    data["benchmark"]["stop_on_sla"] = stop.model_dump()
    return RunPlan.model_validate(data)


def prune_reason(plan: RunPlan, settings: Settings, lang: str = "en") -> str | None:
    """Why ``plan`` cannot start, in ``lang``, as ``python -m runner check`` and the memory
    fit see it (domain/plan/checks.py, domain/tune/space.py ``cannot_start``), or None.
    Warnings (a rule risk, a tight KV pool) do not prune: the run measures them."""
    reason = cannot_start(plan, lang)
    if reason is not None:
        return reason
    report = check_plan(plan, settings, lang)
    return "flags: " + "; ".join(report.errors) if report.errors else None


def run_failure(store: Store, run: RunRow) -> str:
    """Why a trial's run did not succeed, in one line (its last attempt's message)."""
    if run.status == RunStatus.CANCELLED:
        return f"run {run.id} cancelled" + (f" by {run.cancel_requested_by}" if run.cancel_requested_by else "")
    attempts = store.attempts_of(run.id)
    last = attempts[-1] if attempts else None
    if last is None:
        return f"run {run.id} {run.status}"
    return f"run {run.id} {run.status}: {last.failure_kind or '-'}: {last.message or ''}".rstrip(": ")


def early_stop_note(store: Store, run_id: int) -> str | None:
    """The sweep's early stop as the runner recorded it in the stopping point's timing."""
    for point in store.points_of(run_id):
        note = json.loads(point.timing or "{}").get("sla_stop")
        if note:
            return f"stopped at {note['at']}: {'; '.join(note['broken'])}; {len(note['skipped'])} point(s) skipped"
    return None


def score_run(store: Store, study: Study, run_id: int) -> TrialScore:
    """The study's objective over the run's points, with per-request samples for goodput."""
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    ids = [int(p) for p in frame["point_id"].dropna()] if not frame.empty else []
    score = score_points(frame, study, store.request_samples(ids) if ids else None)
    return with_quality(score, trial_quality(store, run_id)) if study.quality == "same" else score


def gpu_hours(store: Store, run_ids: list[int], gpu_count: int, now: datetime) -> float:
    """GPU-hours the study's runs held: each attempt from its claim to its end (or now) ×
    the plan's GPU count.  Emulated runs count as their plans say: the budget is the plan's."""
    seconds = 0.0
    for run_id in run_ids:
        for attempt in store.attempts_of(run_id):
            end = attempt.finished_at or now.replace(tzinfo=None)
            seconds += max(0.0, (end - attempt.claimed_at).total_seconds())
    return seconds * gpu_count / 3600


def same_conditions(plan: RunPlan, base: RunPlan, levers: set[str]) -> bool:
    """A past run measured what a trial of ``base`` would: the same engine, model, GPUs,
    topology, workload (scenarios, concurrencies, prompts) and the same flags outside the levers."""
    mine, theirs = plan.benchmark, base.benchmark
    outside = {k: v for k, v in plan.server_args.items() if k not in levers}
    base_outside = {k: v for k, v in base.server_args.items() if k not in levers}
    return (plan.engine, plan.emulated, plan.sglang_version, plan.model, plan.gpu, plan.topology.snapshot()) == (
        base.engine, base.emulated, base.sglang_version, base.model, base.gpu, base.topology.snapshot()) and (
        mine.scenarios, mine.concurrency, mine.num_prompts, mine.dataset, mine.backend) == (
        theirs.scenarios, theirs.concurrency, theirs.num_prompts, theirs.dataset, theirs.backend
    ) and outside == base_outside


# A layout flag at 1 (or a switch off) is what SGLang does without it: "tp-size=1" matches a plan that omits it.
_LAYOUT_DEFAULTS: dict[str, object] = {"tp-size": 1, "ep-size": 1, "dp-size": 1, "attn-dp-size": 1,
                                       "enable-dp-attention": False}


def _layout_of(flags: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in flags.items() if k in LAYOUT_FLAGS and _LAYOUT_DEFAULTS.get(k) != v}


def lever_params(server_args: Mapping[str, object], space: list[Lever]) -> dict[str, object] | None:
    """A past run's lever values as :func:`domain.tune.space.propose` names them (a layout
    as the choice whose flags the run set); None when the run leaves a lever unset."""
    params: dict[str, object] = {}
    for lever in space:
        if lever.flag == LAYOUT:
            wanted = _layout_of(server_args)
            choice = next((c for c in lever.choices or () if _layout_of(expand_params({LAYOUT: c})) == wanted), None)
            if choice is None:
                return None
            params[LAYOUT] = choice
        elif lever.flag in server_args:
            params[lever.flag] = server_args[lever.flag]
        else:
            return None
    return params


def seeded_trial(study: Study, params: dict[str, object], score: TrialScore, run_id: int) -> FrozenTrial | None:
    """A finished trial for a past run, with the attributes ``tell_score`` writes
    (domain/tune/search.py) and the distributions ``propose`` asks with (recorded through
    Optuna's FixedTrial); None when a value lies outside the space or the rule profile bans it."""
    fixed = FixedTrial(params)
    amount = constraint_for(score)
    try:
        with warnings.catch_warnings():  # FixedTrial warns on a value out of range; create_trial refuses it below
            warnings.simplefilter("ignore")
            propose(fixed, study.space, study.rule_profile)
        return optuna.trial.create_trial(
            value=score.value, params=params, distributions=fixed.distributions, constraints={CONSTRAINT_ATTR: amount},
            user_attrs={history.SEEDED_ATTR: run_id, history.RUN_ID_ATTR: run_id, CONSTRAINT_ATTR: [amount],
                        VIOLATIONS_ATTR: list(score.violations), MAX_CONCURRENCY_ATTR: score.max_concurrency})
    except ValueError:
        return None


def _plan_of(row: RunProgressRow) -> RunPlan | None:
    try:
        return RunPlan.model_validate_json(row.plan)
    except ValueError:  # an imported run's record is not a plan
        return None


# -- the loop -----------------------------------------------------------------------------------------


@dataclass
class Tuner:
    study: Study
    store: Store
    settings: Settings
    actor: Actor
    lang: str = "en"
    poll_s: float = 2.0
    say: Callable[[str], None] = _stderr
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    started: str = ""

    def tune(self) -> dict[str, Any]:
        """Resume, seed, spend the budget, then queue the best and the baseline."""
        work_dir = self.settings.work_dir
        history.tune_dir(work_dir).mkdir(parents=True, exist_ok=True)
        history.study_file(work_dir, self.study.name).write_text(dump_study(self.study), encoding="utf-8")
        storage = history.journal_storage(history.journal_path(work_dir, self.study.name))
        ostudy = open_optuna_study(self.study, storage)
        self.started = history.stamp_study(ostudy, self.clock())
        for frozen in ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self.say(t("tune.cli.resuming", self.lang, trial=frozen.number))
            # The same trial again (Optuna's own Trial over its id): the values it already
            # drew come back as they were, so its plan and its idempotency key are the same.
            self._trial(ostudy, optuna.trial.Trial(ostudy, frozen._trial_id))
        seeded = self.seed(ostudy)
        if seeded:
            self.say(t("tune.cli.seeded", self.lang, trials=seeded))
        while self._budget_left(ostudy):
            trial = ostudy.ask()
            self._trial(ostudy, trial)
        return self._finish(ostudy)

    # -- one trial --
    def _trial(self, ostudy: optuna.Study, trial: optuna.trial.Trial) -> None:
        try:
            params = propose(trial, self.study.space, self.study.rule_profile)
            plan = with_sla_stop(trial_plan(self.study, params, trial.number), self.study)
        except BannedProposal as exc:
            self._prune(ostudy, trial, f"rule profile {self.study.rule_profile}: {exc}")
            return
        except ValueError as exc:  # the plan refuses the combination (a layout the GPUs cannot hold)
            self._prune(ostudy, trial, f"plan: {_first_line(exc)}")
            return
        reason = prune_reason(plan, self.settings)
        if reason is not None:
            trial.set_user_attr(history.PRUNED_REASON_JA_ATTR, prune_reason(plan, self.settings, "ja"))
            self._prune(ostudy, trial, reason)
            return
        self._evaluate(ostudy, trial, plan)

    def _prune(self, ostudy: optuna.Study, trial: optuna.trial.Trial, reason: str) -> None:
        tell_pruned(ostudy, trial, reason)  # English, as every runner message; the Japanese one beside it
        self.say(t("tune.cli.pruned", self.lang, trial=trial.number, reason=reason))

    def _evaluate(self, ostudy: optuna.Study, trial: optuna.trial.Trial, plan: RunPlan) -> None:
        """Queue (at most once) the trial's run, wait for it, score it and tell Optuna."""
        number = trial.number
        run_id, created = self.store.submit_run(plan, submitted_by=self.actor,
                                                idempotency_key=history.trial_key(self.study, self.started, number))
        trial.set_user_attr(history.RUN_ID_ATTR, run_id)
        self.say(t("tune.cli.queued" if created else "tune.cli.waiting", self.lang, trial=number, run_id=run_id))
        run = self._wait(run_id)
        if run.status != RunStatus.SUCCEEDED:
            reason = run_failure(self.store, run)
            trial.set_user_attr(history.REASON_ATTR, reason)
            ostudy.tell(trial, state=TrialState.FAIL)
            self.say(t("tune.cli.failed", self.lang, trial=number, reason=reason))
            return
        note = early_stop_note(self.store, run_id)
        if note is not None:
            trial.set_user_attr(history.EARLY_STOP_ATTR, note)
        score = score_run(self.store, self.study, run_id)
        tell_score(ostudy, trial, score)
        self.say(t("tune.cli.scored", self.lang, trial=number, run_id=run_id, value=_shown(score.value),
                   objective=self.study.objective.value,
                   sla=t("tune.cli.sla_pass" if not score.violations else "tune.cli.sla_fail", self.lang)))

    def _wait(self, run_id: int) -> RunRow:
        return wait_until_finished(self.store, run_id, self.poll_s)

    # -- the budget --
    def _counted(self, ostudy: optuna.Study) -> list[FrozenTrial]:
        """The trials this study spent (seeded ones cost nothing)."""
        return [tr for tr in ostudy.get_trials(deepcopy=False) if history.SEEDED_ATTR not in tr.user_attrs]

    def _budget_left(self, ostudy: optuna.Study) -> bool:
        spent = self._counted(ostudy)
        if len(spent) >= self.study.budget.trials:
            return False
        limit = self.study.budget.gpu_hours
        if limit is None:
            return True
        runs = [int(tr.user_attrs[history.RUN_ID_ATTR]) for tr in spent if history.RUN_ID_ATTR in tr.user_attrs]
        used = gpu_hours(self.store, runs, self.study.base_plan.gpu.count, self.clock())
        if used >= limit:
            self.say(t("tune.cli.gpu_hours_spent", self.lang, used=used, limit=limit))
            return False
        return True

    # -- seeding --
    def seed(self, ostudy: optuna.Study) -> int:
        """Add every succeeded run in DuckDB measured under the study's conditions, whose
        levers all lie in the space, and not yet in the study, as a finished trial."""
        known = {tr.user_attrs.get(history.RUN_ID_ATTR) for tr in ostudy.get_trials(deepcopy=False)}
        levers = {lever.flag for lever in self.study.space}
        levers |= LAYOUT_FLAGS if LAYOUT in levers else set()
        added = 0
        for row, plan in self._past_runs():
            if row.id in known or not same_conditions(plan, self.study.base_plan, levers):
                continue
            trial = self._seeded(row.id, plan)
            if trial is not None:
                ostudy.add_trial(trial)
                added += 1
        return added

    def _seeded(self, run_id: int, plan: RunPlan) -> FrozenTrial | None:
        params = lever_params(plan.server_args, self.study.space)
        if params is None:
            return None
        score = score_run(self.store, self.study, run_id)
        return seeded_trial(self.study, params, score, run_id) if score.value is not None else None

    def _past_runs(self) -> Iterator[tuple[RunProgressRow, RunPlan]]:
        for row in self.store.list_runs(limit=RUN_LIST_LIMIT):
            if row.status != RunStatus.SUCCEEDED:
                continue
            plan = _plan_of(row)
            if plan is not None and history.BEST_TAG not in plan.tags and history.BASELINE_TAG not in plan.tags:
                yield row, plan

    # -- the end --
    def _finish(self, ostudy: optuna.Study) -> dict[str, Any]:
        trials = ostudy.get_trials(deepcopy=False)
        best = history.best_trial(trials)
        repeats = self.study.best_repeats
        outcome: dict[str, Any] = {
            "study": self.study.name, "objective": self.study.objective.value, "trials": len(self._counted(ostudy)),
            "pruned": sum(tr.state is TrialState.PRUNED for tr in trials), "best_trial": None, "best_value": None,
            "best_params": None, "best_run_id": None, "baseline_run_id": None, "best_repeats": repeats,
        }
        if best is None:
            return outcome
        best_run, _ = self.store.submit_run(history.best_plan(self.study, best, repeats), submitted_by=self.actor,
                                            idempotency_key=history.best_key(self.study, self.started, best.number,
                                                                             repeats))
        baseline, _ = self.store.submit_run(history.baseline_plan(self.study, repeats), submitted_by=self.actor,
                                            idempotency_key=history.baseline_key(self.study, self.started, repeats))
        outcome.update(best_trial=best.number, best_value=best.value, best_params=best.params,
                       best_run_id=best_run, baseline_run_id=baseline)
        return outcome


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


__all__ = ["Tuner", "add_parser", "command", "early_stop_note", "gpu_hours", "prune_reason", "run",
           "same_conditions", "score_run", "with_sla_stop"]


def main(argv: list[str] | None = None) -> int:
    """``python -m runner.tune STUDY.yaml``: the same command outside runner/cli.py's parser."""
    settings = get_settings()
    parser = argparse.ArgumentParser(prog="python -m runner.tune")
    parser.add_argument("--lang", choices=["ja", "en"], default=settings.language, help="output language")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["tune", *(sys.argv[1:] if argv is None else argv)])
    return command(args, settings)


if __name__ == "__main__":
    sys.exit(main())
