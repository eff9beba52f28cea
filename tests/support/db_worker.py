"""A separate process that uses the store like the runner or the UI would.

Run as ``python -m tests.support.db_worker MODE DB_PATH ...``; tests start several of
these at once to exercise the cross-process lock for real.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from db import DbBusy, RunnerCapabilities, Store
from db.connection import KEEP_IDLE_S, keep_open
from db.store import utcnow
from domain.core.states import AttemptStatus
from domain.plan.quotas import Quotas
from domain.plan.run_plan import RunPlan
from tests.support.actors import operator

# The UI's polling period: the live fragments of pages/run.py and pages/runs.py
# (``st.fragment(run_every="2s")``) and QUERY_TTL_S of pages/parts/common.py.
UI_PERIOD_S = 2.0
LEASE_S = 60.0


def claim_all(db: Path, runner_id: str) -> None:
    """Claim until the queue is empty; print the run ids this process won, as JSON."""
    store = Store(db, lock_timeout_s=60)
    caps = RunnerCapabilities(runner_id, "H200", 8, None)
    won = []
    while (claim := store.claim_next(caps, lease_s=600)) is not None:
        won.append(claim.run_id)
    print(json.dumps(won))


def write_audit(db: Path, count: int) -> None:
    """Runner-like writer: ``count`` short write transactions; print their latencies (ms)."""
    store = Store(db, lock_timeout_s=30)
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        store.audit("writer", "tick", None, {"i": i})
        latencies.append((time.perf_counter() - start) * 1000)
    print(json.dumps(latencies))


def poll_reads(db: Path, seconds: float) -> None:
    """UI-like reader: poll until time is up; print counts of reads, busy answers, errors."""
    store = Store(db, lock_timeout_s=5)
    reads = busy = errors = 0
    deadline = time.monotonic() + seconds
    # Past the deadline, keep going until one read got through (at most a minute): under a
    # loaded host a writer with precedence can hold readers off for the whole window, and
    # what the test needs to know is that they are delayed, not starved.
    hard_deadline = deadline + 60
    while time.monotonic() < deadline or (reads == 0 and time.monotonic() < hard_deadline):
        try:
            store.list_runs(20)
            store.run_counts()
            reads += 1
        except DbBusy:
            busy += 1
        except Exception as exc:  # counted, and reported: the test asserts there are none
            errors += 1
            print(f"reader error: {exc!r}", file=sys.stderr)
    print(json.dumps({"reads": reads, "busy": busy, "errors": errors}))


def _timed(latencies: list[float], call: Callable[..., Any], *args: object, **kwargs: object) -> Any:
    start = time.perf_counter()
    result = call(*args, **kwargs)
    latencies.append((time.perf_counter() - start) * 1000)
    return result


def _claimed_attempt(store: Store, runner_id: str) -> tuple[int, int]:
    """A run of our own, claimed and benchmarking, as the runner has it before its first point."""
    plan = RunPlan(name="runner-like", engine="emulator", model="Qwen/Qwen3-30B-A3B",
                   gpu={"type": "H200", "count": 1})
    store.submit_run(plan, submitted_by=operator("bench"), idempotency_key=f"runner-like-{runner_id}")
    store.register_runner(runner_id, host="bench", gpu_type="H200", gpu_count=8, sglang_version=None,
                          healthy=True, unhealthy_reason=None, info={})
    claim = store.claim_next(RunnerCapabilities(runner_id, "H200", 8, None), lease_s=LEASE_S)
    if claim is None:
        raise SystemExit("nothing to claim")
    for current, new in ((AttemptStatus.CLAIMED, AttemptStatus.STARTING),
                         (AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)):
        store.move_attempt(claim.attempt_id, runner_id, current, new)
    return claim.run_id, claim.attempt_id


def runner_like(db: Path, seconds: float, keep: str) -> None:
    """A runner executing a sweep: each second one point (current point, the point with
    its telemetry, the cancel check) and its heartbeats (lease and runner row).  Prints
    every write's latency (ms), the points written and the run, as JSON."""
    if keep != "close":
        keep_open(KEEP_IDLE_S, serve=keep == "serve")
    store = Store(db, lock_timeout_s=30, quotas=Quotas(queued_runs_per_user=10_000))
    runner_id = "runner-like"
    run_id, attempt_id = _claimed_attempt(store, runner_id)
    writes: list[float] = []
    written = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        now = utcnow()
        _timed(writes, store.set_current_point, attempt_id, runner_id, f"p{written}")
        point = _timed(writes, store.insert_point, attempt_id, runner_id, scenario="s0", concurrency=1 + written,
                       repeat_idx=0, conditions={}, started_at=now - timedelta(seconds=1), finished_at=now,
                       metrics={"completed": 10}, raw_record={}, telemetry=[
                           {"source": "gpu", "device": None, "metric": "util_pct", "n": 10, "mean": 50.0,
                            "p50": 50.0, "max": 90.0, "note": None}])
        written += point is not None
        store.cancel_requested_by(run_id)
        _timed(writes, store.heartbeat, attempt_id, runner_id, lease_s=LEASE_S)
        _timed(writes, store.runner_heartbeat, runner_id, healthy=True, unhealthy_reason=None)
        time.sleep(max(0.0, (written + 1) - (time.monotonic() - start)) if elapsed < seconds else 0)
    print(json.dumps({"writes": writes, "points": written, "run_id": run_id}))


