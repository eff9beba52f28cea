"""The compare and checklist reads at scale: a DuckDB file of 10,000 runs × 20 points
(synthetic, generated in DuckDB), then p50/p95 of the queries the pages make, each as the
app does it (locked open, query, close), and the compare page's render time (AppTest).

``python -m bench compare_queries`` (``--quick``: 1,000 runs)."""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.synthetic import fill
from db import Store
from db.rows import ComparisonPointRow
from domain.compare.comparison import build_comparison
from domain.results.frames import points_frame

REPEATS = 40


def _timed(fn: Callable[[], object], repeats: int = REPEATS) -> tuple[float, float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[94]


def _render_compare(db: Path, ids: list[int]) -> float:
    from streamlit.testing.v1 import AppTest

    os.environ["BENCHDECK_DB"] = str(db)
    from domain.core.settings import get_settings

    get_settings.cache_clear()
    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "app.py"), default_timeout=120)
    at.query_params["baseline"] = str(ids[0])
    at.query_params["runs"] = ",".join(map(str, ids[1:]))
    at.run()
    start = time.perf_counter()
    at.switch_page("pages/compare.py").run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def run(quick: bool = False) -> None:
    runs = 1_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "scale.duckdb"
        store = Store(db, lock_timeout_s=60)
        start = time.perf_counter()
        fill(store, runs=runs, points_per_run=20)
        print(f"built {runs:,} runs × 20 points (+5 telemetry summaries per point) in "
              f"{time.perf_counter() - start:.1f} s; file {db.stat().st_size / 1e6:.0f} MB")
        rng = random.Random(7)
        pick = lambda: [rng.randrange(1, runs + 1) for _ in range(3)]  # noqa: E731
        p50, p95 = _timed(lambda: store.points_for_comparison(pick()))
        print(f"  compare/checklist points query (3 runs): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        p50, p95 = _timed(lambda: build_comparison(
            points_frame(map(ComparisonPointRow.as_dict, store.points_for_comparison(ids := pick()))),
            ids[0], ids[1:], "en"), repeats=10)
        print(f"  query + frame + full analysis (3 runs): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        p50, p95 = _timed(lambda: store.runs_for_picker())
        print(f"  run picker (200 newest finished, and how many): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        p50, p95 = _timed(lambda: store.list_runs(200))
        print(f"  runs page list (200 newest, with progress): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        render = [_render_compare(db, pick()) for _ in range(3)]
        print(f"  compare page render (AppTest, 3 runs, charts included): median {statistics.median(render):.2f} s")
