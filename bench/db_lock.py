"""The DuckDB lock path, measured with real processes on a real file.

1. A UI-like reader polls (list runs + counts) while a runner-like writer commits short
   transactions: write latency p50/p99 and the error count seen by reader and writer.
2. 8 claimer processes race to drain a queue: claims per second, and a check that each
   run was claimed exactly once.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def run(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reader_writer(Path(tmp) / "rw.duckdb", writes=100 if quick else 300)
        claim_race(Path(tmp) / "claims.duckdb", runs=100 if quick else 400)
