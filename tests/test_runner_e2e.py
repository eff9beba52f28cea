"""The runner daemon end to end: a real subprocess, a real DuckDB file, the emulator and
the real bench_serving client of the pinned SGLang release (.venv-sglang)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from db import Store
from tests.conftest import ROOT
from tests.support.actors import admin, operator
from tests.support.runner_harness import (
    MARK,
    assert_nothing_left,
    attempt_status,
    leftovers,
    run_burst,
    runner_env,
    small_plan,
    start_runner,
    wait_for,
)

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def test_two_scenarios_by_three_concurrencies_complete(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={
        "scenarios": [{"name": "short", "input_len": 64, "output_len": 32},
                      {"name": "longout", "input_len": 32, "output_len": 64}],
        "concurrency": [1, 2, 4], "num_prompts": "3x", "warmup": "1x",
    })
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    run = store.get_run(run_id)
    assert run.status == "succeeded"
    points = store.points_of(run_id)
    assert [(p.scenario, p.concurrency) for p in points] == [
        (s, c) for s in ("longout", "short") for c in (1, 2, 4)
    ]
    for point in points:
        conditions = json.loads(point.conditions)
        assert point.completed == point.requested == 3 * point.concurrency
        assert point.output_throughput > 0 and point.ttft_median_ms > 0 and point.tpot_p99_ms > 0
        assert conditions["random_range_ratio"] == 1.0 and conditions["warmup"] == point.concurrency
        assert conditions["bench_tool"] == "sglang.bench_serving" and conditions["bench_version"] == "0.5.23"
        assert conditions["emulated"] is True
        assert json.loads(point.raw_record)["completed"] == point.completed
    telemetry = store.telemetry_of(run_id)
    for point in points:
        rows = [t for t in telemetry if t.point_id == point.id]
        assert {"running_reqs", "token_usage"} <= {t.metric for t in rows if t.source == "server"}
        gpu = [t for t in rows if t.source == "gpu"]
        # No GPU here: recorded as unavailable with the reason, never as zeros.
        assert [(t.metric, t.mean) for t in gpu] == [("unavailable", None)] and gpu[0].note
    [attempt] = store.attempts_of(run_id)
    facts = json.loads(attempt.startup_facts)
    assert facts["max_total_num_tokens"] > 0 and facts["emulated"] is True
    argv = json.loads(attempt.server_argv)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--enable-metrics" in argv
    assert json.loads(attempt.bench_client)["mode"] == "warm"
    assert_nothing_left(renv[MARK])


def test_a_queue_of_runs_shares_one_warm_client_and_each_attempt_keeps_its_own_log(
        store: Store, env: dict[str, str]) -> None:
    """The daemon keeps an idle warm client for its next run (runner/bench_client.py
    ``KeptClient``): one client process for two runs, each attempt's points in its own log,
    the attempt records that its client was kept, and the burst's end leaves nothing behind."""
    runs = [store.submit_run(small_plan(name=name), submitted_by=operator("test"))[0] for name in ("a", "b")]
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert [store.get_run(r).status for r in runs] == ["succeeded", "succeeded"]
    attempts = [store.attempts_of(r)[-1] for r in runs]
    assert [json.loads(a.bench_client)["runs_served_before"] for a in attempts] == [0, 1]
    work = Path(renv["BENCHDECK_WORK_DIR"])
    first, second = [(work / f"attempt-{a.id}" / "bench.log").read_text(encoding="utf-8") for a in attempts]
    assert "kept from an earlier run" not in first
    assert "kept from an earlier run (started " in second.splitlines()[0]
    for log in (first, second):
        # The client's summary of each of the run's two points lands in that attempt's log.
        assert log.count("Serving Benchmark Result") == 2, log[-2000:]
    assert_nothing_left(renv[MARK])


def test_out_of_memory_fails_as_oom_and_is_not_retried(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(model="Qwen/Qwen3-235B-A22B", gpu={"type": "H100", "count": 1},
                      server_args={"mem-fraction-static": 0.5})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_RUNNER_GPU_TYPE="H100")
    assert run_burst(renv) == 0
    attempts = store.attempts_of(run_id)
    assert [(a.status, a.failure_kind) for a in attempts] == [("failed", "oom")]  # once: never retried
    assert store.get_run(run_id).status == "failed"
    assert "mem-fraction-static" in attempts[0].message and attempts[0].log_tail
    assert_nothing_left(renv[MARK])


def test_server_dying_mid_point_is_a_server_crash(store: Store, env: dict[str, str]) -> None:
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="crash-after-requests=4", BENCHDECK_MAX_ATTEMPTS="1")
    assert run_burst(renv) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "server_crash")
    assert store.points_of(run_id) == [] or all(p.completed for p in store.points_of(run_id))
    assert_nothing_left(renv[MARK])


