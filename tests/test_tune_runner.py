"""The tuner's runner side (issue 17): a sweep's early stop on its SLA, and ``python -m runner
tune`` end to end through the real queue, the real runner daemon (a subprocess), the
emulator and the pinned SGLang release's bench client (.venv-sglang)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
import pytest

from db import RunnerCapabilities, Store
from db.rows import RunProgressRow
from domain.core.settings import Settings
from domain.core.states import AttemptStatus
from domain.plan.run_plan import RunPlan, point_conditions
from domain.results.bench_record import METRIC_COLUMNS
from domain.tune import history
from domain.tune.search import open_optuna_study
from domain.tune.study import Lever, Objective, Study, study_tag, trial_tag
from domain.tune.study_yaml import load_study
from runner.tune import Tuner, gpu_hours, lever_params, with_sla_stop
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.runner_harness import (
    MARK,
    assert_nothing_left,
    attempt_status,
    audit_rows,
    run_burst,
    runner_env,
    small_plan,
    start_runner,
    wait_for,
)

STUDY = ROOT / "tests" / "fixtures" / "tune_e2e" / "study.yaml"


def start_tune(env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m runner.tune STUDY --json`` in its own session, its JSON into ``out``."""
    log = open(out.with_suffix(".log"), "w")
    return subprocess.Popen(
        [sys.executable, "-m", "runner.tune", str(STUDY), "--json", "--poll", "0.3", *args], cwd=ROOT, env=env,
        stdout=open(out, "w"), stderr=log, text=True, start_new_session=True)


def study_runs(store: Store, name: str) -> list[RunProgressRow]:
    return [r for r in store.list_runs(limit=1000) if study_tag(name) in json.loads(r.tags)]


def trial_runs(runs: list[RunProgressRow], number: int) -> list[RunProgressRow]:
    return [r for r in runs if trial_tag(number) in json.loads(r.tags) and history.BEST_TAG not in json.loads(r.tags)]


def _benchmarking_trial(store: Store, name: str) -> bool:
    return any(attempt_status(store, r.id) == "benchmarking" for r in study_runs(store, name))


def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    os.killpg(proc.pid, sig)
    proc.wait(timeout=60)


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.timeout(900)  # about three emulated runs; the wall time depends on how busy the machine is
def test_a_study_runs_through_the_queue_and_survives_restarts(store: Store, env: dict[str, str],
                                                               tmp_path: Path) -> None:
    study = load_study(STUDY)
    renv = runner_env(env)
    runner, tune = start_runner(renv), start_tune(renv, tmp_path / "tune-1.json")
    try:
        wait_for(lambda: _benchmarking_trial(store, study.name), 180, "a trial's run benchmarking")
    finally:  # kill -9 both mid-trial: the runner's server and client are orphaned, the journal says RUNNING
        _stop(tune)
        _stop(runner)
    second = runner_env(env)
    second[MARK] = renv[MARK]  # the orphans count as this test's leftovers
    runner = start_runner(second)
    tune = start_tune(second, tmp_path / "tune-2.json")
    try:
        assert tune.wait(timeout=300) == 0, (tmp_path / "tune-2.log").read_text()
    finally:
        if tune.poll() is None:
            _stop(tune)
        _stop(runner, signal.SIGTERM)  # a warm stop: a best or baseline run under way goes back to the queue
    outcome: dict[str, Any] = json.loads((tmp_path / "tune-2.json").read_text())
    trials = history.load_trials(Path(renv["BENCHDECK_WORK_DIR"]), study.name)
    states = [history.trial_row(t).state for t in trials]
    assert len(trials) == outcome["trials"] == 8 and "running" not in states
    pruned = [history.trial_row(t) for t in trials if t.state.name == "PRUNED"]
    assert pruned and outcome["pruned"] == len(pruned)
    assert all(p.reason and p.run_id is None for p in pruned)
    reasons = " | ".join(str(p.reason) for p in pruned)  # seed 0 draws both kinds of configuration that cannot start
    assert "Does not fit: the weights alone need" in reasons and "the layout needs 2 GPUs" in reasons
    runs = study_runs(store, study.name)
    for trial in trials:  # every trial is one run at most: none was queued twice, a pruned one never
        row = history.trial_row(trial)
        assert [r.id for r in trial_runs(runs, trial.number)] == ([] if row.state == "pruned" else [row.run_id])
    killed = [r for r in runs if len(store.attempts_of(r.id)) > 1]
    assert killed, "the run under way at the kill should have needed a second attempt"
    for run in killed:
        first = store.attempts_of(run.id)[0]
        assert (first.status, first.failure_kind) == ("failed", "runner_lost")
        assert store.get_run(run.id).status == "succeeded"
    # The best feasible trial, queued again with the study's repeats, and the baseline beside it.
    best = store.get_run(outcome["best_run_id"])
    best_plan = RunPlan.model_validate_json(best.plan)
    assert history.BEST_TAG in best_plan.tags and trial_tag(outcome["best_trial"]) in best_plan.tags
    assert best_plan.benchmark.repeats == study.best_repeats and best_plan.benchmark.stop_on_sla is None
    [best_trial_run] = trial_runs(runs, outcome["best_trial"])
    assert best_plan.server_args == RunPlan.model_validate_json(best_trial_run.plan).server_args
    baseline = RunPlan.model_validate_json(store.get_run(outcome["baseline_run_id"]).plan)
    assert baseline.server_args == study.base_plan.server_args and history.BASELINE_TAG in baseline.tags
    assert_nothing_left(renv[MARK])


