"""Watched configurations (issue 19): the verdicts on synthetic series, the flag translation
across versions, and the runner's pass over a real DuckDB file with runs stored through the
real Store (claim, points, finish) but no engine: the e2e with the emulator is
tests/test_watch_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from db import Store
from db.connection import KEEP_IDLE_S, keep_open
from db.store import RunnerCapabilities, utcnow
from db.watch_store import WatchStore
from domain.core.access import PermissionDenied
from domain.core.settings import Settings
from domain.core.states import AttemptStatus
from domain.plan.run_plan import RunPlan, point_conditions
from domain.results.watch import Measurement, Repeats, WatchThresholds, judge, overall, summarise_repeats
from runner.watch import TickReport, translate, watch_tick
from tests.support.actors import admin, operator, viewer
from tests.support.runner_harness import small_plan

T = WatchThresholds()


@pytest.fixture
def store(store: Store) -> Store:
    """The conftest store, with this process keeping its DB connection between accesses as
    the app and the runner do (db/connection.py): a watch pass makes dozens of accesses."""
    keep_open(KEEP_IDLE_S)
    return store


# --- the verdicts on synthetic series -------------------------------------------------------


def _series(values: Sequence[float], spread: float, metric: str = "output_throughput") -> list[str]:
    """Feed measurements one by one (each with repeats spread ``spread``); their verdicts."""
    history: list[Measurement] = []
    for run_id, value in enumerate(values):
        judged = judge(history, Repeats(value, 3, spread), metric, T)
        history.append(Measurement(run_id, value, spread, judged.verdict, judged.change))
    return [m.verdict for m in history]


def test_a_slowdown_is_suspicious_first_and_a_regression_when_it_repeats() -> None:
    assert _series([1000, 1000, 1000, 850, 850], spread=10) == [
        "baseline", "ok", "ok", "suspicious", "regression"]


def test_a_five_percent_change_within_the_repeats_noise_is_never_flagged() -> None:
    # A new version 5 % slower (then 5 % faster), the repeats spread 6 %: inside the band.
    for changed in (950, 1050):
        assert set(_series([1000, 1004, 996, *[changed] * 5], spread=60)[1:]) == {"ok"}
    # Past a tight noise band but under the 10 % threshold: still nothing.
    assert set(_series([1000, 1000, 1000, 950, 950, 950], spread=1)[1:]) == {"ok"}


def test_a_change_past_the_threshold_but_inside_the_noise_band_is_not_flagged() -> None:
    assert _series([1000, 1000, 880, 880], spread=150)[1:] == ["ok", "ok", "ok"]


def test_improvement_is_symmetric_and_latency_is_worse_when_higher() -> None:
    assert _series([1000, 1000, 1200, 1200], spread=10)[2:] == ["suspicious", "improvement"]
    assert _series([100, 100, 120, 121], spread=1, metric="e2e_p99_ms")[2:] == ["suspicious", "regression"]
    assert _series([100, 100, 80, 80], spread=1, metric="e2e_p99_ms")[2:] == ["suspicious", "improvement"]


def test_one_slow_run_then_a_normal_one_is_no_regression() -> None:
    assert _series([1000, 1000, 850, 1000, 850], spread=10) == [
        "baseline", "ok", "suspicious", "ok", "suspicious"]
    # Slower then faster is two different directions: never confirmed.
    assert _series([1000, 1000, 850, 1200], spread=10)[2:] == ["suspicious", "suspicious"]


def test_a_confirmed_shift_becomes_the_new_level() -> None:
    assert _series([1000, 1000, 850, 850, 850, 850], spread=10)[2:] == ["suspicious", "regression", "ok", "ok"]


def test_the_baseline_is_the_median_of_the_last_n_and_its_band_the_repeats_spread() -> None:
    history = [Measurement(i, v, s, "ok") for i, (v, s) in enumerate([(500, 5), (1000, 20), (1010, 30), (990, 10)])]
    judged = judge(history, Repeats(700, 3, 5), "output_throughput", WatchThresholds(baseline_runs=3))
    assert judged.baseline == 1000 and (judged.band_low, judged.band_high) == (970, 1030)
    assert judged.baseline_runs == (1, 2, 3) and judged.change == pytest.approx(-0.3)
    assert judged.verdict == "suspicious"


def test_repeats_summary_and_overall_verdict() -> None:
    assert summarise_repeats([10.0, 12.0, None, 11.0]) == Repeats(11.0, 3, 2.0)
    assert summarise_repeats([None]) == Repeats(None, 0, None)
    assert summarise_repeats([5.0]).spread is None
    assert overall(["ok", "suspicious", "improvement"]) == "suspicious"
    assert overall(["ok", "regression", "suspicious"]) == "regression"


def test_thresholds_follow_the_settings() -> None:
    settings = Settings(watch_throughput_threshold=0.2, watch_latency_threshold=0.3, watch_baseline_runs=5)
    assert WatchThresholds.from_settings(settings) == WatchThresholds(5, 0.2, 0.3)


# --- translating a watched plan to a new version ----------------------------------------------


def test_cuda_graph_max_bs_is_translated_from_0_5_15_to_0_5_23() -> None:
    plan = small_plan(sglang_version="0.5.15.post1", server_args={"cuda-graph-max-bs": 8})
    moved = translate(plan, "0.5.15.post1", "0.5.23")
    assert isinstance(moved, RunPlan)
    assert moved.server_args == {"cuda-graph-max-bs-decode": 8} and moved.sglang_version == "0.5.23"


def test_a_flag_the_new_version_removed_stops_with_the_drift_tables_message() -> None:
    plan = small_plan(sglang_version="0.5.20", server_args={"cuda-graph-tc-compiler": "inductor"})
    stopped = translate(plan, "0.5.20", "0.5.23")
    assert isinstance(stopped, dict) and stopped["kind"] == "no_counterpart"
    [flag] = stopped["flags"]
    assert flag["flag"] == "cuda-graph-tc-compiler"
    assert flag["note"]["en"] == "0.5.23 has no torch.compile prefill CUDA graph."
    # --cuda-graph-max-bs beside its own 0.5.23 spelling: no translation, no guess.
    both = small_plan(sglang_version="0.5.15.post1", server_args={"cuda-graph-max-bs": 8,
                                                                 "cuda-graph-max-bs-decode": 16})
    refused = translate(both, "0.5.15.post1", "0.5.23")
    assert isinstance(refused, dict) and [f["flag"] for f in refused["flags"]] == ["cuda-graph-max-bs"]


# --- the runner's pass over a real store ------------------------------------------------------


def _finished_run(store: Store, plan: RunPlan, throughput: Sequence[float], *, latency: float = 100.0,
                  version: str | None = None, seed_shift: int = 0) -> int:
    """Queue ``plan`` and store its result as a runner would (claim, points, finish): per
    point, one repeat per ``throughput`` value, latencies moving the other way."""
    run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
    return _complete(store, run_id, plan, throughput, latency=latency, version=version, seed_shift=seed_shift)


def _complete(store: Store, run_id: int, plan: RunPlan, throughput: Sequence[float], *, latency: float = 100.0,
              version: str | None = None, seed_shift: int = 0) -> int:
    caps = RunnerCapabilities("synthetic-runner", plan.gpu.type, 8, None)
    claim = store.claim_next(caps, lease_s=60)
    assert claim is not None and claim.run_id == run_id
    for status in (AttemptStatus.STARTING, AttemptStatus.BENCHMARKING):
        current = AttemptStatus.CLAIMED if status is AttemptStatus.STARTING else AttemptStatus.STARTING
        store.move_attempt(claim.attempt_id, caps.runner_id, current, status)
    now = utcnow()
    for point in claim.plan.points():
        value = throughput[point.repeat_idx % len(throughput)]
        conditions = point_conditions(claim.plan, point)
        conditions.update(engine_version=version or claim.plan.sglang_version, bench_tool="sglang.bench_serving",
                          bench_version="0.5.23", engine=claim.plan.engine, emulated=True)
        conditions["seed"] += seed_shift
        store.insert_point(claim.attempt_id, caps.runner_id, scenario=point.scenario.name,
                           concurrency=point.concurrency, repeat_idx=point.repeat_idx, conditions=conditions,
                           started_at=now, finished_at=now, raw_record={}, telemetry=[],
                           metrics={"output_throughput": value, "e2e_p99_ms": latency * 1000 / value,
                                    "completed": 3, "requested": 3})
    store.finish_attempt(claim.attempt_id, caps.runner_id, AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id


def _plan(version: str = "0.5.20", **args: object) -> RunPlan:
    return small_plan(name="watched", sglang_version=version, server_args=args or {"max-running-requests": 16},
                      benchmark={"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}],
                                 "concurrency": [1, 2], "num_prompts": "3x", "warmup": "1x", "repeats": 3})


def _tick(store: Store, version: str | None, now: datetime | None = None) -> TickReport:
    return watch_tick(store, Settings(db=store.db_path), runner_id="synthetic-runner", gpu_type="H200",
                      host_version=version, now=now)


def _verdicts(watches: WatchStore, watch_id: int, run_id: int) -> set[str]:
    return {h.verdict for h in watches.history(watch_id) if h.run_id == run_id}


def test_version_change_queues_a_translated_low_priority_rerun_and_confirms_a_regression(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000, 1010, 990])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1), ("short", 2)])
    assert watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)]) == watch_id
    first = _tick(store, "0.5.20")
    assert first.judged == [(watch_id, origin, "baseline")] and first.queued == []

    moved = _tick(store, "0.5.23")
    assert moved.version_change == ("0.5.20", "0.5.23") and moved.retargeted == [watch_id]
    [(_, rerun)] = moved.queued
    run = store.get_run(rerun)
    plan = RunPlan.model_validate_json(run.plan)
    assert run.status == "queued" and run.priority < 0 and "watch" in plan.tags
    assert plan.sglang_version == "0.5.23" and run.submitted_by == "alice"
    assert _tick(store, "0.5.23").queued == []  # one at a time

    _complete(store, rerun, plan, [850, 860, 845], version="0.5.23")
    judged = _tick(store, "0.5.23")
    assert (watch_id, rerun, "suspicious") in judged.judged
    [(_, confirm)] = judged.queued  # the confirming re-run, no click
    assert [r.reason for r in watches.runs_of(watch_id)] == ["origin", "version_change", "confirm"]

    _complete(store, confirm, plan, [855, 850, 848], version="0.5.23")
    confirmed = _tick(store, "0.5.23")
    assert (watch_id, confirm, "regression") in confirmed.judged
    assert _verdicts(watches, watch_id, confirm) == {"regression"}
    regressions = watches.open_regressions()
    assert {(r.watch_id, r.run_id, r.metric) for r in regressions} == {
        (watch_id, confirm, m) for m in ("output_throughput", "e2e_p99_ms")}
    assert all(r.sglang_version == "0.5.23" and r.change < -0.1 for r in regressions if r.metric != "e2e_p99_ms")


def test_a_five_percent_slower_rerun_within_noise_is_not_flagged(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000, 1060, 960])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)])
    _tick(store, "0.5.20")
    for _ in range(2):
        assert watches.request_run(watch_id, actor=operator("alice"))
        [(_, rerun)] = _tick(store, "0.5.20").queued
        _complete(store, rerun, watches.get(watch_id).plan(), [950, 990, 930])
        assert _tick(store, "0.5.20").judged == [(watch_id, rerun, "ok")]


def test_a_removed_flag_stops_the_watch_with_the_drift_note(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(**{"cuda-graph-tc-compiler": "inductor"}), [1000])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)])
    _tick(store, "0.5.20")
    report = _tick(store, "0.5.23")
    assert report.stopped == [watch_id] and report.queued == []
    watch = watches.get(watch_id)
    reason = json.loads(watch.stopped_reason)
    assert watch.state == "stopped" and reason["to"] == "0.5.23"
    assert reason["flags"][0]["note"]["ja"] == "0.5.23 には torch.compile によるプレフィル CUDA graph がありません。"


def test_cuda_graph_max_bs_watch_follows_0_5_15_to_0_5_23(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan("0.5.15.post1", **{"cuda-graph-max-bs": 8}), [1000])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)])
    _tick(store, "0.5.15.post1")
    [(_, rerun)] = _tick(store, "0.5.23").queued
    plan = RunPlan.model_validate_json(store.get_run(rerun).plan)
    assert plan.server_args == {"cuda-graph-max-bs-decode": 8}
    [recorded] = [r for r in watches.runs_of(watch_id) if r.run_id == rerun]
    assert [c["rule"] for c in json.loads(recorded.translations)] == ["cuda_graph_max_bs"]


def test_a_change_of_conditions_starts_a_new_series_and_says_why(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)])
    _tick(store, "0.5.20")
    watches.request_run(watch_id, actor=operator("alice"))
    [(_, rerun)] = _tick(store, "0.5.20").queued
    _complete(store, rerun, watches.get(watch_id).plan(), [700], seed_shift=5)
    assert _tick(store, "0.5.20").judged == [(watch_id, rerun, "baseline")]
    runs = {r.run_id: r for r in watches.runs_of(watch_id)}
    assert (runs[origin].series_no, runs[rerun].series_no) == (1, 2)
    assert json.loads(runs[rerun].series_reason)["conditions"] == {"seed": ["42, 43, 44", "47, 48, 49"]}


def test_schedule_is_for_admins_and_queues_when_due(store: Store) -> None:
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1)])
    with pytest.raises(PermissionDenied):
        watches.set_schedule(watch_id, 24, actor=operator("alice"))
    with pytest.raises(PermissionDenied):
        watches.watch_run(origin, actor=viewer(), points=[("short", 1)])
    watches.set_schedule(watch_id, 24, actor=admin())
    assert _tick(store, None).queued == []
    later = _tick(store, None, now=utcnow() + timedelta(hours=25))
    assert [w for w, _ in later.queued] == [watch_id]
    assert [r.reason for r in watches.runs_of(watch_id)][-1] == "schedule"
    with pytest.raises(PermissionDenied):
        watches.stop(watch_id, actor=operator("bob"), reason="not mine")
    watches.stop(watch_id, actor=operator("alice"), reason="done with it")
    assert watches.get(watch_id).state == "stopped" and watches.active() == []


def test_history_queries_find_the_watch_among_ten_thousand_runs(tmp_path: Path) -> None:
    """The History page's reads pick the one watched run out of 10,000 others; how fast
    they are is measured in ``make bench`` (bench/watch_history.py), not asserted here."""
    from bench.synthetic import fill

    store = Store(tmp_path / "big.duckdb")
    fill(store, runs=10_000, points_per_run=8)
    watches = WatchStore(store)
    origin = _finished_run(store, _plan(), [1000])
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 1), ("short", 2)])
    _tick(store, "0.5.20")
    history, regressions, runs = watches.history(watch_id), watches.open_regressions(), watches.runs_of(watch_id)
    assert len(history) == 4 and regressions == [] and len(runs) == 1
    assert {h.run_id for h in history} == {origin} and runs[0].run_id == origin