def test_a_server_that_never_becomes_ready_times_out(store: Store, env: dict[str, str]) -> None:
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("test"))
    # Long enough for the emulator's HTTP server to come up on a loaded host (in 4 s, beside
    # three workers of runner tests, it once had not: the stage read "http_server").
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="never-ready", BENCHDECK_STARTUP_TIMEOUT_S="10",
                      BENCHDECK_MAX_ATTEMPTS="1")
    assert run_burst(renv) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "startup_timeout")
    assert "BENCHDECK_STARTUP_TIMEOUT_S" in attempt.message
    assert attempt.message.startswith("timeout: startup:warmup")  # HTTP up, never ready: the stage is named
    assert_nothing_left(renv[MARK])


def test_kill_9_of_the_runner_mid_point_is_runner_lost_and_cleaned_up(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 256}],
                                 "concurrency": [1, 2], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_MAX_ATTEMPTS="1")
    proc = start_runner(renv, "--burst")
    wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
    os.kill(proc.pid, signal.SIGKILL)  # the runner only: its server and client live on as orphans
    proc.wait(timeout=10)
    assert leftovers(renv[MARK]), "the orphaned server and bench client should still be alive here"
    second = runner_env(env, BENCHDECK_MAX_ATTEMPTS="1")
    second[MARK] = renv[MARK]
    wait_for(lambda: run_burst(second, timeout=60) == 0 and attempt_status(store, run_id) == "failed", 60,
             "lease expiry")
    [attempt] = store.attempts_of(run_id)
    assert attempt.failure_kind == "runner_lost"
    assert store.get_run(run_id).status == "failed"
    assert_nothing_left(renv[MARK])


def test_cancel_while_benchmarking_stops_the_sweep(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 128}],
                                 "concurrency": [1, 2, 4, 8], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    proc = start_runner(renv, "--burst")
    wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
    store.cancel_run(run_id, actor=admin("bob"))
    assert proc.wait(timeout=60) == 0
    assert store.get_run(run_id).status == "cancelled"
    assert [a.status for a in store.attempts_of(run_id)] == ["cancelled"]
    assert len(store.points_of(run_id)) < 4
    assert_nothing_left(renv[MARK])


def test_cancel_while_starting(store: Store, env: dict[str, str]) -> None:
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="never-ready")
    proc = start_runner(renv, "--burst")
    wait_for(lambda: attempt_status(store, run_id) == "starting", 60, "starting")
    store.cancel_run(run_id, actor=admin("bob"))
    assert proc.wait(timeout=60) == 0
    assert store.get_run(run_id).status == "cancelled"
    assert_nothing_left(renv[MARK])


def test_warm_stop_finishes_the_point_and_requeues_the_run(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 128}],
                                 "concurrency": [1, 2, 4], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    proc = start_runner(renv)  # serve-like: no --burst
    wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    [attempt] = store.attempts_of(run_id)
    assert attempt.status == "cancelled" and "runner stopped" in attempt.message
    assert store.get_run(run_id).status == "queued"  # another runner takes it up
    points = store.points_of(run_id)
    assert 1 <= len(points) < 3 and all(p.completed == p.requested for p in points)
    assert_nothing_left(renv[MARK])


def test_warm_stop_during_a_long_start_up_stops_the_load_and_requeues_the_run(
    store: Store, env: dict[str, str]
) -> None:
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("test"))
    # A load far longer than the test waits for the runner to exit (the unit's TimeoutStopSec stands for it).
    renv = runner_env(env, BENCHDECK_EMULATE_STARTUP_S="900", BENCHDECK_STARTUP_TIMEOUT_S="900")
    proc = start_runner(renv)  # serve-like: no --burst
    wait_for(lambda: attempt_status(store, run_id) == "starting", 60, "starting")
    proc.send_signal(signal.SIGTERM)  # one signal: a warm stop
    assert proc.wait(timeout=60) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("cancelled", None)
    assert "during the server's start-up" in attempt.message and "not counted as a failed attempt" in attempt.message
    assert store.get_run(run_id).status == "queued" and store.points_of(run_id) == []
    assert_nothing_left(renv[MARK])


def test_a_corrupt_bench_record_is_bad_output_with_the_raw_output_kept(
    store: Store, env: dict[str, str], tmp_path: Path
) -> None:
    wrapper = tmp_path / "corrupting-bench-python"
    wrapper.write_text(f"#!{ROOT / '.venv-sglang' / 'bin' / 'python'}\n"
                       + (ROOT / "tests" / "support" / "corrupting_bench.py").read_text(encoding="utf-8"))
    wrapper.chmod(0o755)
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_BENCH_PYTHON=str(wrapper), BENCHDECK_MAX_ATTEMPTS="1")
    assert run_burst(renv) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "bad_output")
    assert attempt.raw_bench_output  # what the client left is kept for a human to read
    assert store.points_of(run_id) == []  # and no metrics are stored from it
    assert_nothing_left(renv[MARK])
