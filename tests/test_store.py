"""The store against a real DuckDB file: queue, claim, guarded moves, fencing, cancel."""

from __future__ import annotations

import time
from dataclasses import fields
from datetime import date, datetime

import pytest

from db import IllegalMove, LostRace, RunnerCapabilities, Store
from db.connection import transaction
from db.rows import (
    AttemptRow,
    AuditRow,
    ComparisonPointRow,
    PickerRunRow,
    PointRow,
    RunnerRow,
    RunProgressRow,
    RunRow,
    SchemaVersionRow,
    TelemetryRow,
)
from db.store import PickerFilters
from domain.core.states import AttemptStatus, FailureKind, RunStatus
from domain.results.bench_record import METRIC_COLUMNS
from tests.plans import minimal_plan
from tests.support.actors import admin, operator

CAPS = RunnerCapabilities("r1", "H200", 8, None)


def _claimed(store: Store):
    store.submit_run(minimal_plan(), submitted_by=operator("alice"))
    claim = store.claim_next(CAPS, lease_s=60)
    assert claim is not None
    return claim


def test_migrations_are_recorded_once(store: Store) -> None:
    assert store.migrate() == []  # the fixture applied them all already
    assert {"runs", "attempts", "sweep_points", "telemetry_summaries", "runners", "audit_log",
            "configurations", "schema_migrations"} <= set(store.table_names())


def test_submit_is_idempotent_per_key(store: Store) -> None:
    first = store.submit_run(minimal_plan(), submitted_by=operator("alice"), idempotency_key="k")
    second = store.submit_run(minimal_plan(), submitted_by=operator("alice"), idempotency_key="k")
    assert first == (1, True)
    assert second == (1, False)
    assert len(store.list_runs()) == 1
    assert [e.action for e in store.audit_entries(reader=admin())] == ["submit"]


def test_claim_moves_run_and_creates_attempt(store: Store) -> None:
    claim = _claimed(store)
    assert store.get_run(claim.run_id).status == "running"
    [attempt] = store.attempts_of(claim.run_id)
    assert attempt.status == "claimed" and attempt.runner_id == "r1" and attempt.attempt_no == 1
    assert store.claim_next(CAPS, lease_s=60) is None


def test_claim_skips_runs_this_runner_cannot_serve(store: Store) -> None:
    store.submit_run(minimal_plan(gpu={"type": "H100", "count": 1}), submitted_by=operator("a"))
    store.submit_run(minimal_plan(gpu={"type": "H200", "count": 16}), submitted_by=operator("a"))
    store.submit_run(minimal_plan(engine="sglang"), submitted_by=operator("a"))
    assert store.claim_next(CAPS, lease_s=60) is None  # no SGLang here, wrong type, too many GPUs
    with_sglang = RunnerCapabilities("r2", "H200", 8, "0.5.23")
    claim = store.claim_next(with_sglang, lease_s=60)
    assert claim is not None and claim.plan.engine == "sglang"


def test_priority_then_age_orders_the_queue(store: Store) -> None:
    low, _ = store.submit_run(minimal_plan(name="low"), submitted_by=operator("a"))
    high, _ = store.submit_run(minimal_plan(name="high", priority=5), submitted_by=operator("a"))
    assert store.claim_next(CAPS, lease_s=60).run_id == high
    assert store.claim_next(CAPS, lease_s=60).run_id == low


def test_full_successful_lifecycle(store: Store) -> None:
    claim = _claimed(store)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    status = store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    assert status is RunStatus.SUCCEEDED
    assert store.get_run(claim.run_id).finished_at is not None


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (AttemptStatus.CLAIMED, AttemptStatus.BENCHMARKING),  # skips starting
        (AttemptStatus.STARTING, AttemptStatus.CLAIMED),  # backwards
    ],
)
def test_illegal_attempt_moves_are_refused_before_sql(store: Store, current, new) -> None:
    claim = _claimed(store)
    with pytest.raises(IllegalMove):
        store.move_attempt(claim.attempt_id, "r1", current, new)
    assert store.attempts_of(claim.run_id)[0].status == "claimed"


