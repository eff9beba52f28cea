"""The first comparison of a freshly measured run against a baseline, before and after the
runner keeps each point's intervals when it writes the point (db/bootstrap_memo.py
``keep_intervals``, called by runner/attempt.py): two synthetic runs × 20 points
(``bench/synthetic.py``) with per-request samples as the runner writes them (ten requests
per unit of concurrency, at most 2,000; 128 output tokens), the baseline's intervals kept
(it was compared before), the fresh run's:

- **before**: not kept (the first visit resamples every point of the fresh run);
- **after**: kept by the runner as it wrote each point (the CPU this took per point is the
  cost on the GPU host between points).

Each prints the comparison as the page builds it (``compare_samples._comparison``) on the
first visit and on a later one, in a process warmed by one untimed round (as the app's
server is warm when a teammate opens the page).  ``python -m bench compare_fresh`` (``--quick``: 10 points)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench.compare_samples import _comparison, _requests
from bench.synthetic import fill
from db import Store
from db.bootstrap_memo import keep_intervals
from db.connection import transaction
from runner.bench_client import write_request_samples


def _with_samples(store: Store, run_ids: list[int], directory: Path, kept: set[int]) -> dict[int, list[float]]:
    """Samples for every point of ``run_ids``; intervals kept for the runs in ``kept``, as the
    runner keeps them; the CPU seconds each kept point took."""
    rng = np.random.default_rng(7)
    rows: list[tuple[int, str, int]] = []
    spent: dict[int, list[float]] = {}
    for point in store.points_for_comparison(run_ids):
        path = directory / f"point-{point.id}.parquet"
        requests = _requests(int(point.concurrency), rng)
        write_request_samples(requests, path)
        if point.run_id in kept:
            cpu = keep_intervals(path, point.duration_s)
            if cpu is not None:
                spent.setdefault(point.run_id, []).append(cpu)
        rows.append((point.id, str(path), len(requests)))
    with transaction(store.db_path, lock_timeout_s=store.lock_timeout_s) as con:
        con.executemany("INSERT INTO request_samples (point_id, path, requests) VALUES (?, ?, ?)", rows)
    return spent


def _visits(points: int, runner_keeps: bool) -> tuple[float, float, list[float]]:
    """(first visit s, later visit s, the runner's CPU s per point of the fresh run)."""
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp:
        store = Store(Path(tmp) / "bench.duckdb", lock_timeout_s=60)
        fill(store, runs=2, points_per_run=points)
        baseline, fresh = sorted(r.id for r in store.list_runs(limit=2))
        spent = _with_samples(store, [baseline, fresh], Path(tmp), {baseline, fresh} if runner_keeps else {baseline})
        first, _ = _comparison(store, [baseline, fresh])
        later, _ = _comparison(store, [baseline, fresh])
    return first, later, spent.get(fresh, [])


def run(quick: bool = False) -> None:
    points = 10 if quick else 20
    from scipy import stats  # noqa: F401 - imported by the server at start (scripts/serve_app.py)

    _visits(points, True)  # warms this process (imports, catalogues) as a running server is warm
    print(f"first compare visit of a fresh {points}-point run against a baseline (samples: 10 requests per unit "
          f"of concurrency, at most 2,000 a point)", flush=True)
    for label, keeps in (("before (page resamples)", False), ("after (runner keeps)", True)):
        first, later, spent = _visits(points, keeps)
        print(f"  {label:<24} first {first:6.2f} s  later {later:6.2f} s  first − later {first - later:+6.2f} s",
              flush=True)
    fresh = spent
    print(f"  runner CPU per point to keep its intervals: median {statistics.median(fresh) * 1000:.0f} ms, "
          f"max {max(fresh) * 1000:.0f} ms ({len(fresh)} points)", flush=True)
