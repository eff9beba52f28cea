"""The History page's reads at scale: a DuckDB file of 10,000 synthetic runs × 8 points
(bench/synthetic.py), one watched run among them judged by one watch pass, then p50/p95 of
one History refresh (the watch's history, the open regressions, the watch's runs), each
read as the app makes it.

``python -m bench watch_history`` (``--quick``: 1,000 runs)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.synthetic import fill
from db import Store
from db.store import RunnerCapabilities, utcnow
from db.watch_store import WatchStore
from domain.core.access import Actor, Role
from domain.core.settings import Settings
from domain.core.states import AttemptStatus
from domain.plan.plan_io import plan_from_mapping
from domain.plan.run_plan import RunPlan, point_conditions
from runner.watch import watch_tick

ACTOR = Actor("bench", Role.OPERATOR, via="bench")
RUNNER = RunnerCapabilities("bench-runner", "H200", 8, None)
REPEATS = 20


def _plan() -> RunPlan:
    return plan_from_mapping({
        "name": "watched", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B", "sglang_version": "0.5.20",
        "gpu": {"type": "H200", "count": 1}, "server_args": {"max-running-requests": 16},
        "benchmark": {"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}], "concurrency": [1, 2],
                      "num_prompts": "3x", "warmup": "1x", "repeats": 3}})


def _finished_run(store: Store) -> int:
    """One run stored as the runner stores it (claim, points, finish): the watched one."""
    run_id, _ = store.submit_run(_plan(), submitted_by=ACTOR)
    claim = store.claim_next(RUNNER, lease_s=60)
    assert claim is not None and claim.run_id == run_id
    store.move_attempt(claim.attempt_id, RUNNER.runner_id, AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, RUNNER.runner_id, AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    now = utcnow()
    for point in claim.plan.points():
        conditions = point_conditions(claim.plan, point)
        conditions.update(engine_version="0.5.20", bench_tool="sglang.bench_serving", bench_version="0.5.23",
                          engine=claim.plan.engine, emulated=True)
        store.insert_point(claim.attempt_id, RUNNER.runner_id, scenario=point.scenario.name,
                           concurrency=point.concurrency, repeat_idx=point.repeat_idx, conditions=conditions,
                           started_at=now, finished_at=now, raw_record={}, telemetry=[],
                           metrics={"output_throughput": 1000.0, "e2e_p99_ms": 100.0, "completed": 3, "requested": 3})
    store.finish_attempt(claim.attempt_id, RUNNER.runner_id, AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id


def run(quick: bool = False) -> None:
    runs = 1_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "history.duckdb", lock_timeout_s=60)
        start = time.perf_counter()
        fill(store, runs=runs, points_per_run=8)
        print(f"built {runs:,} runs × 8 points in {time.perf_counter() - start:.1f} s")
        watches = WatchStore(store)
        watch_id = watches.watch_run(_finished_run(store), actor=ACTOR, points=[("short", 1), ("short", 2)])
        watch_tick(store, Settings(db=store.db_path), runner_id=RUNNER.runner_id, gpu_type="H200",
                   host_version="0.5.20")
        samples = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            _ = (watches.history(watch_id), watches.open_regressions(), watches.runs_of(watch_id))
            samples.append((time.perf_counter() - start) * 1000)
        q = statistics.quantiles(samples, n=100, method="inclusive")
        print(f"  History refresh (watch history + open regressions + watch runs), {REPEATS} times: "
              f"p50 {q[49]:.1f} ms, p95 {q[94]:.1f} ms")