def test_illegal_run_moves_are_refused(store: Store) -> None:
    run_id, _ = store.submit_run(minimal_plan(), submitted_by=operator("a"))
    with pytest.raises(IllegalMove):
        store.move_run(run_id, RunStatus.QUEUED, RunStatus.SUCCEEDED)
    with pytest.raises(IllegalMove):
        store.move_run(run_id, RunStatus.SUCCEEDED, RunStatus.QUEUED)


def test_guarded_move_from_wrong_state_is_a_lost_race(store: Store) -> None:
    claim = _claimed(store)
    with pytest.raises(LostRace):
        # legal move, but the attempt is 'claimed', not 'starting'
        store.move_attempt(claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    with pytest.raises(LostRace):
        # right state, wrong runner: another runner cannot move my attempt
        store.move_attempt(claim.attempt_id, "other", AttemptStatus.CLAIMED, AttemptStatus.STARTING)


def test_an_attempt_cancelled_by_a_stopping_runner_does_not_use_up_the_retries(store: Store) -> None:
    claim = _claimed(store)
    status = store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.CANCELLED,
                                  message="runner stopped", max_attempts=1, requeue_on_cancel=True)
    assert status is RunStatus.QUEUED
    second = store.claim_next(CAPS, lease_s=60)
    assert second.attempt_no == 2
    status = store.finish_attempt(second.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.FAILED,
                                  failure_kind=FailureKind.SERVER_CRASH, retry_allowed=True, max_attempts=2)
    assert status is RunStatus.QUEUED  # one failed attempt of two: the cancelled one is not counted


def test_retryable_failure_requeues_until_attempts_run_out(store: Store) -> None:
    claim = _claimed(store)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    status = store.finish_attempt(
        claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.FAILED,
        failure_kind=FailureKind.SERVER_CRASH, message="crashed", retry_allowed=True, max_attempts=2,
    )
    assert status is RunStatus.QUEUED
    second = store.claim_next(CAPS, lease_s=60)
    assert second.run_id == claim.run_id and second.attempt_no == 2
    status = store.finish_attempt(
        second.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.FAILED,
        failure_kind=FailureKind.SERVER_CRASH, retry_allowed=True, max_attempts=2,
    )
    assert status is RunStatus.FAILED


def test_expired_lease_fails_attempt_as_runner_lost_and_fences_late_writes(store: Store) -> None:
    store.submit_run(minimal_plan(), submitted_by=operator("a"))
    claim = store.claim_next(CAPS, lease_s=0.05)
    time.sleep(0.1)
    expired = store.expire_leases(retry_allowed=False, max_attempts=1)
    assert [e.attempt_id for e in expired] == [claim.attempt_id]
    [attempt] = store.attempts_of(claim.run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "runner_lost")
    assert store.get_run(claim.run_id).status == "failed"
    # The late runner wakes up: its heartbeat and moves are fenced.
    assert store.heartbeat(claim.attempt_id, "r1", lease_s=60) is False
    with pytest.raises(LostRace):
        store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)


def test_cancel_queued_and_running(store: Store) -> None:
    queued, _ = store.submit_run(minimal_plan(name="q"), submitted_by=operator("a"))
    assert store.cancel_run(queued, actor=admin("bob")) is RunStatus.CANCELLED
    assert store.get_run(queued).status == "cancelled"
    running = _claimed(store)
    assert store.cancel_run(running.run_id, actor=admin("bob")) is RunStatus.RUNNING
    assert store.get_run(running.run_id).cancel_requested_by == "bob"
    with pytest.raises(LostRace):
        store.cancel_run(queued, actor=admin("bob"))
    assert [e.actor for e in store.audit_entries(reader=admin()) if e.action == "cancel"] == ["bob", "bob"]


def test_readers_let_a_waiting_writer_go_first(store: Store, db_path) -> None:
    """The file lock is not fair; a waiting writer's fresh marker makes readers hold back
    (they may still time out as busy), and a stale marker (a writer that died) is ignored."""
    import os

    from db import DbBusy
    from db.connection import connect, writer_waiting_path

    marker = writer_waiting_path(db_path)
    marker.touch()  # fresh: a writer is waiting right now
    with pytest.raises(DbBusy):
        with connect(db_path, lock_timeout_s=0.2):
            pass
    old = time.time() - 60
    os.utime(marker, (old, old))  # stale: its writer is gone
    with connect(db_path, lock_timeout_s=0.2) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)
    with connect(db_path, lock_timeout_s=0.2, writer=True):
        pass
    assert not marker.exists()  # a writer removes its marker once it has the lock