def _poll_at_ui_rate(store: Store, calls: list[tuple[str, tuple[object, ...]]], seconds: float,
                     stats: dict[str, object], guard: threading.Lock) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick = time.monotonic()
        for name, args in calls:
            start = time.perf_counter()
            try:
                getattr(store, name)(*args)
                outcome = "reads"
            except DbBusy:
                outcome = "busy"
            except Exception as exc:  # counted, and reported: the benchmark prints them
                outcome = "errors"
                print(f"reader error: {exc!r}", file=sys.stderr)
            with guard:
                stats[outcome] = int(stats[outcome]) + 1  # type: ignore[call-overload]
                stats["latencies"].append((time.perf_counter() - start) * 1000)  # type: ignore[attr-defined]
        time.sleep(max(0.0, UI_PERIOD_S - (time.monotonic() - tick)))


def ui_like(db: Path, seconds: float, sessions: int, keep: bool) -> None:
    """The app process at the UI's rate: ``sessions`` browser sessions each with a run page
    open (its live fragment's four reads every 2 s), and the runs list, counts and runners
    the cached reads share (every 2 s for the process).  Prints read, busy and error counts
    and the read latency p50/p99 (ms), as JSON."""
    if keep:
        keep_open(KEEP_IDLE_S)
    store = Store(db, lock_timeout_s=5)
    while not (newest := store.list_runs(1)) or newest[0].status != "running":  # the runner's run
        time.sleep(0.05)
    run_id = newest[0].id
    page = [(name, (run_id,)) for name in ("get_run", "attempts_of", "points_of", "telemetry_of")]
    shared: list[tuple[str, tuple[object, ...]]] = [("list_runs", (200,)), ("run_counts", ()), ("list_runners", ())]
    stats: dict[str, object] = {"reads": 0, "busy": 0, "errors": 0, "latencies": []}
    guard = threading.Lock()
    threads = [threading.Thread(target=_poll_at_ui_rate, args=(store, calls, seconds, stats, guard))
               for calls in [shared, *([page] * sessions)]]
    for thread in threads:
        thread.start()
        time.sleep(UI_PERIOD_S / len(threads))  # sessions do not poll in step
    for thread in threads:
        thread.join()
    latencies = sorted(stats.pop("latencies"))  # type: ignore[call-overload]
    stats["read_p50_ms"] = statistics.median(latencies)
    stats["read_p99_ms"] = latencies[int(0.99 * (len(latencies) - 1))]
    print(json.dumps(stats))


def hang_in_transaction(db: Path, rows: int) -> None:
    """Insert rows inside an open transaction, say so, then wait to be killed."""
    store = Store(db, lock_timeout_s=30)
    with store._tx() as con:  # the store's own transaction, held open on purpose
        for i in range(rows):
            store._audit(con, "crash", "x", i, {})
        print("inside", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    mode, db_arg, *rest = sys.argv[1:]
    path = Path(db_arg)
    if mode == "claim":
        claim_all(path, rest[0])
    elif mode == "write":
        write_audit(path, int(rest[0]))
    elif mode == "read":
        poll_reads(path, float(rest[0]))
    elif mode == "runner":
        runner_like(path, float(rest[0]), rest[1])
    elif mode == "ui":
        ui_like(path, float(rest[0]), int(rest[1]), rest[2] == "keep")
    elif mode == "hang":
        hang_in_transaction(path, int(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")
