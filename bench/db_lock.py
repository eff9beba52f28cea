"""The DuckDB lock path, measured with real processes on a real file.

1. A UI-like reader polls (list runs + counts) while a runner-like writer commits short
   transactions: write latency p50/p99 and the error count seen by reader and writer.
2. 8 claimer processes race to drain a queue: claims per second, and a check that each
   run was claimed exactly once.
3. At the UI's rate, the issue's target (writes p99 ≤ 50 ms): a runner-like writer (a
   point per second with its telemetry, the current point, the cancel check, the lease
   and runner heartbeats) beside an app-like process (sessions with a run page open, each
   polling its four reads every 2 s, plus the shared runs list, counts and runners), with
   10,000 synthetic runs in the DB; three times: every access opens and closes; only the
   app keeps its connection (``db.connection.keep_open``; the deployment before the runner
   daemon kept its own, runner/cli.py ``cmd_work``); both keep theirs; the runner keeps
   its connection and serves the app's accesses on it (``db/serving.py``, the deployment
   now).  Reader errors, busy answers, and lost writes (points the writer committed
   against points in the DB).  The machine's load average is printed with each, as the
   figures depend on it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import synthetic
from db import Store
from domain.core.access import Actor, Role
from domain.plan.quotas import Quotas
from domain.plan.run_plan import RunPlan

ROOT = Path(__file__).resolve().parent.parent


def _spawn(mode: str, db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.db_worker", mode, str(db), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _collect(proc: subprocess.Popen[str]) -> object:
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(err)
    return json.loads(out)


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def reader_writer(db: Path, writes: int = 300, readers: int = 2) -> None:
    Store(db).migrate()
    reader_procs = [_spawn("read", db, "12") for _ in range(readers)]
    time.sleep(0.5)
    latencies = _collect(_spawn("write", db, str(writes)))
    stats = [_collect(r) for r in reader_procs]
    assert isinstance(latencies, list)
    reads = sum(s["reads"] for s in stats)  # type: ignore[index]
    busy = sum(s["busy"] for s in stats)  # type: ignore[index]
    errors = sum(s["errors"] for s in stats)  # type: ignore[index]
    print(f"lock path: {writes} writes beside {readers} polling readers")
    print(f"  write latency p50 {_quantile(latencies, 0.50):.1f} ms, p99 {_quantile(latencies, 0.99):.1f} ms, "
          f"max {max(latencies):.1f} ms")
    print(f"  reader polls {reads}, busy answers {busy}, errors {errors}; writer errors 0")


def claim_race(db: Path, runs: int = 400, claimers: int = 8) -> None:
    store = Store(db, quotas=Quotas(queued_runs_per_user=runs))  # one user queues them all
    store.migrate()
    plan = RunPlan(name="bench", engine="emulator", model="Qwen/Qwen3-30B-A3B",
                   gpu={"type": "H200", "count": 1})  # type: ignore[arg-type]
    for i in range(runs):
        store.submit_run(plan, submitted_by=Actor("bench", Role.OPERATOR, via="bench"), idempotency_key=f"k{i}")
    start = time.perf_counter()
    procs = [_spawn("claim", db, f"c{i}") for i in range(claimers)]
    won = [_collect(p) for p in procs]
    elapsed = time.perf_counter() - start
    claimed = [run_id for ids in won for run_id in ids]  # type: ignore[attr-defined]
    exact = sorted(claimed) == list(range(1, runs + 1))
    print(f"claim race: {claimers} processes, {runs} runs")
    print(f"  {runs / elapsed:.0f} claims/s ({elapsed:.1f} s incl. process start), "
          f"each run claimed exactly once: {exact}; per-claimer wins {[len(w) for w in won]}")  # type: ignore[arg-type]


# (the app keeps its connection, what the runner does with its own, how the line names it):
# "close" opens and closes per access, "keep" keeps it, "serve" keeps it and runs the app's
# accesses on it (db/serving.py).
UI_RATE_SETUPS = (
    (False, "close", "opened and closed per access"),
    (True, "close", "kept by the app only"),
    (True, "keep", "kept by the app and the runner"),
    (True, "serve", "kept by the runner, which serves the app's accesses (the deployment now)"),
)


def _keep_arg(keep: bool) -> str:
    return "keep" if keep else "close"


def ui_rate(db: Path, *, seconds: int, sessions: int, keep_ui: bool, runner: str, label: str) -> None:
    """One runner-like writer and one app-like reader process, for ``seconds``."""
    ui = _spawn("ui", db, str(seconds), str(sessions), _keep_arg(keep_ui))
    writer = _collect(_spawn("runner", db, str(seconds), runner))
    reads = _collect(ui)
    assert isinstance(writer, dict) and isinstance(reads, dict)
    writes = writer["writes"]
    stored = len(Store(db).points_of(writer["run_id"]))
    print(f"  connections {label} (load average {os.getloadavg()[0]:.1f}): "
          f"write p50 {_quantile(writes, 0.50):.1f} ms, p99 {_quantile(writes, 0.99):.1f} ms, "
          f"max {max(writes):.1f} ms ({len(writes)} writes); reads {reads['reads']} "
          f"(p50 {reads['read_p50_ms']:.1f} ms, p99 {reads['read_p99_ms']:.1f} ms), busy {reads['busy']}, "
          f"reader errors {reads['errors']}; points committed {writer['points']}, in the DB {stored}, "
          f"lost {writer['points'] - stored}")


def ui_rate_both(tmp: Path, *, runs: int, seconds: int, sessions: int = 3) -> None:
    print(f"UI rate: a runner-like writer (a point per second + heartbeats) beside the app polling "
          f"every 2 s ({sessions} run pages + the runs list), {runs:,} runs × 20 points in the DB, {seconds} s each")
    for i, (keep_ui, runner, label) in enumerate(UI_RATE_SETUPS):
        db = tmp / f"ui-{i}.duckdb"
        store = Store(db, lock_timeout_s=120)
        synthetic.fill(store, runs=runs, points_per_run=20)
        ui_rate(db, seconds=seconds, sessions=sessions, keep_ui=keep_ui, runner=runner, label=label)


def run(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reader_writer(Path(tmp) / "rw.duckdb", writes=100 if quick else 300)
        claim_race(Path(tmp) / "claims.duckdb", runs=100 if quick else 400)
        ui_rate_both(Path(tmp), runs=1_000 if quick else 10_000, seconds=20 if quick else 60)
