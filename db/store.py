"""The only code that talks to DuckDB: one method per named query in ``db.queries``.

Each method is one short access under the cross-process lock (db/connection.py): on the
connection this process keeps, on the one the serving holder (the runner daemon) keeps
for everyone (db/serving.py), or, in a process that keeps nothing (tests, tools, the
CLI), on a connection opened and closed for it.  Reads return the typed rows of
``db.rows``.  State changes return whether they happened; a guarded UPDATE that matches
zero rows raises ``LostRace`` so callers cannot mistake "someone else moved it" for success.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from db import queries as q
from db.bootstrap_memo import keep_intervals
from db.clock import utcnow
from db.connection import connect, transaction
from db.migrations import migrate
from db.rows import (
    AttemptRow,
    AuditRow,
    ComparisonPointRow,
    ConfigurationRow,
    ImportRow,
    PickerChoiceRow,
    PickerRunRow,
    PointRow,
    RunnerRow,
    RunProgressRow,
    RunRow,
    SchemaVersionRow,
    TelemetryRow,
)
from db.sample_files import SampleFiles
from db.upgrade import check_and_back_up
from domain.core.access import Action, Actor, require
from domain.core.settings import Settings
from domain.core.states import (
    ACTIVE_ATTEMPT,
    AttemptStatus,
    FailureKind,
    RunStatus,
    is_legal_attempt_move,
    is_legal_run_move,
)
from domain.engines import stored_engine
from domain.plan.quotas import Quotas
from domain.plan.run_plan import RunPlan, configuration_id
from domain.results.bench_record import METRIC_COLUMNS
from domain.results.request_table import details_table


class LostRace(RuntimeError):
    """A guarded state change matched no row: the row was not in the expected state."""


class DuplicateImport(ValueError):
    """This file (same content hash) was imported already."""

    def __init__(self, run_ids: list[int]):
        super().__init__(f"already imported as run(s) {', '.join(map(str, run_ids))}")
        self.run_ids = run_ids


class IllegalMove(ValueError):
    """A state change that the state machine does not allow at all."""


@dataclass(frozen=True)
class Claim:
    run_id: int
    attempt_id: int
    attempt_no: int
    plan: RunPlan


@dataclass(frozen=True)
class ProcessGroup:
    """A child's process group as recorded: the start time tells a reused PID apart."""

    pgid: int
    started_at: float | None
    role: str


@dataclass(frozen=True)
class ExpiredAttempt:
    attempt_id: int
    run_id: int
    groups: list[ProcessGroup]


@dataclass(frozen=True)
class RunnerCapabilities:
    runner_id: str
    gpu_type: str
    gpu_count: int
    sglang_version: str | None  # None: this host has no real SGLang (demo mode)
    vllm_version: str | None = None  # None: this host has no real vLLM


@dataclass(frozen=True)
class PickerFilters:
    """What the compare page's run picker filters by (``RUNS_FOR_PICKER``); an empty tuple,
    an empty tag or no date filters nothing.  Models and GPUs are the labels the picker shows
    (``picker_choices``): ``unknown`` for a run that does not name its model, ``<count>×<type>``
    for a GPU.  Hashable, so a page can cache by it."""

    models: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    tag: str = ""
    since: date | None = None
    unknown: str = "?"

    def params(self) -> dict[str, Any]:
        return {"models": list(self.models), "gpus": list(self.gpus), "sources": list(self.sources),
                "statuses": list(self.statuses), "tag": self.tag, "since": self.since, "unknown": self.unknown}


def _one(row: tuple[Any, ...] | None) -> Any:
    """The single value of a row that SQL guarantees exists (RETURNING, a known id)."""
    if row is None:
        raise RuntimeError("expected a row, got none")
    return row[0]


def _groups(pgids_json: str | None) -> list[ProcessGroup]:
    groups = json.loads(pgids_json or "[]")
    return [ProcessGroup(int(g["pgid"]), g.get("started_at"), g.get("role", "")) for g in groups]


