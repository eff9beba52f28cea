"""Schema migrations: small, ordered, registered steps.

Each step runs in its own transaction together with the row that records it in
``schema_migrations``, so a crash leaves a step wholly applied or wholly absent.
Add a step by appending a function decorated with ``@migration(N, "name")``; never
edit a step that has shipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from db.connection import checkpoint_soon, connect

Step = Callable[[duckdb.DuckDBPyConnection], None]


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    apply: Step


MIGRATIONS: list[Migration] = []


def migration(number: int, name: str) -> Callable[[Step], Step]:
    def register(fn: Step) -> Step:
        if MIGRATIONS and number <= MIGRATIONS[-1].number:
            raise ValueError(f"migration {number} registered out of order")
        MIGRATIONS.append(Migration(number, name, fn))
        return fn

    return register


@migration(1, "core tables")
def _core_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE SEQUENCE run_ids START 1")
    con.execute("CREATE SEQUENCE attempt_ids START 1")
    con.execute("CREATE SEQUENCE point_ids START 1")
    con.execute("CREATE SEQUENCE audit_ids START 1")
    # Immutable snapshot of what was run; id is a hash of the canonical content.
    con.execute(
        """
        CREATE TABLE configurations (
            id VARCHAR PRIMARY KEY,
            engine VARCHAR,  -- NULL only for imported runs whose file and user left it unknown
            engine_version VARCHAR,
            model VARCHAR,
            gpu_type VARCHAR,
            gpu_count INTEGER,
            topology JSON NOT NULL,
            server_args JSON NOT NULL,
            environment JSON NOT NULL,
            parent_id VARCHAR,
            created_at TIMESTAMP NOT NULL,
            created_by VARCHAR NOT NULL
        )
        """
    )
    con.execute(
        """
        CREATE TABLE runs (
            id BIGINT PRIMARY KEY DEFAULT nextval('run_ids'),
            configuration_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            plan JSON NOT NULL,
            status VARCHAR NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            source VARCHAR NOT NULL,
            submitted_by VARCHAR NOT NULL,
            submitted_at TIMESTAMP NOT NULL,
            idempotency_key VARCHAR UNIQUE,
            total_points INTEGER NOT NULL,
            cancel_requested_by VARCHAR,
            finished_at TIMESTAMP,
            tags JSON NOT NULL DEFAULT '[]'
        )
        """
    )
    con.execute(
        """
        CREATE TABLE attempts (
            id BIGINT PRIMARY KEY DEFAULT nextval('attempt_ids'),
            run_id BIGINT NOT NULL,
            attempt_no INTEGER NOT NULL,
            runner_id VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            failure_kind VARCHAR,
            message VARCHAR,
            claimed_at TIMESTAMP NOT NULL,
            heartbeat_at TIMESTAMP NOT NULL,
            lease_expires_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP,
            pgids JSON NOT NULL DEFAULT '[]',
            server_argv JSON,
            startup_facts JSON,
            host_info JSON,
            current_point VARCHAR,
            log_tail VARCHAR,
            raw_bench_output VARCHAR,
            bench_client JSON,
            telemetry_dir VARCHAR
        )
        """
    )
    con.execute(
        """
        CREATE TABLE sweep_points (
            id BIGINT PRIMARY KEY DEFAULT nextval('point_ids'),
            run_id BIGINT NOT NULL,
            attempt_id BIGINT,  -- NULL for imported points: no attempt of ours measured them
            scenario VARCHAR NOT NULL,
            concurrency INTEGER NOT NULL,
            repeat_idx INTEGER NOT NULL,
            conditions JSON NOT NULL,
            started_at TIMESTAMP,
            finished_at TIMESTAMP,
            completed INTEGER,
            requested INTEGER,
            duration_s DOUBLE,
            request_throughput DOUBLE,
            input_throughput DOUBLE,
            output_throughput DOUBLE,
            total_throughput DOUBLE,
            achieved_concurrency DOUBLE,
            ttft_mean_ms DOUBLE, ttft_median_ms DOUBLE, ttft_p90_ms DOUBLE, ttft_p95_ms DOUBLE, ttft_p99_ms DOUBLE,
            tpot_mean_ms DOUBLE, tpot_median_ms DOUBLE, tpot_p90_ms DOUBLE, tpot_p95_ms DOUBLE, tpot_p99_ms DOUBLE,
            itl_mean_ms DOUBLE, itl_median_ms DOUBLE, itl_p90_ms DOUBLE, itl_p95_ms DOUBLE, itl_p99_ms DOUBLE,
            e2e_mean_ms DOUBLE, e2e_median_ms DOUBLE, e2e_p90_ms DOUBLE, e2e_p95_ms DOUBLE, e2e_p99_ms DOUBLE,
            raw_record JSON,
            timing JSON
        )
        """
    )
    # Raw samples (4 Hz x GPUs x metrics) go to per-attempt Parquet files under the work
    # dir; the DB keeps one summary row per point and metric, which is all pages read.
    con.execute(
        """
        CREATE TABLE telemetry_summaries (
            point_id BIGINT NOT NULL,
            attempt_id BIGINT NOT NULL,
            source VARCHAR NOT NULL,
            device INTEGER,
            metric VARCHAR NOT NULL,
            n INTEGER NOT NULL,
            mean DOUBLE,
            p50 DOUBLE,
            max DOUBLE,
            note VARCHAR
        )
        """
    )
    con.execute(
        """
        CREATE TABLE runners (
            id VARCHAR PRIMARY KEY,
            host VARCHAR NOT NULL,
            gpu_type VARCHAR NOT NULL,
            gpu_count INTEGER NOT NULL,
            sglang_version VARCHAR,
            started_at TIMESTAMP NOT NULL,
            heartbeat_at TIMESTAMP NOT NULL,
            healthy BOOLEAN NOT NULL,
            unhealthy_reason VARCHAR,
            info JSON NOT NULL DEFAULT '{}'
        )
        """
    )
    # Append-only: db/ has no query that updates or deletes it.
    con.execute(
        """
        CREATE TABLE audit_log (
            id BIGINT PRIMARY KEY DEFAULT nextval('audit_ids'),
            logged_at TIMESTAMP NOT NULL,
            actor VARCHAR NOT NULL,
            action VARCHAR NOT NULL,
            run_id BIGINT,
            details JSON NOT NULL
        )
        """
    )


@migration(2, "sglang schemas per version and host")
def _sglang_schemas(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """
        CREATE TABLE sglang_schemas (
            version VARCHAR NOT NULL,
            host VARCHAR NOT NULL,
            extracted_at TIMESTAMP NOT NULL,
            schema JSON NOT NULL,
            PRIMARY KEY (version, host)
        )
        """
    )


@migration(3, "indexes for the queue and per-run lookups")
def _indexes(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE INDEX attempts_run ON attempts (run_id)")
    con.execute("CREATE INDEX points_run ON sweep_points (run_id)")
    con.execute("CREATE INDEX telemetry_point ON telemetry_summaries (point_id)")


@migration(4, "imports: one row per imported file, unique by content hash")
def _imports(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE SEQUENCE import_ids START 1")
    con.execute(
        """
        CREATE TABLE imports (
            id BIGINT PRIMARY KEY DEFAULT nextval('import_ids'),
            sha256 VARCHAR NOT NULL UNIQUE,
            file_name VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            imported_by VARCHAR NOT NULL,
            imported_at TIMESTAMP NOT NULL,
            run_ids JSON NOT NULL,
            problems JSON NOT NULL
        )
        """
    )


@migration(5, "request samples: one Parquet file of per-request data per point")
def _request_samples(con: duckdb.DuckDBPyConnection) -> None:
    # A table of its own rather than a column of sweep_points: points are inserted with
    # their full column list in places (bench/synthetic.py), and most points have no file
    # (imported ones, clients that give no per-request data).
    con.execute(
        """
        CREATE TABLE request_samples (
            point_id BIGINT PRIMARY KEY,
            path VARCHAR NOT NULL,  -- the Parquet file under the attempt directory
            requests INTEGER NOT NULL  -- its rows: every measured request, failed ones included
        )
        """
    )


@migration(6, "watches")
def _watches(con: duckdb.DuckDBPyConnection) -> None:
    """Watched configurations (issue 19): a pinned plan re-measured when SGLang changes.

    Only columns that are never updated carry an index (DuckDB rewrites an indexed row on
    UPDATE), so ``watches.state`` and ``watch_runs.evaluated_at`` stay unindexed: both
    tables hold one row per watch or per re-measurement, tens to thousands, never the bulk."""
    con.execute("CREATE SEQUENCE watch_ids START 1")
    con.execute(
        """
        CREATE TABLE watches (
            id BIGINT PRIMARY KEY DEFAULT nextval('watch_ids'),
            origin_run_id BIGINT NOT NULL,  -- the run it was watched from
            name VARCHAR NOT NULL,
            pinned_plan JSON NOT NULL,  -- the plan as watched, never changed
            current_plan JSON NOT NULL,  -- the pinned plan translated to current_version
            current_version VARCHAR,  -- the SGLang version its next re-run uses
            points JSON NOT NULL,  -- [[scenario, concurrency], ...]: the points that matter
            created_by VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            state VARCHAR NOT NULL,  -- active | stopped
            stopped_reason VARCHAR,
            stopped_by VARCHAR,
            stopped_at TIMESTAMP,
            schedule_hours DOUBLE,  -- set by an administrator; NULL: no schedule
            due_reason VARCHAR,  -- why a re-run is owed (version_change | schedule | on_demand | confirm)
            due_since TIMESTAMP,
            last_queued_at TIMESTAMP
        )
        """
    )
    con.execute(
        """
        CREATE TABLE watch_runs (
            watch_id BIGINT NOT NULL,
            run_id BIGINT NOT NULL,
            reason VARCHAR NOT NULL,  -- origin | version_change | schedule | on_demand | confirm
            sglang_version VARCHAR,
            translations JSON NOT NULL,  -- the drift-table rewrites that led to its flags
            queued_at TIMESTAMP NOT NULL,
            evaluated_at TIMESTAMP,
            outcome VARCHAR,  -- measured | failed (no result) | cancelled
            series_no INTEGER,
            series_reason VARCHAR,  -- why a new series started here (the comparability verdict)
            PRIMARY KEY (watch_id, run_id)
        )
        """
    )
    con.execute(
        """
        CREATE TABLE watch_measurements (
            watch_id BIGINT NOT NULL,
            run_id BIGINT NOT NULL,
            scenario VARCHAR NOT NULL,
            concurrency INTEGER NOT NULL,
            metric VARCHAR NOT NULL,
            sglang_version VARCHAR,
            measured_at TIMESTAMP NOT NULL,
            series_no INTEGER NOT NULL,
            value DOUBLE,  -- the median of the point's repeats
            repeats INTEGER NOT NULL,
            spread DOUBLE,  -- max - min of those repeats (NULL with one repeat)
            baseline DOUBLE,  -- rolling median of the last N comparable measurements
            band_low DOUBLE,
            band_high DOUBLE,
            baseline_runs JSON NOT NULL,
            change DOUBLE,  -- (value - baseline) / baseline
            verdict VARCHAR NOT NULL,  -- baseline | ok | suspicious | regression | improvement
            PRIMARY KEY (watch_id, run_id, scenario, concurrency, metric)
        )
        """
    )
    con.execute(
        """
        CREATE TABLE watch_hosts (
            runner_id VARCHAR PRIMARY KEY,
            sglang_version VARCHAR,  -- the version last seen on this runner host
            seen_at TIMESTAMP NOT NULL
        )
        """
    )
    # Single-column keys: what DuckDB's index scan serves (an equality filter on one column).
    con.execute("CREATE INDEX watch_runs_run ON watch_runs (run_id)")
    con.execute("CREATE INDEX watch_measurements_watch ON watch_measurements (watch_id)")


# The one-word engines of before the split (issue 39) and what each is now: a family and
# whether benchdeck's emulator stands in for it (domain/engines).  Written out here, not read
# from the adapters: a shipped step must do the same thing whatever the code becomes.
_ENGINE_SPLIT = (("emulator", "sglang"), ("vllm-emulator", "vllm"))
_PLAN_COLUMNS = (("runs", "plan"), ("watches", "pinned_plan"), ("watches", "current_plan"))


@migration(7, "engine family and emulated, one word split in two")
def _engine_split(con: duckdb.DuckDBPyConnection) -> None:
    """``configurations.engine = 'emulator'`` becomes ``engine = 'sglang', emulated = true``
    (imported runs' NULL engine keeps a NULL ``emulated``: unknown), and the stored plans and
    points' conditions spell the engine the same way.  Configuration ids stay as they are:
    RunPlan hashes the one-word label (domain/plan/run_plan.py ``engine_label``)."""
    con.execute("ALTER TABLE configurations ADD COLUMN emulated BOOLEAN")
    con.execute("UPDATE configurations SET emulated = false WHERE engine IS NOT NULL")
    for old, family in _ENGINE_SPLIT:
        con.execute("UPDATE configurations SET engine = ?, emulated = true WHERE engine = ?", [family, old])
        patch = json.dumps({"engine": family, "emulated": True})
        for table, column in _PLAN_COLUMNS:
            con.execute(f"UPDATE {table} SET {column} = json_merge_patch({column}, ?) "  # noqa: S608 - fixed names
                        f"WHERE json_extract_string({column}, '$.engine') = ?", [patch, old])
        con.execute("UPDATE sweep_points SET conditions = json_merge_patch(conditions, ?) "
                    "WHERE json_extract_string(conditions, '$.engine') = ?", [json.dumps({"engine": family}), old])


@migration(8, "quality probes")
def _quality_probes(con: duckdb.DuckDBPyConnection) -> None:
    """The quality probe of an attempt (issue 42): greedy outputs at two batch compositions,
    the teacher-forced scoring of a reference run's outputs, the eval set's per-item
    results and the speculative acceptance, as one JSON record (db/quality_store.py)."""
    con.execute(
        """
        CREATE TABLE quality_probes (
            attempt_id BIGINT PRIMARY KEY,
            run_id BIGINT NOT NULL,
            recorded_at TIMESTAMP NOT NULL,
            prompt_set JSON NOT NULL,  -- what makes two probes' prompts the same set
            reference_run_id BIGINT,  -- whose outputs were scored teacher-forced (NULL: none)
            record JSON NOT NULL
        )
        """
    )
    con.execute("CREATE INDEX quality_probes_run ON quality_probes (run_id)")

def _ensure_ledger(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(number INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )


def applied_numbers(con: duckdb.DuckDBPyConnection) -> set[int]:
    _ensure_ledger(con)
    return {row[0] for row in con.execute("SELECT number FROM schema_migrations").fetchall()}


def migrate(db_path: Path, *, lock_timeout_s: float) -> list[int]:
    """Apply every registered step not yet recorded; return the numbers applied now."""
    applied_now: list[int] = []
    with connect(db_path, lock_timeout_s=lock_timeout_s) as con:
        done = applied_numbers(con)
        for step in MIGRATIONS:
            if step.number in done:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                step.apply(con)
                con.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)", [step.number, step.name]
                )
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            applied_now.append(step.number)
        if applied_now:
            checkpoint_soon(db_path, con)  # as a transaction does: no WAL left behind (db/recovery.py)
    return applied_now
