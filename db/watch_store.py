"""Watched configurations in DuckDB (issue 19): beside ``db.store.Store``, on the same
short locked accesses (``db.connection``), one method per query of ``db.watch_queries``.

Who may do what: watching a run needs the right to submit (operators and admins), stopping
a watch the right to cancel the run it came from (its owner, or an admin), setting a
schedule the administrator's right to re-prioritise.  Every person's change is audited.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from db import watch_queries as wq
from db.rows import JsonText, Row
from db.store import LostRace, Store, utcnow
from db.store_part import StorePart
from domain.core.access import Action, Actor, require
from domain.plan.run_plan import RunPlan

WatchedPoint = tuple[str, int]  # (scenario, concurrency)


@dataclass(frozen=True)
class WatchRow(Row):
    """One watched configuration (``GET_WATCH``, ``LIST_WATCHES``)."""

    id: int
    origin_run_id: int
    name: str
    pinned_plan: JsonText
    current_plan: JsonText
    current_version: str | None
    points: JsonText
    created_by: str
    created_at: datetime
    state: str  # active | stopped
    stopped_reason: str | None
    stopped_by: str | None
    stopped_at: datetime | None
    schedule_hours: float | None
    due_reason: str | None
    due_since: datetime | None
    last_queued_at: datetime | None

    def plan(self) -> RunPlan:
        return RunPlan.model_validate_json(self.current_plan)

    def watched_points(self) -> list[WatchedPoint]:
        return [(str(s), int(c)) for s, c in json.loads(self.points)]


@dataclass(frozen=True)
class WatchRunRow(Row):
    """One re-measurement of a watch (``WATCH_RUNS_OF``)."""

    run_id: int
    reason: str
    sglang_version: str | None
    translations: JsonText
    queued_at: datetime
    evaluated_at: datetime | None
    outcome: str | None
    series_no: int | None
    series_reason: JsonText | None
    status: str  # the run's status


@dataclass(frozen=True)
class UnevaluatedRow(Row):
    watch_id: int
    run_id: int
    reason: str
    sglang_version: str | None
    status: str


@dataclass(frozen=True)
class SeriesRow(Row):
    """One measurement of a series as the verdicts need it (``SERIES_MEASUREMENTS``)."""

    run_id: int
    scenario: str
    concurrency: int
    metric: str
    value: float | None
    spread: float | None
    verdict: str
    change: float | None


@dataclass(frozen=True)
class HistoryRow(Row):
    """One measurement with its re-run's reason (``WATCH_HISTORY``): the History page."""

    run_id: int
    scenario: str
    concurrency: int
    metric: str
    sglang_version: str | None
    measured_at: datetime
    series_no: int
    value: float | None
    repeats: int
    spread: float | None
    baseline: float | None
    band_low: float | None
    band_high: float | None
    baseline_runs: JsonText
    change: float | None
    verdict: str
    reason: str
    translations: JsonText
    series_reason: JsonText | None


@dataclass(frozen=True)
class RegressionRow(Row):
    """One point and metric of an active watch whose latest re-run is a regression."""

    watch_id: int
    name: str
    run_id: int
    scenario: str
    concurrency: int
    metric: str
    sglang_version: str | None
    measured_at: datetime
    value: float | None
    baseline: float | None
    change: float | None


@dataclass(frozen=True)
class MeasurementRecord:
    """One watched point and metric of an evaluated re-run, as the runner judged it."""

    scenario: str
    concurrency: int
    metric: str
    value: float | None
    repeats: int
    spread: float | None
    baseline: float | None
    band_low: float | None
    band_high: float | None
    baseline_runs: Sequence[int]
    change: float | None
    verdict: str