def test_quotas_are_enforced_at_submit_with_a_clear_message(db_path) -> None:
    from domain.plan.quotas import QuotaExceeded, Quotas

    store = Store(db_path, quotas=Quotas(queued_runs_per_user=2, prompts_per_point=100, concurrency=8))
    store.migrate()
    store.submit_run(minimal_plan(name="a"), submitted_by=operator("flooder"))
    store.submit_run(minimal_plan(name="b"), submitted_by=operator("flooder"))
    with pytest.raises(QuotaExceeded) as queued:
        store.submit_run(minimal_plan(name="c"), submitted_by=operator("flooder"))
    assert "flooder already has 2 runs queued (limit 2)" in queued.value.text("en")
    store.submit_run(minimal_plan(name="d"), submitted_by=operator("someone-else"))  # the quota is per user
    with pytest.raises(QuotaExceeded) as prompts:
        store.submit_run(minimal_plan(name="e", benchmark={"concurrency": [1, 4], "num_prompts": 1000}),
                         submitted_by=operator("x"))
    assert "1000 prompts" in prompts.value.text("en") and "プロンプト" in prompts.value.text("ja")
    with pytest.raises(QuotaExceeded):
        store.submit_run(minimal_plan(name="f", benchmark={"concurrency": [16]}), submitted_by=operator("x"))
    assert [r.name for r in store.list_runs()] == ["d", "b", "a"]  # nothing refused half-exists


def test_point_rows_name_every_metric_column_in_order() -> None:
    names = [f.name for f in fields(PointRow)]
    assert tuple(name for name in names if name in METRIC_COLUMNS) == METRIC_COLUMNS


def test_a_row_type_refuses_a_column_it_does_not_name(store: Store) -> None:
    store.submit_run(minimal_plan(), submitted_by=operator("alice"))
    [run] = store.list_runs()
    assert RunProgressRow.from_row(run.as_dict()) == run
    with pytest.raises(TypeError):
        RunProgressRow.from_row({**run.as_dict(), "surprise": 1})


def test_every_read_returns_its_typed_rows(store: Store) -> None:
    claim = _claimed(store)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    now = datetime(2025, 1, 1)
    point_id = store.insert_point(
        claim.attempt_id, "r1", scenario="short", concurrency=2, repeat_idx=0, conditions={"seed": 1},
        started_at=now, finished_at=now, metrics={"completed": 4, "output_throughput": 12.5}, raw_record={},
        telemetry=[{"source": "gpu", "device": 0, "metric": "util_pct", "n": 3, "mean": 50.0, "p50": 50.0,
                    "max": 60.0, "note": None}],
    )
    store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    store.register_runner("r1", host="h", gpu_type="H200", gpu_count=8, sglang_version=None, healthy=True,
                          unhealthy_reason=None, info={})
    store.store_schema("0.5.23", "h", {})

    [point] = store.points_of(claim.run_id)
    assert isinstance(point, PointRow) and (point.id, point.completed, point.output_throughput) == (point_id, 4, 12.5)
    [compared] = store.points_for_comparison([claim.run_id])
    assert isinstance(compared, ComparisonPointRow) and compared.gpu_util_mean == 50.0
    [telemetry] = store.telemetry_of(claim.run_id)
    assert isinstance(telemetry, TelemetryRow) and (telemetry.metric, telemetry.max) == ("util_pct", 60.0)
    [picked], matching = store.runs_for_picker()
    assert matching == 1
    assert isinstance(picked, PickerRunRow) and picked.status == "succeeded"
    [listed] = store.list_runs()
    assert isinstance(listed, RunProgressRow) and (listed.points_done, listed.attempt_status) == (1, "succeeded")
    assert isinstance(store.get_run(claim.run_id), RunRow)
    assert isinstance(store.attempts_of(claim.run_id)[0], AttemptRow)
    [runner] = store.list_runners()
    assert isinstance(runner, RunnerRow) and runner.healthy is True
    [schema] = store.schema_versions()
    assert isinstance(schema, SchemaVersionRow) and schema.version == "0.5.23"
    assert all(isinstance(entry, AuditRow) for entry in store.audit_entries(reader=admin()))


