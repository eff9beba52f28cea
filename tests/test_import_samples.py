"""An import whose records carry ``--output-details`` arrays gets per-request samples and
intervals exactly as a measured point does (db/store.py ``import_runs``): a Parquet file
beside the database, listed in request_samples, its intervals kept beside it; the
comparison then has a noise estimate for the imported point.  A record without arrays
gets none (judged only across repeats)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from bench import interval_coverage as coverage
from db import Store
from db.bootstrap_memo import memo_path, read_memo
from db.imported_runs import import_file
from domain.importer.conditions import ImportConditions
from domain.results.analysis import summarise_points
from domain.results.frames import points_frame
from tests.support.actors import operator

OUTPUT_LEN = 32


def _record(requests: int, details: bool) -> dict[str, Any]:
    """One bench_serving 0.5.23 record (its keys, as the client writes them) of closed-loop
    synthetic requests; with ``--output-details`` arrays when ``details``."""
    point = coverage.closed_loop_points(np.random.default_rng(4), requests, 0.6)[0]
    ttft, tpot = point["ttft_ms"].to_numpy(), point["tpot_ms"].to_numpy()
    e2e = ttft + tpot * (OUTPUT_LEN - 1)
    duration = float(e2e.sum()) / 1000 / 8  # eight in flight
    record: dict[str, Any] = {
        "tag": None, "backend": "sglang", "protocol": "http", "dataset_name": "random-ids", "request_rate": "inf",
        "max_concurrency": 8, "random_input_len": 512, "random_output_len": OUTPUT_LEN, "random_range_ratio": 1.0,
        "server_info": None, "duration": duration, "completed": requests, "total_input_tokens": 512 * requests,
        "total_output_tokens": OUTPUT_LEN * requests, "request_throughput": requests / duration,
        "input_throughput": 512 * requests / duration, "output_throughput": OUTPUT_LEN * requests / duration,
        "total_throughput": (512 + OUTPUT_LEN) * requests / duration, "concurrency": float(e2e.sum()) / 1000 / duration,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2e_latency", e2e)):
        record.update({f"mean_{name}_ms": float(values.mean()), f"median_{name}_ms": float(np.median(values)),
                       f"std_{name}_ms": float(values.std()), **{f"p{q}_{name}_ms": float(np.percentile(values, q))
                                                                 for q in (90, 95, 99)}})
    if details:
        record.update({"input_lens": [512] * requests, "output_lens": [OUTPUT_LEN] * requests,
                       "ttfts": (ttft / 1000).tolist(), "itls": [[v / 1000] * (OUTPUT_LEN - 1) for v in tpot],
                       "generated_texts": [""] * requests, "errors": [""] * requests})
    return record


def _import(store: Store, tmp_path: Path, details: bool) -> int:
    source = tmp_path / f"bench-{details}.jsonl"
    source.write_text(json.dumps(_record(600, details)) + "\n", encoding="utf-8")
    [run_id] = import_file(store, source, ImportConditions(), actor=operator("t")).run_ids
    return int(run_id)


def _summary(store: Store, run_id: int) -> tuple[dict[int, object], dict[str, object]]:
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    samples = store.request_samples([int(p) for p in frame["point_id"]])
    return samples, summarise_points(frame, requests=samples).iloc[0].to_dict()


def test_an_import_with_per_request_arrays_is_resampled_and_its_intervals_kept(store: Store, tmp_path: Path) -> None:
    samples, summary = _summary(store, _import(store, tmp_path, details=True))
    [frame] = samples.values()
    assert len(frame) == 600
    [parquet] = list((store.db_path.parent / "imports").rglob("*.parquet"))
    assert memo_path(parquet).is_file() and read_memo(parquet)  # computed at import, not in the page
    assert summary["ttft_p50_ci_source"] == "bootstrap" and summary["ttft_p50_ci"] > 0


def test_an_import_without_arrays_has_no_per_request_data(store: Store, tmp_path: Path) -> None:
    samples, summary = _summary(store, _import(store, tmp_path, details=False))
    assert samples == {}
    assert summary["ttft_p50_ci_source"] is None and math.isnan(summary["ttft_p50_ci"])