class WatchStore(StorePart):
    """Watched configurations: create, stop, schedule, follow versions, record verdicts."""

    # --- people's actions ---------------------------------------------------------------

    def watch_run(self, run_id: int, *, actor: Actor, points: Sequence[WatchedPoint]) -> int:
        """Pin ``run_id``'s plan and watch ``points`` of it; its own result is the first
        measurement.  Watching a run already watched returns that watch."""
        run = self.store.get_run(run_id)
        if run is None or run.source not in ("measured", "emulated") or run.status != "succeeded":
            raise LostRace(f"run {run_id} is not a succeeded run of ours")
        if not points:
            raise ValueError("a watch needs at least one point")
        version = run.engine_version or self._launched_version(run_id)
        # Pinned to the version it ran under, so that a re-run measures that version again.
        plan = RunPlan.model_validate_json(run.plan).model_copy(update={"sglang_version": version})
        pinned = plan.model_dump_json()
        now = utcnow()
        with self._tx() as con:
            require(actor, Action.SUBMIT, run_id=run_id)
            existing = con.execute(wq.ACTIVE_WATCH_OF_RUN, [run_id]).fetchone()
            if existing is not None:
                return int(existing[0])
            row = con.execute(wq.INSERT_WATCH, [
                run_id, plan.name, pinned, pinned, version, json.dumps([list(p) for p in points]), actor.name, now,
            ]).fetchone()
            watch_id = int(row[0]) if row else 0
            con.execute(wq.INSERT_WATCH_RUN, [watch_id, run_id, "origin", version, "[]", now])
            Store._audit_by(con, actor, "watch", run_id, {"watch_id": watch_id, "points": [list(p) for p in points]})
        return watch_id

    def _launched_version(self, run_id: int) -> str | None:
        """The version the runner launched, as its points recorded it (a plan may leave it to the host)."""
        for point in self.store.points_of(run_id):
            version = json.loads(point.conditions).get("engine_version")
            if version:
                return str(version)
        return None

    def stop(self, watch_id: int, *, actor: Actor, reason: str) -> None:
        with self._tx() as con:
            watch = self._get(con, watch_id)
            require(actor, Action.CANCEL, owner=watch.created_by, run_id=watch.origin_run_id)
            if not con.execute(wq.STOP_WATCH, [reason, actor.name, utcnow(), watch_id]).fetchall():
                raise LostRace(f"watch {watch_id} is not active")
            Store._audit_by(con, actor, "watch_stop", watch.origin_run_id, {"watch_id": watch_id, "reason": reason})

    def request_run(self, watch_id: int, *, actor: Actor) -> bool:
        """On demand: a re-run is owed; the runner queues it on its next pass.  False when
        one is owed already (for whatever reason)."""
        with self._tx() as con:
            watch = self._get(con, watch_id)
            require(actor, Action.SUBMIT, run_id=watch.origin_run_id)
            owed = bool(con.execute(wq.MARK_DUE, ["on_demand", utcnow(), watch_id]).fetchall())
            if owed:
                Store._audit_by(con, actor, "watch_request", watch.origin_run_id, {"watch_id": watch_id})
        return owed

    def set_schedule(self, watch_id: int, hours: float | None, *, actor: Actor) -> None:
        """Re-measure every ``hours`` (None: no schedule).  Administrators only."""
        if hours is not None and hours <= 0:
            raise ValueError("a schedule needs a positive number of hours")
        with self._tx() as con:
            watch = self._get(con, watch_id)
            require(actor, Action.PRIORITY, run_id=watch.origin_run_id)
            if not con.execute(wq.SET_SCHEDULE, [hours, watch_id]).fetchall():
                raise LostRace(f"watch {watch_id} is not active")
            Store._audit_by(con, actor, "watch_schedule", watch.origin_run_id,
                            {"watch_id": watch_id, "hours": hours})

    # --- the runner's side --------------------------------------------------------------
    def note_host_version(self, runner_id: str, version: str | None) -> str | None:
        """Remember the SGLang version seen on ``runner_id``; return the one seen before
        when it changed (None: first sighting, or no change)."""
        with self._read() as con:
            row = con.execute(wq.HOST_VERSION, [runner_id]).fetchone()
        if row is not None and row[0] == version:
            return None  # the usual pass: nothing to write
        with self._tx() as con:
            row = con.execute(wq.HOST_VERSION, [runner_id]).fetchone()
            con.execute(wq.UPSERT_HOST_VERSION, [runner_id, version, utcnow()])
        previous = row[0] if row else None
        return previous if row is not None and previous != version else None

    def active(self) -> list[WatchRow]:
        with self._read() as con:
            return WatchRow.from_cursor(con.execute(wq.ACTIVE_WATCHES))

    def retarget(self, watch_id: int, *, plan: RunPlan, version: str, seen_version: str | None) -> bool:
        """Follow ``version`` with ``plan`` (its flags translated) and owe a re-run; guarded by
        the version the caller translated from."""
        with self._tx() as con:
            return bool(con.execute(wq.RETARGET_WATCH, [
                plan.model_dump_json(), version, utcnow(), watch_id, seen_version]).fetchall())

    def stop_by_system(self, watch_id: int, *, by: str, reason: str) -> bool:
        """The runner stops a watch (a flag with no translation); audited under its id."""
        with self._tx() as con:
            watch = self._get(con, watch_id)
            stopped = bool(con.execute(wq.STOP_WATCH, [reason, by, utcnow(), watch_id]).fetchall())
            if stopped:
                Store._audit(con, by, "watch_stop", watch.origin_run_id, {"watch_id": watch_id, "reason": reason})
        return stopped

    def mark_due(self, watch_id: int, reason: str) -> bool:
        with self._tx() as con:
            return bool(con.execute(wq.MARK_DUE, [reason, utcnow(), watch_id]).fetchall())

    def pending_runs(self, watch_id: int) -> list[int]:
        with self._read() as con:
            return [int(r[0]) for r in con.execute(wq.PENDING_WATCH_RUNS, [watch_id]).fetchall()]

    def record_queued(self, watch: WatchRow, run_id: int, *, translations: list[dict[str, Any]]) -> bool:
        """The owed re-run is queued as ``run_id``: remember it and clear the debt (guarded by
        the due mark the caller saw, so a crash in between re-queues the same idempotent run)."""
        now = utcnow()
        with self._tx() as con:
            con.execute(wq.INSERT_WATCH_RUN, [watch.id, run_id, watch.due_reason or "on_demand",
                                              watch.current_version, json.dumps(translations, default=str), now])
            return bool(con.execute(wq.CLEAR_DUE, [now, watch.id, watch.due_since]).fetchall())

    def unevaluated(self) -> list[UnevaluatedRow]:
        with self._read() as con:
            return UnevaluatedRow.from_cursor(con.execute(wq.UNEVALUATED_RUNS))

    def last_measured(self, watch_id: int) -> tuple[int, int] | None:
        """(run id, series number) of the watch's last measured re-run."""
        with self._read() as con:
            row = con.execute(wq.LAST_MEASURED_RUN, [watch_id]).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def series(self, watch_id: int, series_no: int) -> list[SeriesRow]:
        with self._read() as con:
            return SeriesRow.from_cursor(con.execute(wq.SERIES_MEASUREMENTS, [watch_id, series_no]))

    def record_evaluation(
        self, watch_id: int, run_id: int, *, outcome: str, series_no: int | None,
        series_reason: dict[str, Any] | None, sglang_version: str | None,
        measurements: Sequence[MeasurementRecord], confirm: bool,
    ) -> bool:
        """One re-run judged, in one transaction: its measurements, its outcome, and (when a
        measurement is suspicious) a confirming re-run owed.  False: judged already."""
        now = utcnow()
        with self._tx() as con:
            done = con.execute(wq.FINISH_EVALUATION, [
                now, outcome, series_no, json.dumps(series_reason) if series_reason else None, watch_id, run_id,
            ]).fetchall()
            if not done:
                return False
            con.executemany(wq.INSERT_MEASUREMENT, [
                [watch_id, run_id, m.scenario, m.concurrency, m.metric, sglang_version, now, series_no, m.value,
                 m.repeats, m.spread, m.baseline, m.band_low, m.band_high, json.dumps(list(m.baseline_runs)),
                 m.change, m.verdict] for m in measurements
            ])
            if confirm:
                con.execute(wq.MARK_DUE, ["confirm", now, watch_id])
        return True

    # --- reading ------------------------------------------------------------------------
    def get(self, watch_id: int) -> WatchRow | None:
        with self._read() as con:
            rows = WatchRow.from_cursor(con.execute(wq.GET_WATCH, [watch_id]))
        return rows[0] if rows else None

    def all_watches(self) -> list[WatchRow]:
        with self._read() as con:
            return WatchRow.from_cursor(con.execute(wq.LIST_WATCHES))

    def watches_of_run(self, run_id: int) -> list[WatchRow]:
        with self._read() as con:
            return WatchRow.from_cursor(con.execute(wq.WATCHES_OF_RUN, [run_id, run_id]))

    def runs_of(self, watch_id: int) -> list[WatchRunRow]:
        with self._read() as con:
            return WatchRunRow.from_cursor(con.execute(wq.WATCH_RUNS_OF, [watch_id]))

    def history(self, watch_id: int) -> list[HistoryRow]:
        with self._read() as con:
            return HistoryRow.from_cursor(con.execute(wq.WATCH_HISTORY, [watch_id]))

    def open_regressions(self) -> list[RegressionRow]:
        with self._read() as con:
            return RegressionRow.from_cursor(con.execute(wq.OPEN_REGRESSIONS))

    @staticmethod
    def _get(con: duckdb.DuckDBPyConnection, watch_id: int) -> WatchRow:
        rows = WatchRow.from_cursor(con.execute(wq.GET_WATCH, [watch_id]))
        if not rows:
            raise LostRace(f"watch {watch_id} does not exist")
        return rows[0]