def _picker_store(store: Store) -> list[PickerRunRow]:
    """Twelve finished runs that differ in every way the picker filters by, and one running."""
    from bench import synthetic

    synthetic.fill(store, runs=13, points_per_run=1)
    with transaction(store.db_path, lock_timeout_s=10) as con:
        con.execute("UPDATE configurations SET model = NULL WHERE id IN ('synthetic-1', 'synthetic-5')")
        con.execute("UPDATE configurations SET gpu_type = NULL, gpu_count = NULL WHERE id = 'synthetic-2'")
        con.execute("UPDATE runs SET tags = '[\"kv-fp8\", \"night\"]' WHERE name IN ('synthetic-3', 'synthetic-4')")
        con.execute("UPDATE runs SET status = 'failed' WHERE name = 'synthetic-4'")
        con.execute("UPDATE runs SET status = 'cancelled', source = 'imported' WHERE name = 'synthetic-6'")
        con.execute("UPDATE runs SET source = 'measured' WHERE name = 'synthetic-7'")
        con.execute("UPDATE runs SET submitted_at = TIMESTAMP '2026-01-02 23:59:00' WHERE name = 'synthetic-8'")
        con.execute("UPDATE runs SET submitted_at = TIMESTAMP '2026-01-03 00:00:00' WHERE name = 'synthetic-9'")
        con.execute("UPDATE runs SET status = 'running' WHERE name = 'synthetic-12'")
        con.execute("UPDATE configurations SET gpu_count = 16 WHERE id = 'synthetic-12'")  # its label only
    rows, matching = store.runs_for_picker(limit=100)
    assert matching == len(rows) == 12 and [r.id for r in rows] == sorted((r.id for r in rows), reverse=True)
    return rows


@pytest.mark.parametrize("filters", [
    PickerFilters(models=("?",)), PickerFilters(models=("Qwen/Qwen3-30B-A3B",)),
    PickerFilters(gpus=("None×None", "3×H200")), PickerFilters(sources=("measured", "imported")),
    PickerFilters(statuses=("failed", "cancelled")), PickerFilters(tag="fp8"), PickerFilters(tag='"night"'),
    PickerFilters(since=date(2026, 1, 3)), PickerFilters(models=("?",), gpus=("6×H200",)),
    PickerFilters(tag="nowhere"),
])
def test_the_run_picker_filters_in_sql_as_the_page_reads_them(store: Store, filters: PickerFilters) -> None:
    """Each filter keeps exactly the finished runs whose labels the picker shows match it
    (a run without a model is the unknown label, a GPU is "<count>×<type>", a tag is
    searched in the tags' text, a date compares the day the run was submitted); the
    newest come first, at most ``limit`` of them, with how many match in all."""
    every = _picker_store(store)
    expected = [r.id for r in every
                if (not filters.models or (r.model or filters.unknown) in filters.models)
                and (not filters.gpus or f"{r.gpu_count}×{r.gpu_type}" in filters.gpus)
                and (not filters.sources or r.source in filters.sources)
                and (not filters.statuses or r.status in filters.statuses)
                and filters.tag in r.tags
                and (filters.since is None or r.submitted_at.date() >= filters.since)]
    rows, matching = store.runs_for_picker(filters, limit=100)
    assert [r.id for r in rows] == expected and matching == len(expected)
    limited, matching = store.runs_for_picker(filters, limit=1)
    assert [r.id for r in limited] == expected[:1] and matching == len(expected)


def test_the_run_picker_offers_every_model_and_gpu_label_of_the_finished_runs(store: Store) -> None:
    every = _picker_store(store)
    choices = store.picker_choices("?")
    assert {c.model for c in choices} == {r.model or "?" for r in every} == {"?", "Qwen/Qwen3-30B-A3B"}
    assert {c.gpu for c in choices} == {f"{r.gpu_count}×{r.gpu_type}" for r in every}
    assert "None×None" in {c.gpu for c in choices} and "16×H200" not in {c.gpu for c in choices}  # still running