class Store:
    def __init__(self, db_path: Path, *, lock_timeout_s: float = 10.0, quotas: Quotas | None = None):
        self.db_path = db_path
        self.lock_timeout_s = lock_timeout_s
        self.quotas = quotas or Quotas()

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls(settings.db, lock_timeout_s=settings.lock_timeout_s, quotas=Quotas.from_settings(settings))

    def _tx(self, *, urgent: bool = False) -> Any:
        """A read-write transaction; ``urgent`` (the heartbeats): in the runner, it does not
        wait behind another process's access that it serves (db/connection.py ``connect``)."""
        return transaction(self.db_path, lock_timeout_s=self.lock_timeout_s, urgent=urgent)

    def _read(self) -> Any:
        """An access that only reads (beside a serving holder's writes: db/serving.py)."""
        return connect(self.db_path, lock_timeout_s=self.lock_timeout_s, reading=True)

    def migrate(self) -> list[int]:
        """Pending migrations, after the upgrade's checks: a newer database is refused and a
        used one is backed up first (db/upgrade.py)."""
        check_and_back_up(self.db_path, lock_timeout_s=self.lock_timeout_s)
        return migrate(self.db_path, lock_timeout_s=self.lock_timeout_s)

    # --- submitting -----------------------------------------------------------------
    def submit_run(
        self,
        plan: RunPlan,
        *,
        submitted_by: Actor,
        idempotency_key: str | None = None,
        environment: dict[str, Any] | None = None,
        rerun_of: int | None = None,
    ) -> tuple[int, bool]:
        """Queue ``plan``; return (run id, created).  A repeated idempotency key returns
        the first run instead of queueing a second one (double click, refresh).  The role
        and the quotas are checked here, in the same transaction, whatever page or command
        submitted it; ``rerun_of`` also needs the right to re-run that run."""
        snapshot = plan.configuration_snapshot()
        config_id = configuration_id(snapshot)
        now = utcnow()
        source = "emulated" if plan.emulated else "measured"
        user = submitted_by.name
        with self._tx() as con:
            require(submitted_by, Action.SUBMIT)
            if rerun_of is not None:
                require(submitted_by, Action.RERUN, owner=self._owner(con, rerun_of), run_id=rerun_of)
            if idempotency_key is not None:
                existing = con.execute(q.FIND_RUN_BY_IDEMPOTENCY_KEY, [idempotency_key]).fetchone()
                if existing:
                    return int(existing[0]), False
            self.quotas.check_plan(plan)
            self.quotas.check_queue(int(_one(con.execute(q.COUNT_QUEUED_BY_USER, [user]).fetchone())), user)
            con.execute(
                q.INSERT_CONFIGURATION,
                [
                    config_id, plan.engine, plan.emulated, plan.engine_version, plan.model, plan.gpu.type,
                    plan.gpu.count,
                    json.dumps(snapshot["topology"]), json.dumps(snapshot["server_args"]),
                    json.dumps(environment or {}), None, now, user,
                ],
            )
            row = con.execute(
                q.INSERT_RUN,
                [
                    config_id, plan.name, plan.model_dump_json(), plan.priority, source, user, now,
                    idempotency_key, len(plan.points()), json.dumps(plan.tags),
                ],
            ).fetchone()
            run_id = int(_one(row))
            details: dict[str, Any] = {"configuration_id": config_id, "name": plan.name}
            if rerun_of is not None:
                details["rerun_of"] = rerun_of
            self._audit_by(con, submitted_by, "rerun" if rerun_of is not None else "submit", run_id, details)
        return run_id, True

    # --- claiming -------------------------------------------------------------------
    def claim_next(self, caps: RunnerCapabilities, *, lease_s: float,
                   accept: Callable[[RunPlan], bool] | None = None) -> Claim | None:
        """Atomically claim the next run this runner can serve, or return None.  With
        ``accept``, the next such run whose plan it accepts (the others stay queued)."""
        now = utcnow()
        with self._tx() as con:
            run_id = self._next_claimable(con, caps, accept)
            if run_id is None:
                return None
            if not con.execute(q.MOVE_RUN, [RunStatus.RUNNING, run_id, RunStatus.QUEUED]).fetchall():
                return None  # cannot happen under the file lock; kept as the guard it is
            count = con.execute(q.COUNT_ATTEMPTS, [run_id]).fetchone()
            attempt_no = int(count[0]) + 1 if count else 1
            lease_until = now + timedelta(seconds=lease_s)
            row = con.execute(q.INSERT_ATTEMPT, [run_id, attempt_no, caps.runner_id, now, now, lease_until]).fetchone()
            plan_json = con.execute(q.RUN_PLAN, [run_id]).fetchone()
        return Claim(run_id, int(_one(row)), attempt_no, RunPlan.model_validate_json(_one(plan_json)))

    @staticmethod
    def _next_claimable(con: Any, caps: RunnerCapabilities, accept: Callable[[RunPlan], bool] | None) -> int | None:
        params = [caps.gpu_type, caps.gpu_count, caps.sglang_version is not None, caps.sglang_version,
                  caps.vllm_version is not None, caps.vllm_version]
        if accept is None:
            found = con.execute(q.NEXT_CLAIMABLE_RUN, params).fetchone()
            return None if found is None else int(found[0])
        for run_id, plan_json in con.execute(q.CLAIMABLE_RUNS, params).fetchall():
            if accept(RunPlan.model_validate_json(plan_json)):
                return int(run_id)
        return None

    # --- moving states --------------------------------------------------------------
    def move_run(self, run_id: int, current: RunStatus, new: RunStatus) -> None:
        if not is_legal_run_move(current, new):
            raise IllegalMove(f"run {run_id}: {current} -> {new} is not a legal move")
        with self._tx() as con:
            if new in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
                rows = con.execute(q.FINISH_RUN, [new, utcnow(), run_id, current]).fetchall()
            else:
                rows = con.execute(q.MOVE_RUN, [new, run_id, current]).fetchall()
        if not rows:
            raise LostRace(f"run {run_id} was not {current}")

    def move_attempt(self, attempt_id: int, runner_id: str, current: AttemptStatus, new: AttemptStatus) -> None:
        if not is_legal_attempt_move(current, new) or new in (
            AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED
        ):
            raise IllegalMove(f"attempt {attempt_id}: {current} -> {new} is not a legal move here")
        with self._tx() as con:
            rows = con.execute(q.MOVE_ATTEMPT, [new, utcnow(), attempt_id, runner_id, current]).fetchall()
        if not rows:
            raise LostRace(f"attempt {attempt_id} was not {current} under runner {runner_id}")

    def finish_attempt(
        self,
        attempt_id: int,
        runner_id: str,
        current: AttemptStatus,
        new: AttemptStatus,
        *,
        failure_kind: FailureKind | None = None,
        message: str | None = None,
        log_tail: str | None = None,
        retry_allowed: bool = False,
        max_attempts: int = 1,
        requeue_on_cancel: bool = False,
    ) -> RunStatus:
        """End an attempt and decide its run's status in the same transaction.

        A failed attempt sends the run back to the queue only if the failure kind may be
        retried and attempts remain; otherwise the run ends with the attempt's outcome."""
        if not is_legal_attempt_move(current, new) or new in ACTIVE_ATTEMPT:
            raise IllegalMove(f"attempt {attempt_id}: {current} -> {new} is not an ending")
        if (new is AttemptStatus.FAILED) != (failure_kind is not None):
            raise ValueError("a failed attempt needs a failure kind, and only a failed one")
        now = utcnow()
        with self._tx() as con:
            rows = con.execute(
                q.FINISH_ATTEMPT,
                [new, failure_kind, message, now, log_tail, attempt_id, runner_id, current],
            ).fetchall()
            if not rows:
                raise LostRace(f"attempt {attempt_id} was not {current} under runner {runner_id}")
            run_id = int(rows[0][0])
            run_status = self._settle_run(con, run_id, new, retry_allowed=retry_allowed, max_attempts=max_attempts,
                                          requeue_on_cancel=requeue_on_cancel)
        return run_status

    def _settle_run(
        self, con: duckdb.DuckDBPyConnection, run_id: int, outcome: AttemptStatus, *, retry_allowed: bool,
        max_attempts: int, requeue_on_cancel: bool = False,
    ) -> RunStatus:
        """The run's status after an attempt ends.  A failure that may be retried, with
        attempts left, and an attempt cancelled because its runner stopped (not by the
        user), both send the run back to the queue for a new attempt.  Attempts cancelled
        by a stopping runner do not use up ``max_attempts``."""
        count = con.execute(q.COUNT_SPENT_ATTEMPTS, [run_id]).fetchone()
        attempts = int(count[0]) if count else 0
        retry = outcome is AttemptStatus.FAILED and retry_allowed and attempts < max_attempts
        if retry or (outcome is AttemptStatus.CANCELLED and requeue_on_cancel):
            target = RunStatus.QUEUED
            rows = con.execute(q.MOVE_RUN, [target, run_id, RunStatus.RUNNING]).fetchall()
        else:
            target = {
                AttemptStatus.SUCCEEDED: RunStatus.SUCCEEDED,
                AttemptStatus.FAILED: RunStatus.FAILED,
                AttemptStatus.CANCELLED: RunStatus.CANCELLED,
            }[outcome]
            rows = con.execute(q.FINISH_RUN, [target, utcnow(), run_id, RunStatus.RUNNING]).fetchall()
        if not rows:
            raise LostRace(f"run {run_id} was not running")
        return target

    def heartbeat(self, attempt_id: int, runner_id: str, *, lease_s: float) -> bool:
        """Renew the lease; False means the attempt was taken away (fenced): stop writing."""
        now = utcnow()
        with self._tx(urgent=True) as con:
            rows = con.execute(
                q.HEARTBEAT, [now, now + timedelta(seconds=lease_s), attempt_id, runner_id]
            ).fetchall()
        return bool(rows)

    def expire_leases(self, *, retry_allowed: bool, max_attempts: int) -> list[ExpiredAttempt]:
        """Fail every active attempt whose lease ran out as runner_lost; return them with
        their recorded process groups so the caller can kill what is still alive."""
        expired: list[ExpiredAttempt] = []
        with self._tx() as con:
            for attempt_id, run_id, status, pgids, runner_id in con.execute(
                q.EXPIRED_ATTEMPTS, [utcnow()]
            ).fetchall():
                finished = con.execute(
                    q.FINISH_ATTEMPT,
                    [AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "lease expired: runner stopped heartbeating",
                     utcnow(), None, attempt_id, runner_id, status],
                ).fetchall()
                if finished:
                    self._settle_run(con, int(run_id), AttemptStatus.FAILED, retry_allowed=retry_allowed,
                                     max_attempts=max_attempts)
                    expired.append(ExpiredAttempt(int(attempt_id), int(run_id), _groups(pgids)))
        return expired

    def cancel_run(self, run_id: int, *, actor: Actor) -> RunStatus:
        """Cancel a queued run at once; for a running one, ask its runner to stop."""
        with self._tx() as con:
            require(actor, Action.CANCEL, owner=self._owner(con, run_id), run_id=run_id)
            if con.execute(q.FINISH_RUN, [RunStatus.CANCELLED, utcnow(), run_id, RunStatus.QUEUED]).fetchall():
                self._audit_by(con, actor, "cancel", run_id, {"was": "queued"})
                return RunStatus.CANCELLED
            if con.execute(q.REQUEST_CANCEL, [actor.name, run_id]).fetchall():
                self._audit_by(con, actor, "cancel", run_id, {"was": "running"})
                return RunStatus.RUNNING
        raise LostRace(f"run {run_id} is neither queued nor running")

    # --- the runner's writes during an attempt ----------------------------------------
    def record_child(self, attempt_id: int, runner_id: str, group: ProcessGroup) -> bool:
        """Remember a child's process group so that whoever finds this attempt's lease
        expired can kill it.  False: the attempt is no longer ours (fenced)."""
        with self._tx() as con:
            row = con.execute(q.ATTEMPT_PGIDS, [attempt_id]).fetchone()
            groups = json.loads(row[0] or "[]") if row else []
            groups.append({"pgid": group.pgid, "started_at": group.started_at, "role": group.role})
            return bool(con.execute(q.RECORD_CHILDREN, [json.dumps(groups), attempt_id, runner_id]).fetchall())

    def live_process_groups(self, runner_id: str) -> list[ProcessGroup]:
        """The process groups recorded by this runner's attempts that have not ended."""
        with self._read() as con:
            rows = con.execute(q.LIVE_PGIDS_OF_RUNNER, [runner_id]).fetchall()
        return [group for (pgids,) in rows for group in _groups(pgids)]

    def record_startup(
        self, attempt_id: int, runner_id: str, *, server_argv: list[str], startup_facts: dict[str, Any],
        host_info: dict[str, Any], bench_client: dict[str, Any], telemetry_dir: str,
    ) -> bool:
        with self._tx() as con:
            return bool(con.execute(q.RECORD_STARTUP, [
                json.dumps(server_argv), json.dumps(startup_facts, default=str), json.dumps(host_info, default=str),
                json.dumps(bench_client), telemetry_dir, attempt_id, runner_id,
            ]).fetchall())

    def set_current_point(self, attempt_id: int, runner_id: str, point_key: str) -> bool:
        with self._tx() as con:
            return bool(con.execute(q.SET_CURRENT_POINT, [point_key, attempt_id, runner_id]).fetchall())

    def record_raw_output(self, attempt_id: int, runner_id: str, raw: str) -> bool:
        with self._tx() as con:
            return bool(con.execute(q.RECORD_RAW_OUTPUT, [raw, attempt_id, runner_id]).fetchall())

    def insert_point(
        self, attempt_id: int, runner_id: str, *, scenario: str, concurrency: int, repeat_idx: int,
        conditions: dict[str, Any], started_at: datetime, finished_at: datetime, metrics: dict[str, Any],
        raw_record: dict[str, Any], telemetry: list[dict[str, Any]], timing: dict[str, Any] | None = None,
        request_samples: dict[str, Any] | None = None,
    ) -> int | None:
        """Store one measured point and its telemetry summaries in one transaction; with
        ``request_samples`` (``{"path", "requests"}``) also where its per-request Parquet
        file is.  None: the attempt is not benchmarking under this runner any more (a late write)."""
        with self._tx() as con:
            owner = con.execute(q.ATTEMPT_IS_BENCHMARKING, [attempt_id, runner_id]).fetchone()
            if owner is None:
                return None
            values = [metrics.get(column) for column in METRIC_COLUMNS]
            point_id = int(_one(con.execute(q.INSERT_POINT, [
                owner[0], attempt_id, scenario, concurrency, repeat_idx, json.dumps(conditions), started_at,
                finished_at, *values, json.dumps(raw_record), json.dumps(timing or {}),
            ]).fetchone()))
            if telemetry:
                con.executemany(q.INSERT_TELEMETRY_SUMMARY, [
                    [point_id, attempt_id, t["source"], t["device"], t["metric"], t["n"], t["mean"], t["p50"],
                     t["max"], t["note"]] for t in telemetry
                ])
            if request_samples is not None:
                con.execute(q.INSERT_REQUEST_SAMPLES,
                            [point_id, str(request_samples["path"]), int(request_samples["requests"])])
        return point_id

    def cancel_requested_by(self, run_id: int) -> str | None:
        with self._read() as con:
            row = con.execute(q.CANCEL_REQUESTED_BY, [run_id]).fetchone()
        return row[0] if row else None

    # --- imports --------------------------------------------------------------------
    def import_runs(
        self, *, sha256: str, file_name: str, kind: str, actor: Actor, configurations: Sequence[dict[str, Any]],
        points: Iterable[tuple[int, dict[str, Any]]], problems: list[dict[str, Any]],
    ) -> list[int]:
        """One import, one transaction: its runs, their points, the import record, the audit
        row.  A file imported before (same content hash) raises DuplicateImport; any error
        rolls everything back, so nothing is ever half-imported."""
        now = utcnow()
        user = actor.name
        with self._tx() as con:
            require(actor, Action.IMPORT)
            existing = con.execute(q.FIND_IMPORT_BY_HASH, [sha256]).fetchone()
            if existing is not None:
                raise DuplicateImport(json.loads(existing[1]))
            run_ids = []
            for index, config in enumerate(configurations):
                snapshot = {k: config[k] for k in ("engine", "engine_version", "model", "gpu_type", "gpu_count",
                                                   "topology", "server_args")}
                config_id = configuration_id({**snapshot, "imported": sha256, "index": index})
                con.execute(q.INSERT_CONFIGURATION, [
                    config_id, *stored_engine(config["engine"]), config["engine_version"], config["model"],
                    config["gpu_type"],
                    config["gpu_count"], json.dumps(config["topology"]), json.dumps(config["server_args"], default=str),
                    json.dumps(config["environment"], default=str), None, now, user,
                ])
                name = config.get("name") or f"{Path(file_name).stem}#{index + 1}"
                run_ids.append(int(_one(con.execute(q.INSERT_IMPORTED_RUN, [
                    config_id, name, config.get("source", "imported"), user, now, f"import:{sha256}:{index}",
                    config["points"], now,
                ]).fetchone())))
            sampled: list[tuple[Path, Any]] = []
            for run_index, point in points:
                values = [point["metrics"].get(column) for column in METRIC_COLUMNS]
                point_id = int(_one(con.execute(q.INSERT_POINT, [
                    run_ids[run_index], None, point["scenario"], point["concurrency"], point["repeat_idx"],
                    json.dumps(point["conditions"], default=str), now, now, *values, json.dumps(point["raw"]), "{}",
                ]).fetchone()))
                path = self._imported_samples(con, sha256, point_id, point["raw"])
                if path is not None:
                    sampled.append((path, point["metrics"].get("duration_s")))
            con.execute(q.INSERT_IMPORT, [sha256, file_name, kind, user, now, json.dumps(run_ids),
                                          json.dumps(problems, default=str)])
            self._audit_by(con, actor, "import", run_ids[0] if run_ids else None,
                        {"file": file_name, "sha256": sha256, "runs": run_ids, "problems": len(problems)})
        for path, duration_s in sampled:  # after the commit: seconds of CPU the lock need not wait for
            keep_intervals(path, duration_s)
        return run_ids

    def _imported_samples(self, con: Any, sha256: str, point_id: int, raw: dict[str, Any]) -> Path | None:
        """An imported point's ``--output-details`` arrays as samples, as the runner keeps a
        measured point's (a Parquet file beside the database, listed in request_samples), so
        its intervals are computed exactly as a measured point's; None without arrays."""
        table = details_table(raw)
        if table is None:
            return None
        path = self.db_path.parent / "imports" / sha256[:16] / f"point-{point_id}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="zstd")
        con.execute(q.INSERT_REQUEST_SAMPLES, [point_id, str(path), table.num_rows])
        return path

    def fill_in_imported(self, run_id: int, facts: dict[str, Any], *, actor: Actor) -> str:
        """Fill unknown facts of an imported run (model, GPU, engine, version) as a new
        configuration version linked to the old one; returns the new configuration id.
        Facts the file stated are not overwritten: only NULL (unknown) ones are filled."""
        fillable = ("engine", "engine_version", "model", "gpu_type", "gpu_count")
        with self._tx() as con:
            require(actor, Action.FILL_IN, owner=self._owner(con, run_id), run_id=run_id)
            run = RunRow.from_cursor(con.execute(q.GET_RUN, [run_id]))
            if not run or run[0].source != "imported":
                raise LostRace(f"run {run_id} is not an imported run")
            old = ConfigurationRow.from_cursor(con.execute(q.GET_CONFIGURATION, [run[0].configuration_id]))[0]
            filled = {k: v for k, v in facts.items() if k in fillable and v is not None and getattr(old, k) is None}
            if not filled:
                return old.id
            environment = json.loads(old.environment or "{}")
            environment.setdefault("provenance", {}).update({k: "user" for k in filled})
            environment["filled_in_by"] = actor.name
            new = replace(old, **filled)
            if "engine" in filled:
                engine, emulated = stored_engine(new.engine)
                new = replace(new, engine=engine, emulated=emulated)
            identity = {k: getattr(new, k) for k in (*fillable, "topology", "server_args")}
            new_id = configuration_id(identity | {"parent": old.id})
            con.execute(q.INSERT_CONFIGURATION, [
                new_id, new.engine, new.emulated, new.engine_version, new.model, new.gpu_type, new.gpu_count,
                old.topology, old.server_args, json.dumps(environment), old.id, utcnow(), actor.name,
            ])
            if not con.execute(q.REPOINT_RUN, [new_id, run_id, old.id]).fetchall():
                raise LostRace(f"run {run_id} changed while it was being filled in")
            self._audit_by(con, actor, "fill_in", run_id, {"from": old.id, "to": new_id, "filled": filled})
        return new_id

    def list_imports(self, limit: int = 50) -> list[ImportRow]:
        with self._read() as con:
            return ImportRow.from_cursor(con.execute(q.LIST_IMPORTS, [limit]))

    # --- runners and schemas ------------------------------------------------------------
    def register_runner(
        self, runner_id: str, *, host: str, gpu_type: str, gpu_count: int, sglang_version: str | None,
        healthy: bool, unhealthy_reason: str | None, info: dict[str, Any],
    ) -> None:
        now = utcnow()
        with self._tx() as con:
            con.execute(q.UPSERT_RUNNER, [runner_id, host, gpu_type, gpu_count, sglang_version, now, now, healthy,
                                          unhealthy_reason, json.dumps(info, default=str)])

    def runner_heartbeat(self, runner_id: str, *, healthy: bool, unhealthy_reason: str | None) -> None:
        with self._tx(urgent=True) as con:
            con.execute(q.RUNNER_HEARTBEAT, [utcnow(), healthy, unhealthy_reason, runner_id])

    def set_runner_info(self, runner_id: str, **entries: Any) -> None:
        """Set keys of a runner's info (the rest kept), e.g. the GPUs a foreign process holds."""
        with self._tx(urgent=True) as con:
            found = con.execute(q.RUNNER_INFO, [runner_id]).fetchone()
            info = json.loads(found[0] or "{}") if found else {}
            con.execute(q.SET_RUNNER_INFO, [json.dumps({**info, **entries}, default=str), runner_id])

    def list_runners(self) -> list[RunnerRow]:
        with self._read() as con:
            return RunnerRow.from_cursor(con.execute(q.LIST_RUNNERS))

    def store_schema(self, version: str, host: str, schema: dict[str, Any]) -> None:
        with self._tx() as con:
            con.execute(q.UPSERT_SCHEMA, [version, host, utcnow(), json.dumps(schema)])

    def host_schemas(self) -> list[dict[str, Any]]:
        """The newest stored dump of each SGLang version the runner hosts reported."""
        with self._read() as con:
            return [json.loads(raw) for _version, raw in con.execute(q.HOST_SCHEMAS).fetchall()]

    def schema_versions(self) -> list[SchemaVersionRow]:
        with self._read() as con:
            return SchemaVersionRow.from_cursor(con.execute(q.LIST_SCHEMA_VERSIONS))

    def set_priority(self, run_id: int, priority: int, *, actor: Actor) -> None:
        """Re-prioritise a queued run (a running one has already been claimed).  Admins only."""
        with self._tx() as con:
            require(actor, Action.PRIORITY, run_id=run_id)
            if not con.execute(q.SET_PRIORITY, [priority, run_id]).fetchall():
                raise LostRace(f"run {run_id} is not queued")
            self._audit_by(con, actor, "priority", run_id, {"priority": priority})

    # --- reading --------------------------------------------------------------------
    def points_of(self, run_id: int) -> list[PointRow]:
        with self._read() as con:
            return PointRow.from_cursor(con.execute(q.POINTS_OF_RUN, [run_id]))

    def points_for_comparison(self, run_ids: Sequence[int]) -> list[ComparisonPointRow]:
        """One batched read for the compare and checklist pages (each locked open costs ~25 ms)."""
        with self._read() as con:
            return ComparisonPointRow.from_cursor(con.execute(q.POINTS_FOR_COMPARISON, [list(run_ids)]))

    def request_samples(self, point_ids: Sequence[int]) -> dict[int, pd.DataFrame]:
        """Each point's measured requests (``domain.results.requests.REQUEST_COLUMNS``, one row
        per request), read from the Parquet file recorded with it.  A point without one, or
        whose file is gone or unreadable (the work directory is not the database), is
        absent from the result: never an error.  Each frame names the file it was read from
        (db/bootstrap_memo.py ``samples_file``): its bootstrap intervals are kept beside it."""
        files = self.sample_files(point_ids)  # read outside the DB lock: files can be large
        return {point_id: frame for point_id in files if (frame := files.get(point_id)) is not None}

    def sample_files(self, point_ids: Sequence[int]) -> SampleFiles:
        """The samples of these points as :meth:`request_samples` has them, each read only
        when asked for (db/sample_files.py), with the intervals kept beside them."""
        with self._read() as con:
            paths = con.execute(q.REQUEST_SAMPLE_PATHS, [list(point_ids)]).fetchall()
        return SampleFiles({int(point_id): Path(path) for point_id, path in paths})

    def runs_for_picker(self, filters: PickerFilters = PickerFilters(), limit: int = 200
                        ) -> tuple[list[PickerRunRow], int]:
        """The newest ``limit`` finished runs that match ``filters``, and how many match."""
        params = filters.params()
        with self._read() as con:
            rows = PickerRunRow.from_cursor(con.execute(q.RUNS_FOR_PICKER, {**params, "limit": limit}))
            matching = int(_one(con.execute(q.COUNT_PICKER_RUNS, params).fetchone()))
        return rows, matching

    def picker_choices(self, unknown: str) -> list[PickerChoiceRow]:
        """The model and GPU labels of the finished runs (a run without a model: ``unknown``)."""
        with self._read() as con:
            return PickerChoiceRow.from_cursor(con.execute(q.PICKER_CHOICES, {"unknown": unknown}))

    def picker_runs_by_id(self, run_ids: list[int]) -> list[PickerRunRow]:
        """:meth:`runs_for_picker`'s rows for these runs, however old (finished runs only)."""
        if not run_ids:
            return []
        with self._read() as con:
            return PickerRunRow.from_cursor(con.execute(q.RUNS_FOR_PICKER_BY_ID, [run_ids]))

    def telemetry_of(self, run_id: int) -> list[TelemetryRow]:
        with self._read() as con:
            return TelemetryRow.from_cursor(con.execute(q.TELEMETRY_OF_RUN, [run_id]))

    def list_runs(self, limit: int = 200) -> list[RunProgressRow]:
        with self._read() as con:
            return RunProgressRow.from_cursor(con.execute(q.LIST_RUNS, [limit]))

    def get_run(self, run_id: int) -> RunRow | None:
        with self._read() as con:
            rows = RunRow.from_cursor(con.execute(q.GET_RUN, [run_id]))
        return rows[0] if rows else None

    def attempts_of(self, run_id: int) -> list[AttemptRow]:
        with self._read() as con:
            return AttemptRow.from_cursor(con.execute(q.ATTEMPTS_OF_RUN, [run_id]))

    def run_counts(self) -> dict[str, int]:
        with self._read() as con:
            return {status: int(n) for status, n in con.execute(q.COUNT_RUNS_BY_STATUS).fetchall()}

    def audit_entries(
        self, *, reader: Actor, action: str | None = None, actor: str | None = None, run_id: int | None = None,
        since: datetime | None = None, limit: int = 200,
    ) -> list[AuditRow]:
        """The audit log, newest first, filtered; only admins may read it."""
        require(reader, Action.VIEW_AUDIT)
        params = [action, action, actor, actor, run_id, run_id, since, since, limit]
        with self._read() as con:
            return AuditRow.from_cursor(con.execute(q.SEARCH_AUDIT, params))

    def audit_actions(self, *, reader: Actor) -> list[str]:
        require(reader, Action.VIEW_AUDIT)
        with self._read() as con:
            return [r[0] for r in con.execute(q.AUDIT_ACTIONS).fetchall()]

    # --- audit ----------------------------------------------------------------------
    @staticmethod
    def _audit(
        con: duckdb.DuckDBPyConnection, actor: str, action: str, run_id: int | None, details: dict[str, Any]
    ) -> None:
        con.execute(q.INSERT_AUDIT, [utcnow(), actor, action, run_id, json.dumps(details, default=str)])

    @classmethod
    def _audit_by(
        cls, con: duckdb.DuckDBPyConnection, actor: Actor, action: str, run_id: int | None, details: dict[str, Any]
    ) -> None:
        """An audit row for a person's action: how they were identified and their role go with it."""
        cls._audit(con, actor.name, action, run_id, {**details, "role": actor.role, "via": actor.via})

    @staticmethod
    def _owner(con: duckdb.DuckDBPyConnection, run_id: int) -> str | None:
        row = con.execute(q.RUN_OWNER, [run_id]).fetchone()
        if row is None:
            raise LostRace(f"run {run_id} does not exist")
        return str(row[0])

    def audit(self, actor: str, action: str, run_id: int | None, details: dict[str, Any]) -> None:
        """A system event (the runner's launch, a policy change): ``actor`` names the process."""
        with self._tx() as con:
            self._audit(con, actor, action, run_id, details)


    def table_names(self) -> Sequence[str]:
        with self._read() as con:
            return [r[0] for r in con.execute(q.TABLE_NAMES).fetchall()]
