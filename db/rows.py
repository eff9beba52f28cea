"""Typed rows: what ``db.Store``'s reads return, one frozen dataclass per query shape.

Every row is built the same way, by column name: ``from_row`` takes one result row as a
mapping, ``from_cursor`` every row of an executed query.  The fields are the query's
columns exactly (the names in ``db/queries.py``, the types from ``db/migrations.py``), so
a query and its row type that drift apart fail at once on the first read.  JSON columns
stay the JSON text DuckDB returns; the callers that need them parse them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Self

import duckdb

JsonText = str  # a JSON column as DuckDB returns it


@dataclass(frozen=True)
class Row:
    """Base of every row type: built from a result row by column name."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        return cls(**row)

    @classmethod
    def from_cursor(cls, cursor: duckdb.DuckDBPyConnection) -> list[Self]:
        names = [d[0] for d in cursor.description or []]
        return [cls.from_row(dict(zip(names, values, strict=True))) for values in cursor.fetchall()]

    def as_dict(self) -> dict[str, Any]:
        """Column name → value, for code that takes mappings (``points_frame``, DataFrames)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class RunRow(Row):
    """One run with its configuration (``GET_RUN``): the run page and the plan's re-use."""

    id: int
    name: str
    status: str
    priority: int
    source: str
    submitted_by: str
    submitted_at: datetime
    finished_at: datetime | None
    total_points: int
    cancel_requested_by: str | None
    plan: JsonText
    configuration_id: str
    engine: str | None
    emulated: bool | None  # None: unknown (an imported run's engine the file left out)
    engine_version: str | None
    model: str | None
    gpu_type: str | None
    gpu_count: int | None
    server_args: JsonText


@dataclass(frozen=True)
class RunProgressRow(Row):
    """One run with its latest attempt's progress (``LIST_RUNS``): overview, runs page, CLI."""

    id: int
    name: str
    status: str
    priority: int
    source: str
    submitted_by: str
    submitted_at: datetime
    finished_at: datetime | None
    total_points: int
    cancel_requested_by: str | None
    plan: JsonText
    tags: JsonText
    engine: str | None
    emulated: bool | None  # None: unknown (an imported run's engine the file left out)
    engine_version: str | None
    model: str | None
    gpu_type: str | None
    gpu_count: int | None
    # The latest attempt; all None while the run has none yet.
    attempt_id: int | None
    attempt_no: int | None
    attempt_status: str | None
    failure_kind: str | None
    message: str | None
    current_point: str | None
    started_at: datetime | None
    runner_id: str | None
    points_done: int
    mean_point_s: float | None


@dataclass(frozen=True)
class PickerRunRow(Row):
    """One finished run as the compare page's picker lists it (``RUNS_FOR_PICKER``)."""

    id: int
    name: str
    status: str
    source: str
    submitted_at: datetime
    tags: JsonText
    model: str | None
    gpu_type: str | None
    gpu_count: int | None
    engine: str | None
    engine_version: str | None


@dataclass(frozen=True)
class PickerChoiceRow(Row):
    """One model and GPU label pair among the finished runs (``PICKER_CHOICES``)."""

    model: str
    gpu: str


@dataclass(frozen=True)
class ConfigurationRow(Row):
    """One immutable configuration (``GET_CONFIGURATION``)."""

    id: str
    engine: str | None
    emulated: bool | None  # None: unknown (an imported run's engine the file left out)
    engine_version: str | None
    model: str | None
    gpu_type: str | None
    gpu_count: int | None
    topology: JsonText
    server_args: JsonText
    environment: JsonText
    parent_id: str | None
    created_at: datetime
    created_by: str


@dataclass(frozen=True)
class AttemptRow(Row):
    """One attempt of a run and what its runner recorded (``ATTEMPTS_OF_RUN``)."""

    id: int
    attempt_no: int
    runner_id: str
    status: str
    failure_kind: str | None
    message: str | None
    claimed_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    pgids: JsonText
    server_argv: JsonText | None
    startup_facts: JsonText | None
    host_info: JsonText | None
    current_point: str | None
    log_tail: str | None
    raw_bench_output: str | None
    bench_client: JsonText | None
    telemetry_dir: str | None


