"""Per-request samples per point: what the runner keeps of every measured request, how the
Store reads it back, and repeats on fresh launches.

The end-to-end tests run the real runner daemon, the emulator and the real bench_serving
client of the pinned SGLang release (.venv-sglang), as tests/test_runner_e2e.py does; the
per-request means and medians are checked against the same point's bench_serving record,
which computes them from the same requests (numpy mean / median, seconds x 1000)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from db import RunnerCapabilities, Store
from db.rows import PointRow
from domain.results.requests import REQUEST_COLUMNS
from runner.attempt import sweep_order
from runner.bench_client import (
    DETAIL_KEYS,
    MeasuredRequest,
    request_table,
    requests_from_details,
    without_details,
    write_request_samples,
)
from tests.support.actors import operator
from tests.support.attempts import benchmarking_attempt
from tests.support.runner_harness import MARK, assert_nothing_left, audit_rows, run_burst, runner_env, small_plan

CAPS = RunnerCapabilities("r1", "H200", 8, None)
TINY = {"name": "tiny", "input_len": 32, "output_len": 16}


# --- converting the client's requests ----------------------------------------------------------


def test_request_table_uses_bench_servings_definitions() -> None:
    requests = [
        MeasuredRequest(True, 32, 16, ttft_s=0.020, e2e_s=0.170, itl_s=[0.01] * 15, start=100.5),
        MeasuredRequest(True, 32, 1, ttft_s=0.030, e2e_s=0.030, itl_s=[], start=100.0),
        MeasuredRequest(False, 32, 0, ttft_s=0.0, e2e_s=0.0, itl_s=[], start=100.25),
    ]
    table = request_table(requests).to_pandas()
    assert tuple(table.columns) == REQUEST_COLUMNS
    assert table.request_idx.tolist() == [0, 1, 2]
    assert table.ttft_ms[0] == pytest.approx(20.0) and table.e2e_ms[0] == pytest.approx(170.0)
    assert table.tpot_ms[0] == pytest.approx((170.0 - 20.0) / 15)  # (latency - ttft) / (output_len - 1)
    assert math.isnan(table.tpot_ms[1])  # one output token: no TPOT, as bench_serving leaves it out
    # A failed request's latencies are not measurements: NaN, never the client's zeros.
    assert math.isnan(table.ttft_ms[2]) and math.isnan(table.e2e_ms[2]) and not table.success[2]
    assert table.start_s.tolist() == pytest.approx([0.5, 0.0, 0.25])  # after the earliest start
    assert list(table.itl_ms[0]) == pytest.approx([10.0] * 15)


def test_details_arrays_become_requests_and_leave_the_stored_record() -> None:
    record = {"completed": 2, "mean_ttft_ms": 25.0, "input_lens": [32, 32, 32], "output_lens": [3, 2, 0],
              "ttfts": [0.02, 0.03, 0.0], "itls": [[0.01, 0.02], [0.01], []],
              "generated_texts": ["a b c", "a b", ""], "errors": ["", "", "timeout"]}
    requests = requests_from_details(record)
    assert requests is not None
    table = request_table(requests).to_pandas()
    assert table.success.tolist() == [True, True, False]
    assert table.e2e_ms[:2].tolist() == pytest.approx([50.0, 40.0])  # ttft + the sum of the gaps
    assert table.tpot_ms[0] == pytest.approx(15.0) and table.start_s.isna().all()  # no start times given
    stored = without_details(record)
    assert stored == {"completed": 2, "mean_ttft_ms": 25.0} and not set(DETAIL_KEYS) & set(stored)
    assert requests_from_details({"completed": 2}) is None  # written without --output-details


def test_fresh_launch_orders_the_sweep_repeat_major() -> None:
    plan = small_plan(benchmark={"scenarios": [TINY], "concurrency": [1, 4], "repeats": 2,
                                 "fresh_launch_per_repeat": True})
    assert [p.key for p in sweep_order(plan.benchmark, plan.points())] == [
        "tiny/c1/r0", "tiny/c4/r0", "tiny/c1/r1", "tiny/c4/r1"]
    same_launch = plan.benchmark.model_copy(update={"fresh_launch_per_repeat": False})
    assert sweep_order(same_launch, plan.points()) == plan.points()  # the plan's own order


# --- the Store ---------------------------------------------------------------------------------


def _point_with_samples(store: Store, path: Path | None) -> int:
    claim = benchmarking_attempt(store)
    now = datetime(2026, 1, 1)
    samples = None if path is None else {"path": str(path), "requests": 2}
    point_id = store.insert_point(
        claim.attempt_id, "r1", scenario="short", concurrency=1, repeat_idx=0, conditions={}, started_at=now,
        finished_at=now, metrics={"completed": 2}, raw_record={}, telemetry=[], request_samples=samples)
    assert point_id is not None
    return point_id


def test_store_reads_a_points_samples_and_skips_a_missing_or_broken_file(store: Store, tmp_path: Path) -> None:
    assert "request_samples" in store.table_names()
    kept = tmp_path / "kept.parquet"
    write_request_samples([MeasuredRequest(True, 8, 4, 0.01, 0.04, [0.01] * 3, 1.0),
                           MeasuredRequest(True, 8, 4, 0.02, 0.05, [0.01] * 3, 1.1)], kept)
    gone, broken = tmp_path / "gone.parquet", tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    ids = {name: _point_with_samples(store, path)
           for name, path in (("kept", kept), ("gone", gone), ("broken", broken), ("none", None))}
    frames = store.request_samples([*ids.values(), 999_999])
    assert list(frames) == [ids["kept"]]  # the others are absent: no file, no error
    frame = frames[ids["kept"]]
    assert isinstance(frame, pd.DataFrame) and tuple(frame.columns) == REQUEST_COLUMNS
    assert frame.ttft_ms.tolist() == pytest.approx([10.0, 20.0])
    assert store.request_samples([]) == {}


# --- end to end on the emulator ----------------------------------------------------------------


def _assert_samples_match_the_record(point: PointRow, frame: pd.DataFrame, *, e2e_rel: float = 1e-9) -> None:
    """The record's own statistics from the per-request rows (bench_serving: numpy mean /
    median over the successful requests, seconds x 1000; TPOT only where output_len > 1)."""
    ok = frame[frame.success]
    assert len(frame) == point.requested and len(ok) == point.completed
    assert ok.ttft_ms.mean() == pytest.approx(point.ttft_mean_ms, rel=1e-9)
    assert ok.e2e_ms.median() == pytest.approx(point.e2e_median_ms, rel=e2e_rel)
    assert ok.tpot_ms.mean() == pytest.approx(point.tpot_mean_ms, rel=max(e2e_rel, 1e-9))
    assert float(np.mean(np.concatenate(ok.itl_ms.to_list()))) == pytest.approx(point.itl_mean_ms, rel=1e-9)
    assert "ttfts" not in json.loads(point.raw_record or "{}")  # the arrays live in the Parquet file only


def _assert_no_method_artifact(store: Store, run_id: int, points: list[PointRow],
                                dict_frames: dict[int, pd.DataFrame]) -> None:
    """A steady emulator run earns no method badge (domain/results/method_badges.py); the
    ramp statistic is evaluated where the point has requests enough (c=4: 16 requests, four
    waves; the throughput trend needs 16 between the first and the last wave)."""
    from domain.results.frames import points_frame
    from domain.results.method_badges import method_badges, ramp_of, trend_of

    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    assert method_badges(frame, dict_frames).empty, method_badges(frame, dict_frames)
    [c4] = [p for p in points if p.concurrency == 4]
    ramp, trend = ramp_of(dict_frames[c4.id], 4), trend_of(dict_frames[c4.id], 4)
    print(f"\nsteady emulator run, c=4: {ramp.detail() if ramp else None}; {trend.detail() if trend else None}")
    assert ramp is not None and not ramp.fires
    assert trend is None  # eight requests between the first and the last wave: too few to tell


@pytest.mark.sglang
@pytest.mark.slow
def test_a_sweep_keeps_every_measured_request_per_point(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [TINY], "concurrency": [1, 4], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded"
    points = store.points_of(run_id)
    frames = store.request_samples([p.id for p in points])
    assert sorted(frames) == sorted(p.id for p in points)
    for point in points:
        frame = frames[point.id]
        _assert_samples_match_the_record(point, frame)
        # Warmup requests (1x concurrency) are not among them; starts are after the first measured one.
        assert frame.start_s.min() == 0.0 and frame.start_s.notna().all()
        assert (frame.output_len == TINY["output_len"]).all() and (frame.itl_ms.map(len) == 15).all()
    _assert_no_method_artifact(store, run_id, points, frames)
    attempt_dir = Path(renv["BENCHDECK_WORK_DIR"]) / f"attempt-{store.attempts_of(run_id)[0].id}"
    first = points[0].id
    (attempt_dir / "requests" / "tiny_c1_r0.parquet").unlink()
    assert first not in store.request_samples([p.id for p in points])  # gone: absent, not an error
    assert_nothing_left(renv[MARK])


@pytest.mark.sglang
@pytest.mark.slow
def test_one_process_per_point_keeps_requests_from_output_details(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [TINY], "concurrency": [2], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_BENCH_MODE="per-point")
    assert run_burst(renv) == 0
    [point] = store.points_of(run_id)
    assert json.loads(store.attempts_of(run_id)[0].bench_client)["mode"] == "one-process-per-point"
    frame = store.request_samples([point.id])[point.id]
    # The arrays have no latency: e2e is ttft + the inter-token gaps, which ends at the last
    # token rather than at the end of the stream (a few ms short of the client's latency).
    _assert_samples_match_the_record(point, frame, e2e_rel=0.05)
    assert frame.start_s.isna().all()  # the arrays carry no start times
    assert_nothing_left(renv[MARK])


@pytest.mark.sglang
@pytest.mark.slow
def test_a_fresh_launch_per_repeat(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(benchmark={"scenarios": [TINY], "concurrency": [1, 4], "num_prompts": "2x", "warmup": "1x",
                                 "repeats": 2, "fresh_launch_per_repeat": True})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded"
    [attempt] = store.attempts_of(run_id)
    launches = [row["details"] for row in audit_rows(store, "launch") if row["run_id"] == run_id]
    assert [d["launch_idx"] for d in launches] == [0, 1]
    facts = json.loads(attempt.startup_facts)
    assert [f["launch_idx"] for f in facts["launches"]] == [0, 1]
    assert all(f["max_total_num_tokens"] > 0 for f in facts["launches"])  # each launch's own facts
    attempt_dir = Path(renv["BENCHDECK_WORK_DIR"]) / f"attempt-{attempt.id}"
    assert (attempt_dir / "server.log").is_file() and (attempt_dir / "launch-1" / "server.log").is_file()
    points = sorted(store.points_of(run_id), key=lambda p: p.started_at or datetime.min)
    conditions = [json.loads(p.conditions) for p in points]
    # Repeat-major: both points of repeat 0 on launch 0, then both of repeat 1 on launch 1.
    assert [(p.repeat_idx, c["launch_idx"], c["seed"]) for p, c in zip(points, conditions, strict=True)] == [
        (0, 0, 42), (0, 0, 42), (1, 1, 43), (1, 1, 43)]
    assert len(store.request_samples([p.id for p in points])) == 4
    assert_nothing_left(renv[MARK])
