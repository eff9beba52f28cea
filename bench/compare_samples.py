"""The compare page's analysis of runs that kept their requests: nine synthetic runs × 20
points (``bench/synthetic.py``), each point given per-request samples as the runner writes
them (a Parquet file, ten requests per unit of concurrency as the plans' default
``num_prompts: 10x`` asks, at most 2,000; 128 output tokens each), then the comparison the
page builds (kept bootstrap intervals read, build, reading the samples it needs, new
intervals kept):

- **first**: no interval kept yet (every point measured once is resampled, then kept);
- **kept**: the same, as a new server process does it once the intervals are kept
  (db/bootstrap_memo.py).

The pages' browser benchmark (``pages_browser``) has no samples: this is the part of a real
store's compare page that it does not see.  ``python -m bench compare_samples`` (``--quick``:
three runs)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.synthetic import fill
from db import Store
from db.bootstrap_memo import keep_memos
from db.connection import transaction
from domain.compare.comparison import comparison_with_settings
from domain.core.settings import Settings
from domain.results.frames import points_frame
from runner.bench_client import MeasuredRequest, write_request_samples

OUTPUT_TOKENS = 128


def _requests(concurrency: int, rng: np.random.Generator) -> list[MeasuredRequest]:
    count = int(min(max(10 * concurrency, 10), 2000))
    return [MeasuredRequest(True, 512, OUTPUT_TOKENS, float(rng.lognormal(-3.0, 0.4)), float(rng.lognormal(0.0, 0.2)),
                            [float(v) for v in rng.lognormal(-4.0, 0.3, OUTPUT_TOKENS - 1)], i * 0.01)
            for i in range(count)]


def _with_samples(store: Store, run_ids: list[int], directory: Path) -> int:
    rng = np.random.default_rng(7)
    rows = []
    for point in store.points_for_comparison(run_ids):
        path = directory / f"point-{point.id}.parquet"
        requests = _requests(int(point.concurrency), rng)
        write_request_samples(requests, path)
        rows.append((point.id, str(path), len(requests)))
    with transaction(store.db_path, lock_timeout_s=store.lock_timeout_s) as con:
        con.executemany("INSERT INTO request_samples (point_id, path, requests) VALUES (?, ?, ?)", rows)
    return sum(r[2] for r in rows)


def _comparison(store: Store, run_ids: list[int]) -> tuple[float, int]:
    """(seconds, samples files read) for the comparison as the page builds it
    (pages/parts/selection.py ``_cached_comparison``): the points, the intervals kept beside
    their samples, the comparison (which reads the samples it needs, and the per-request
    columns the method badges read: ``SampleFiles.timelines``), the new intervals kept."""
    started = time.perf_counter()
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))
    files = store.sample_files([int(p) for p in frame["point_id"].dropna()])
    memos = files.memos()
    comparison_with_settings(frame, run_ids[0], run_ids[1:], "en", Settings(), requests=files,
                             bootstrap_memos=memos, timelines=files.timelines())
    read = files.read()
    keep_memos(read, memos)
    return time.perf_counter() - started, len(read)


def run(quick: bool = False) -> None:
    runs = 3 if quick else 9
    with tempfile.TemporaryDirectory(prefix="bench-samples-") as tmp:
        store = Store(Path(tmp) / "bench.duckdb", lock_timeout_s=60)
        fill(store, runs=runs, points_per_run=20)
        run_ids = [r.id for r in store.list_runs(limit=runs)]
        requests = _with_samples(store, run_ids, Path(tmp))
        from scipy import stats  # noqa: F401 - imported by the server at start (scripts/serve_app.py)

        first = _comparison(store, run_ids)
        kept = _comparison(store, run_ids)
        points = len(store.points_for_comparison(run_ids))
    print(f"compare with per-request samples: {runs} runs × 20 points, {requests:,} requests "
          f"(10 per unit of concurrency, at most 2,000 a point)", flush=True)
    for label, (seconds, read) in (("first (none kept)", first), ("kept", kept)):
        print(f"  {label:<18} {seconds:6.2f} s  (samples files read: {read} of {points})", flush=True)