@dataclass(frozen=True)
class PointRow(Row):
    """One measured point (``POINTS_OF_RUN``): every column of ``sweep_points``.  The metric
    fields are ``domain.results.bench_record.METRIC_COLUMNS``, in that order."""

    id: int
    run_id: int
    attempt_id: int | None  # None for imported points
    scenario: str
    concurrency: int
    repeat_idx: int
    conditions: JsonText
    started_at: datetime | None
    finished_at: datetime | None
    completed: int | None
    requested: int | None
    duration_s: float | None
    request_throughput: float | None
    input_throughput: float | None
    output_throughput: float | None
    total_throughput: float | None
    achieved_concurrency: float | None
    ttft_mean_ms: float | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    tpot_p90_ms: float | None
    tpot_p95_ms: float | None
    tpot_p99_ms: float | None
    itl_mean_ms: float | None
    itl_median_ms: float | None
    itl_p90_ms: float | None
    itl_p95_ms: float | None
    itl_p99_ms: float | None
    e2e_mean_ms: float | None
    e2e_median_ms: float | None
    e2e_p90_ms: float | None
    e2e_p95_ms: float | None
    e2e_p99_ms: float | None
    raw_record: JsonText | None
    timing: JsonText | None


@dataclass(frozen=True)
class ComparisonPointRow(PointRow):
    """One point with its run, configuration, start-up facts and pivoted telemetry
    (``POINTS_FOR_COMPARISON``): what ``domain.results.frames.point_row`` reads."""

    run_name: str
    source: str
    tags: JsonText
    submitted_at: datetime
    engine: str | None
    engine_version: str | None
    model: str | None
    gpu_type: str | None
    gpu_count: int | None
    topology: JsonText
    server_args: JsonText
    environment: JsonText
    startup_facts: JsonText | None  # None for imported points (no attempt)
    host_info: JsonText | None
    # The telemetry summaries pivoted into columns; None where the point has none.
    gpu_util_mean: float | None
    gpu_mem_peak_gb: float | None
    kv_usage_peak: float | None
    gpu_clock_event_reasons_max: float | None
    gpu_clock_event_reasons_any: int | None  # bitwise OR over samples and devices
    server_prompt_tokens: float | None  # the server's own counts over the measured window
    server_generation_tokens: float | None
    gpu_unavailable: bool | None
    gpu_power_w_sum: float | None  # the run's GPUs' mean board power over the window, summed
    gpu_power_samples: int | None  # the fewest power samples of one GPU in the window
    gpu_idle_share: float | None  # share of utilisation samples at 0 %, averaged over GPUs


@dataclass(frozen=True)
class TelemetryRow(Row):
    """One telemetry summary of one point and metric (``TELEMETRY_OF_RUN``)."""

    point_id: int
    attempt_id: int
    source: str
    device: int | None
    metric: str
    n: int
    mean: float | None
    p50: float | None
    max: float | None
    note: str | None


@dataclass(frozen=True)
class RunnerRow(Row):
    """One runner host as it last registered and heartbeat (``LIST_RUNNERS``)."""

    id: str
    host: str
    gpu_type: str
    gpu_count: int
    sglang_version: str | None  # None: no real SGLang on the host (demo mode)
    started_at: datetime
    heartbeat_at: datetime
    healthy: bool
    unhealthy_reason: str | None
    info: JsonText


@dataclass(frozen=True)
class SchemaVersionRow(Row):
    """One stored SGLang flag schema, without the schema itself (``LIST_SCHEMA_VERSIONS``)."""

    version: str
    host: str
    extracted_at: datetime


@dataclass(frozen=True)
class ImportRow(Row):
    """One imported file (``LIST_IMPORTS``)."""

    id: int
    sha256: str
    file_name: str
    kind: str
    imported_by: str
    imported_at: datetime
    run_ids: JsonText
    problems: JsonText


@dataclass(frozen=True)
class AuditRow(Row):
    """One audit log entry (``SEARCH_AUDIT``)."""

    id: int
    logged_at: datetime
    actor: str
    action: str
    run_id: int | None
    details: JsonText
