"""Samples read only when the analysis asks for them (db/sample_files.py,
domain/results/analysis.py ``_sampled_point``): a point measured once whose intervals are
kept and whose record holds every latency statistic is summarised without reading its
samples, to exactly the numbers its samples give; a point whose record lacks one, or whose
intervals are not kept, is read; a listed file that is gone is absent; a file replaced after
its intervals were read is not used.  Real Parquet files as the runner writes them, a real
DuckDB store, the compare page's own comparison."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import db.sample_files
from db import Store
from db.bootstrap_memo import keep_memos, memo_path, read_samples
from db.sample_files import SampleFiles
from domain.results import analysis
from domain.results import requests as req
from domain.results.frames import points_frame
from runner.bench_client import write_request_samples
from tests.support.attempts import benchmarking_attempt
from tests.test_bootstrap_memo import measured, no_resampling

COLUMN_OF = {m.name: m.column for m in analysis.METRICS if m.latency}


def record_of(path: Path, *, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The stored statistics a client reports for these requests (every latency statistic,
    as bench_serving 0.5.9 and later write them), less the columns ``without`` names."""
    samples = read_samples(path)
    statistics = req.request_statistics(samples)
    record = {COLUMN_OF[name]: statistics[name] for name in COLUMN_OF}
    record.update(completed=req.request_count(samples), duration_s=6.0, output_throughput=640.0)
    return {column: value for column, value in record.items() if column not in without}


def sampled_run(store: Store, tmp_path: Path, seed: int, *, without: tuple[str, ...] = ()) -> int:
    claim = benchmarking_attempt(store)
    now = datetime(2026, 1, 1)
    for concurrency in (1, 2):
        path = tmp_path / f"point-{seed}-{concurrency}.parquet"
        write_request_samples(measured(seed * 10 + concurrency), path)
        store.insert_point(claim.attempt_id, "r1", scenario="short", concurrency=concurrency, repeat_idx=0,
                           conditions={}, started_at=now, finished_at=now, metrics=record_of(path, without=without),
                           raw_record={}, telemetry=[], request_samples={"path": str(path), "requests": 120})
    return claim.run_id


def points_of(store: Store, run_ids: list[int]) -> pd.DataFrame:
    return points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))


def summarised_from_read_samples(store: Store, frame: pd.DataFrame) -> pd.DataFrame:
    """The summary from every point's samples read, its intervals then kept beside them."""
    samples = store.request_samples([int(p) for p in frame["point_id"]])
    memos: dict[int, req.BootstrapMemo] = {}
    summary = analysis.summarise_points(frame, requests=samples, bootstrap_memos=memos)
    assert keep_memos(samples, memos) == len(samples)
    return summary


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    read: list[Path] = []

    def reading(path: Path) -> pd.DataFrame:
        read.append(path)
        return read_samples(path)

    monkeypatch.setattr(db.sample_files, "read_samples", reading)
    return read


@pytest.fixture
def store(app_env: Path) -> Store:
    store = Store(app_env, lock_timeout_s=10)
    store.migrate()
    return store