@pytest.mark.sglang
@pytest.mark.slow
def test_a_point_that_breaks_the_sla_stops_the_sweep_and_records_the_skipped(
        store: Store, env: dict[str, str]) -> None:
    # 1 µs p99 TPOT, watched at concurrency 2 only: no server meets it, so c=1 is measured
    # (not watched), c=2 breaks it and stops the sweep, c=4 is skipped.
    plan = small_plan(benchmark={"scenarios": [{"name": "short", "input_len": 64, "output_len": 16}],
                                 "concurrency": [1, 2, 4], "num_prompts": "2x", "warmup": "1x",
                                 "stop_on_sla": {"tpot_p99_ms": 0.001, "concurrencies": [2]}})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded"  # what was measured is a result
    points = store.points_of(run_id)
    assert sorted(p.concurrency for p in points) == [1, 2]
    [stopping] = [p for p in points if "sla_stop" in json.loads(p.timing)]
    note = json.loads(stopping.timing)["sla_stop"]
    assert stopping.concurrency == 2 and note["at"] == "short/c2/r0" and note["skipped"] == ["short/c4/r0"]
    assert note["broken"][0].startswith("p99 TPOT ") and note["broken"][0].endswith("> 0.001 ms")
    [row] = audit_rows(store, "sla_stop")
    assert row["run_id"] == run_id and row["details"]["skipped"] == note["skipped"]
    assert_nothing_left(renv[MARK])


# -- the pieces that need no process ----------------------------------------------------------------


