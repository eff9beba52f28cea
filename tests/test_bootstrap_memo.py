"""A point's bootstrap intervals computed once and kept beside its samples
(domain/results/requests.py ``memo``, db/bootstrap_memo.py, pages/parts/selection.py):
a kept interval is exactly the one resampling gives, it is read instead of resampling (in a
new process too, from the file), and a file that no longer describes the samples, a broken
one or a directory that cannot be written changes nothing shown."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from db import Store
from db.bootstrap_memo import SAMPLES_FILE, keep_memos, memo_path, memos_for, read_memo, read_samples, write_memo
from domain.results import analysis
from domain.results import requests as req
from domain.results.frames import points_frame
from runner.bench_client import MeasuredRequest, write_request_samples
from tests.support.attempts import benchmarking_attempt

NAMES = [m.name for m in analysis.METRICS if m.from_requests]


def measured(seed: int, n: int = 120) -> list[MeasuredRequest]:
    rng = np.random.default_rng(seed)
    return [MeasuredRequest(True, 256, 32, float(rng.lognormal(-3.0, 0.4)), float(rng.lognormal(-0.5, 0.2)),
                            [float(v) for v in rng.lognormal(-4.0, 0.3, 31)], float(i) * 0.05) for i in range(n)]


def sample_file(tmp_path: Path, seed: int) -> Path:
    path = tmp_path / f"point-{seed}.parquet"
    write_request_samples(measured(seed), path)
    return path


def no_resampling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> dict[str, req.Interval]:
        raise AssertionError("resampled although the intervals were kept")

    monkeypatch.setattr(req, "_bootstrap_intervals", refuse)


def test_a_kept_interval_is_the_one_resampling_gives_and_is_read_instead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = read_samples(sample_file(tmp_path, 1))
    memo: req.BootstrapMemo = {}
    computed = req.bootstrap_intervals(samples, 6.0, names=NAMES, memo=memo)
    assert computed == req.bootstrap_intervals(samples, 6.0, names=NAMES)  # the memo changes nothing computed
    assert list(memo) == [req.bootstrap_key(6.0, NAMES)]
    through_json = json.loads(json.dumps(memo))  # as the file keeps it
    no_resampling(monkeypatch)
    assert req.bootstrap_intervals(samples, 6.0, names=NAMES, memo=through_json) == computed  # exactly


@pytest.mark.parametrize("change", [{"duration_s": 7.0}, {"names": NAMES[:3]}, {"seed": 1}, {"n_resamples": 500}])
def test_another_duration_statistic_or_resampling_is_another_key(change: dict[str, object]) -> None:
    base = {"duration_s": 6.0, "names": NAMES, "n_resamples": req.N_RESAMPLES, "seed": req.BOOTSTRAP_SEED}
    assert req.bootstrap_key(**{**base, **change}) != req.bootstrap_key(**base)


def test_the_file_keeps_the_intervals_and_is_ignored_once_the_samples_change(tmp_path: Path) -> None:
    path = sample_file(tmp_path, 2)
    memo: req.BootstrapMemo = {}
    req.bootstrap_intervals(read_samples(path), 6.0, names=NAMES, memo=memo)
    assert write_memo(path, memo)
    assert read_memo(path) == memo
    assert not write_memo(path, memo)  # nothing new: not written again
    write_request_samples(measured(3, n=300), path)  # another point's requests at the same path
    assert read_memo(path) == {}


def test_intervals_of_samples_replaced_since_they_were_read_are_neither_kept_nor_read(tmp_path: Path) -> None:
    """Samples held by a server (its cache) while their file is replaced: what it computes
    from the old requests is not kept for the new file, and what is kept for the new file is
    not used for the old requests."""
    path = sample_file(tmp_path, 6)
    held = {1: read_samples(path)}
    write_request_samples(measured(7, n=300), path)
    memos = memos_for(held)
    req.bootstrap_intervals(held[1], 6.0, names=NAMES, memo=memos[1])
    assert keep_memos(held, memos) == 0 and not memo_path(path).exists()
    fresh: req.BootstrapMemo = {}
    req.bootstrap_intervals(read_samples(path), 6.0, names=NAMES, memo=fresh)
    assert write_memo(path, fresh)
    assert memos_for(held) == {1: {}}  # the new file's intervals: not the held requests'
    assert memos_for({1: read_samples(path)}) == {1: fresh}


@pytest.mark.parametrize("text", ["not json", "[]", '{"samples": 1}', "BAD_ENTRY", "INFINITE_COUNT", "HUGE_COUNT"])
def test_a_broken_file_counts_as_none(tmp_path: Path, text: str) -> None:
    path = sample_file(tmp_path, 4)
    entry = {"BAD_ENTRY": '[1.0, "low", 2.0, 3]', "INFINITE_COUNT": "[1.0, 0.5, 2.0, Infinity]",
             "HUGE_COUNT": f"[1.0, 0.5, 2.0, 1{'0' * 400}]"}.get(text)
    if entry is not None:  # the samples' own identity, with an entry that is not an interval
        stat = path.stat()
        samples = json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
        text = f'{{"samples": {samples}, "intervals": {{"k": {{"ttft_p50": {entry}}}}}}}'
    memo_path(path).write_text(text, encoding="utf-8")
    assert read_memo(path) == {}


def test_a_file_that_cannot_be_written_keeps_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """A place the file cannot take (here a directory of its name; elsewhere a read-only
    work directory): nothing kept, no temporary file left, and the samples read as before."""
    path = sample_file(tmp_path, 5)
    memo: req.BootstrapMemo = {}
    req.bootstrap_intervals(read_samples(path), 6.0, names=NAMES, memo=memo)
    memo_path(path).mkdir()
    assert not write_memo(path, memo)
    assert read_memo(path) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, memo_path(path).name])


def _sampled_run(store: Store, tmp_path: Path, seed: int) -> int:
    claim = benchmarking_attempt(store)
    now = datetime(2026, 1, 1)
    for concurrency in (1, 2):
        path = sample_file(tmp_path, seed * 10 + concurrency)
        store.insert_point(
            claim.attempt_id, "r1", scenario="short", concurrency=concurrency, repeat_idx=0, conditions={},
            started_at=now, finished_at=now, metrics={"completed": 120, "duration_s": 6.0,
                                                      "output_throughput": 640.0 * concurrency},
            raw_record={}, telemetry=[], request_samples={"path": str(path), "requests": 120})
    return claim.run_id


def test_the_compare_page_keeps_the_intervals_and_a_new_process_reads_them(
        app_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's comparison (``selection._cached_comparison``) writes each point's file;
    with Streamlit's caches emptied, as in a new server process, the same
    comparison is built from the files without resampling, to the same numbers."""
    import streamlit as st

    from pages.parts import selection

    store = Store(app_env, lock_timeout_s=10)
    store.migrate()
    baseline, other = _sampled_run(store, tmp_path, 1), _sampled_run(store, tmp_path, 2)
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([baseline, other]))
    first = selection._cached_comparison(frame, baseline, (other,), "en", (), False)
    point_ids = [int(p) for p in frame["point_id"]]
    files = [Path(f.attrs[SAMPLES_FILE]["path"]) for f in store.request_samples(point_ids).values()]
    assert len(files) == 4 and all(memo_path(path).is_file() for path in files)
    assert (first.summary["ttft_p99_ci_source"] == "bootstrap").any()
    st.cache_resource.clear()
    st.cache_data.clear()
    no_resampling(monkeypatch)
    again = selection._cached_comparison(frame, baseline, (other,), "en", (), False)
    assert again is not first
    pd.testing.assert_frame_equal(again.summary, first.summary, check_exact=True)
    pd.testing.assert_frame_equal(again.compare, first.compare, check_exact=True)
