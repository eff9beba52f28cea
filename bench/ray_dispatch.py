"""Runs dispatched per minute through Ray vs the local executor, and the latency Ray adds.

The same tiny emulator runs (one sweep point each: 128/32 tokens, concurrency 1) are
drained by the real daemon in burst mode twice: once with ``BENCHDECK_EXECUTOR=local``,
once with ``ray`` against a real local Ray cluster (a head plus one node offering one
``benchdeck_gpu:H200``, so both executors run one attempt at a time and the difference is
the executor, not parallelism).  Printed per executor:

- runs per minute (daemon start to exit, so Ray's connect and first worker start count);
- per run: claim → attempt end (median), and per point: the point's own wall time
  (median) as recorded in ``sweep_points``;
- Ray's added latency: the differences of those medians.

Absolute figures are of a 2-core machine where the Ray raylets share the cores with the
emulator and the bench client; the difference is what to read.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from db import Store
from domain.core.access import Actor, Role
from domain.plan.plan_io import plan_from_mapping

ROOT = Path(__file__).resolve().parent.parent
ACTOR = Actor("bench", Role.OPERATOR, via="bench")


def _plan(index: int) -> Any:
    return plan_from_mapping({
        "name": f"dispatch-{index}", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B",
        "gpu": {"type": "H200", "count": 1}, "server_args": {"max-running-requests": 8},
        "benchmark": {"scenarios": [{"name": "s", "input_len": 128, "output_len": 32}], "concurrency": [1],
                      "num_prompts": 4, "warmup": 1},
    })


def _env(work: Path, executor: str, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, BENCHDECK_DB=str(work / "bench.duckdb"), BENCHDECK_WORK_DIR=str(work / "runs"),
               BENCHDECK_EXECUTOR=executor, BENCHDECK_POLL_S="0.2", BENCHDECK_LEASE_S="30",
               BENCHDECK_HEARTBEAT_S="1", BENCHDECK_RUNNER_ID=f"bench-{executor}", PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


def _drain(work: Path, executor: str, runs: int, extra: dict[str, str]) -> dict[str, float]:
    store = Store(work / "bench.duckdb")
    store.migrate()
    for i in range(runs):
        store.submit_run(_plan(i), submitted_by=ACTOR)
    env = _env(work, executor, extra)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "runner", "work", "--burst"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{executor} daemon failed: {done.stderr[-2000:]}")
    statuses = [r.status for r in store.list_runs()]
    if statuses.count("succeeded") != runs:
        raise RuntimeError(f"{executor}: not every run succeeded: {statuses}")
    per_run, per_point = [], []
    for run in store.list_runs():
        [attempt] = store.attempts_of(run.id)
        assert attempt.finished_at and attempt.claimed_at  # a drained attempt has both
        per_run.append((attempt.finished_at - attempt.claimed_at).total_seconds())
        points = store.points_of(run.id)
        per_point += [(p.finished_at - p.started_at).total_seconds()
                      for p in points if p.finished_at and p.started_at]
    return {"wall_s": wall, "runs_per_min": runs / wall * 60, "run_s": statistics.median(per_run),
            "point_s": statistics.median(per_point)}


def run(*, quick: bool = False) -> None:
    runs = 3 if quick else 8
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        results["local"] = _drain(Path(tmp) / "local", "local", runs, {})
        from tests.support.ray_cluster import local_ray_cluster

        with local_ray_cluster({"node-h200": {"benchdeck_gpu:H200": 1.0}}, dict(os.environ)) as cluster:
            results["ray"] = _drain(Path(tmp) / "ray", "ray", runs, {"BENCHDECK_RAY_ADDRESS": cluster.address})
    print(f"{runs} runs of one point each (emulator, real bench_serving client), one attempt at a time")
    print(f"{'executor':<10}{'runs/min':>10}{'total s':>10}{'run p50 s':>12}{'point p50 s':>13}")
    for name, r in results.items():
        print(f"{name:<10}{r['runs_per_min']:>10.1f}{r['wall_s']:>10.1f}{r['run_s']:>12.2f}{r['point_s']:>13.3f}")
    local, ray_ = results["local"], results["ray"]
    print(f"Ray adds {ray_['run_s'] - local['run_s']:+.2f} s per run (claim to end, median) and "
          f"{ray_['point_s'] - local['point_s']:+.3f} s per point (median point wall time)")