def _recorded_run(store: Store, plan: RunPlan, throughput: float, tpot_p99_ms: float) -> int:
    """A finished run written through the Store the way the runner writes one (claim, points, finish)."""
    run_id, _ = store.submit_run(plan, submitted_by=operator("t"))
    claim = store.claim_next(RunnerCapabilities("r", "H200", 1, None), lease_s=60)
    assert claim is not None and claim.run_id == run_id
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    for point in claim.plan.points():
        metrics = {column: 10.0 for column in METRIC_COLUMNS}
        metrics.update(output_throughput=throughput, tpot_p99_ms=tpot_p99_ms, completed=point.num_prompts,
                       requested=point.num_prompts)
        store.insert_point(claim.attempt_id, "r", scenario=point.scenario.name, concurrency=point.concurrency,
                           repeat_idx=0, conditions=point_conditions(claim.plan, point), started_at=datetime.now(),
                           finished_at=datetime.now(), metrics=metrics, raw_record={}, telemetry=[])
    store.finish_attempt(claim.attempt_id, "r", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id


def _plan(study: Study, **flags: object) -> RunPlan:
    data = study.base_plan.model_dump(mode="python")
    data["server_args"] = {**data["server_args"], **flags}
    return RunPlan.model_validate(data)


def test_runs_already_measured_under_the_same_conditions_seed_the_study(store: Store, tmp_path: Path) -> None:
    study = load_study(STUDY)
    levers = {"max-running-requests": 8, "mem-fraction-static": 0.5, "schedule-policy": "lpm"}
    same = _recorded_run(store, _plan(study, **levers), throughput=300.0, tpot_p99_ms=20.0)
    over_sla = _recorded_run(store, _plan(study, **{**levers, "max-running-requests": 4}), 400.0, 2000.0)
    _recorded_run(store, _plan(study, **{**levers, "mem-fraction-static": 0.9}), 500.0, 20.0)  # outside the space
    _recorded_run(store, _plan(study, **{"max-running-requests": 8, "mem-fraction-static": 0.5}), 500.0, 20.0)
    other_load = study.base_plan.benchmark.model_copy(update={"concurrency": [1, 2, 4]})
    _recorded_run(store, _plan(study, **levers).model_copy(update={"benchmark": other_load}), 500.0, 20.0)
    settings = Settings(db=store.db_path, work_dir=tmp_path / "runs")
    tuner = Tuner(study, store, settings, operator("t"), say=lambda _line: None)
    ostudy = open_optuna_study(study, optuna.storages.InMemoryStorage())
    assert tuner.seed(ostudy) == 2 and tuner.seed(ostudy) == 0  # once per run, whatever restarts
    by_run = {t.user_attrs[history.SEEDED_ATTR]: t for t in ostudy.get_trials()}
    assert set(by_run) == {same, over_sla}
    assert by_run[same].params == {**levers, "layout": "tp-size=1"}  # no tp-size: SGLang's TP 1
    assert by_run[same].value == pytest.approx(300.0)  # output tok/s per GPU, one GPU
    assert history.trial_row(by_run[same]).feasible is True
    assert history.trial_row(by_run[over_sla]).feasible is False
    assert history.best_trial(ostudy.get_trials()).number == by_run[same].number
    assert tuner._budget_left(ostudy)  # seeded trials cost nothing from the budget


def test_a_trial_that_cannot_start_is_pruned_with_its_reason_and_no_run(store: Store, tmp_path: Path) -> None:
    study = load_study(STUDY)
    settings = Settings(db=store.db_path, work_dir=tmp_path / "runs")
    tuner = Tuner(study, store, settings, operator("t"), say=lambda _line: None)
    ostudy = open_optuna_study(study, optuna.storages.InMemoryStorage())
    fixed = {"max-running-requests": 8, "mem-fraction-static": 0.3, "layout": "tp-size=1", "schedule-policy": "fcfs"}
    ostudy.enqueue_trial(fixed)
    tuner._trial(ostudy, ostudy.ask())
    [trial] = ostudy.get_trials()
    row = history.trial_row(trial)
    assert row.state == "pruned" and row.run_id is None and store.list_runs() == []
    assert row.reason.startswith("Does not fit: the weights alone need")
    assert row.reason_ja and row.reason_ja != row.reason  # the page shows it in Japanese too


def test_the_sweep_stops_on_the_sla_except_for_goodput() -> None:
    study = load_study(STUDY)
    stopped = with_sla_stop(study.base_plan, study).benchmark.stop_on_sla
    assert stopped is not None and (stopped.ttft_p99_ms, stopped.tpot_p99_ms) == (5000, 1000)
    goodput = study.model_copy(update={"objective": Objective.GOODPUT})
    assert with_sla_stop(study.base_plan, goodput).benchmark.stop_on_sla is None


def test_a_layout_lever_reads_a_past_runs_flags() -> None:
    space = [Lever(flag="layout", kind="choice", choices=["tp-size=1", "tp-size=2,ep-size=2", "tp-size=2"])]
    assert lever_params({"tp-size": 2}, space) == {"layout": "tp-size=2"}
    assert lever_params({"tp-size": 2, "ep-size": 2}, space) == {"layout": "tp-size=2,ep-size=2"}
    assert lever_params({"mem-fraction-static": 0.8}, space) == {"layout": "tp-size=1"}
    assert lever_params({"tp-size": 4}, space) is None


def test_a_trial_whose_run_is_cancelled_is_told_failed_with_the_reason(store: Store, tmp_path: Path) -> None:
    study = load_study(STUDY)
    settings = Settings(db=store.db_path, work_dir=tmp_path / "runs")
    tuner = Tuner(study, store, settings, operator("t"), poll_s=0.05, say=lambda _line: None)
    ostudy = open_optuna_study(study, optuna.storages.InMemoryStorage())
    ostudy.enqueue_trial({"max-running-requests": 8, "mem-fraction-static": 0.5, "layout": "tp-size=1",
                          "schedule-policy": "fcfs"})
    worker = threading.Thread(target=tuner._trial, args=(ostudy, ostudy.ask()))
    worker.start()  # it queues the trial's run and waits for it, as for any run
    wait_for(lambda: len(store.list_runs()) == 1, 30, "the trial's run queued")
    [run] = store.list_runs()
    store.cancel_run(run.id, actor=operator("t"))  # nobody claimed it: cancelled at once
    worker.join(timeout=30)
    [trial] = ostudy.get_trials()
    row = history.trial_row(trial)
    assert (row.state, row.run_id, row.reason) == ("fail", run.id, f"run {run.id} cancelled")
    assert trial_tag(trial.number) in json.loads(run.tags) and study_tag(study.name) in json.loads(run.tags)


def test_gpu_hours_count_each_attempt_from_claim_to_end(store: Store) -> None:
    study = load_study(STUDY)
    run_id = _recorded_run(store, _plan(study, **{"max-running-requests": 8}), 100.0, 10.0)
    [attempt] = store.attempts_of(run_id)
    held_s = (attempt.finished_at - attempt.claimed_at).total_seconds()
    assert gpu_hours(store, [run_id], 8, datetime.now(UTC)) == pytest.approx(held_s * 8 / 3600)