def test_points_with_kept_intervals_are_summarised_without_their_samples_to_the_same_numbers(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = points_of(store, [sampled_run(store, tmp_path, 1), sampled_run(store, tmp_path, 2)])
    expected = summarised_from_read_samples(store, frame)
    assert (expected["ttft_p99_ci_source"] == "bootstrap").all() and (expected["ttft_p99_n"] == 120).all()
    read = counted_reads(monkeypatch)
    no_resampling(monkeypatch)
    files = store.sample_files([int(p) for p in frame["point_id"]])
    summary = analysis.summarise_points(frame, requests=files, bootstrap_memos=files.memos())
    assert read == [] and files.read() == {}
    pd.testing.assert_frame_equal(summary, expected, check_exact=True)


def test_a_record_without_a_latency_statistic_reads_its_samples_for_it(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_serving before 0.5.9 wrote no p90: that statistic comes from the samples."""
    frame = points_of(store, [sampled_run(store, tmp_path, 3, without=("ttft_p90_ms",))])
    expected = summarised_from_read_samples(store, frame)
    assert expected["ttft_p90"].notna().all()
    read = counted_reads(monkeypatch)
    files = store.sample_files([int(p) for p in frame["point_id"]])
    summary = analysis.summarise_points(frame, requests=files, bootstrap_memos=files.memos())
    assert len(read) == 2  # both points, once each
    pd.testing.assert_frame_equal(summary, expected, check_exact=True)


def test_points_without_kept_intervals_are_read_and_resampled_as_before(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = points_of(store, [sampled_run(store, tmp_path, 4)])
    samples = store.request_samples([int(p) for p in frame["point_id"]])
    expected = analysis.summarise_points(frame, requests=samples)
    read = counted_reads(monkeypatch)
    files = store.sample_files([int(p) for p in frame["point_id"]])
    memos = files.memos()
    summary = analysis.summarise_points(frame, requests=files, bootstrap_memos=memos)
    assert len(read) == 2 and all(len(memo) == 1 for memo in memos.values())  # computed, to be kept
    pd.testing.assert_frame_equal(summary, expected, check_exact=True)


def test_a_listed_file_that_is_gone_is_absent(store: Store, tmp_path: Path) -> None:
    frame = points_of(store, [sampled_run(store, tmp_path, 5)])
    point_ids = [int(p) for p in frame["point_id"]]
    gone = Path(store.request_samples(point_ids[:1])[point_ids[0]].attrs["samples_file"]["path"])
    gone.unlink()
    files = store.sample_files(point_ids)
    assert point_ids[0] in files and files.get(point_ids[0]) is None
    with pytest.raises(KeyError):
        files[point_ids[0]]
    assert set(store.request_samples(point_ids)) == {point_ids[1]}
    summary = analysis.summarise_points(frame, requests=files, bootstrap_memos=files.memos())
    pd.testing.assert_frame_equal(summary, analysis.summarise_points(frame, requests=store.request_samples(point_ids)),
                                  check_exact=True)
    assert list(summary["ttft_p99_ci_source"]) == [None, "bootstrap"]


def test_a_file_replaced_after_its_intervals_were_read_is_not_used(store: Store, tmp_path: Path) -> None:
    frame = points_of(store, [sampled_run(store, tmp_path, 6)])
    point_ids = [int(p) for p in frame["point_id"]]
    summarised_from_read_samples(store, frame)
    files = store.sample_files(point_ids)
    memos = files.memos()
    assert all(memos.values())
    path = Path(store.request_samples(point_ids[:1])[point_ids[0]].attrs["samples_file"]["path"])
    write_request_samples(measured(99, n=300), path)  # another point's requests at the same path
    assert memo_path(path).is_file()  # kept for the old requests, so not read for these
    assert files.get(point_ids[0]) is None
    assert files.get(point_ids[1]) is not None
    assert SampleFiles({point_ids[0]: path}).get(point_ids[0]) is not None  # read afresh, it is used


def test_the_compare_page_builds_a_kept_comparison_without_reading_samples(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's comparison (``selection._cached_comparison``) keeps every point's intervals;
    with Streamlit's caches emptied, as in a new server process, it is built again without
    reading a samples file or resampling, to the same numbers."""
    import streamlit as st

    from pages.parts import selection

    baseline, other = sampled_run(store, tmp_path, 7), sampled_run(store, tmp_path, 8)
    frame = points_of(store, [baseline, other])
    first = selection._cached_comparison(frame, baseline, (other,), "en", (), False)
    assert (first.summary["ttft_p99_ci_source"] == "bootstrap").all()
    st.cache_resource.clear()
    st.cache_data.clear()
    read = counted_reads(monkeypatch)
    no_resampling(monkeypatch)
    again = selection._cached_comparison(frame, baseline, (other,), "en", (), False)
    assert again is not first and read == []
    pd.testing.assert_frame_equal(again.summary, first.summary, check_exact=True)
    pd.testing.assert_frame_equal(again.compare, first.compare, check_exact=True)
