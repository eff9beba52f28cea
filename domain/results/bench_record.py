"""bench_serving's JSONL record → benchdeck's typed metric columns.

Shared by the runner (its own points) and the importer (records measured elsewhere).
The record is kept whole as well; these columns are what the compare page reads.

Parsing pitfalls (each pinned by tests/test_importer.py): Python's client writes bare
``Infinity``/``NaN`` (not valid JSON, but Python's json module reads them), the Rust client
writes ``"inf"`` as a string, clients before 0.5.9 write 35 keys (no p90/p95, no
``total_throughput``), and every request failing means no record at all.
"""

from __future__ import annotations

import json
import math
from typing import Any

from domain.core.numbers import real_number

STATS = ("mean", "median", "p90", "p95", "p99")
LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_latency_ms"}

# Columns of sweep_points filled from a record, in order.
METRIC_COLUMNS = (
    "completed", "requested", "duration_s", "request_throughput", "input_throughput", "output_throughput",
    "total_throughput", "achieved_concurrency",
    *(f"{name}_{stat}_ms" for name in LATENCIES for stat in STATS),
)

REQUIRED_KEYS = ("completed", "duration", "request_throughput", "output_throughput", "mean_ttft_ms")


class BadRecord(ValueError):
    """The client's output is missing, truncated or not a bench_serving record."""


def _record_number(value: Any) -> float | None:
    """A record's field: None when absent, else a number (JSON's own, or the text ``inf`` or
    ``nan`` that a client writes for a rate it could not compute); anything else is not a
    record of ours (``BadRecord``)."""
    if value is None:
        return None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("inf", "infinity", "+inf"):
            return math.inf
        if lowered in ("nan",):
            return math.nan
        raise BadRecord(f"not a number: {value!r}")
    number = real_number(value)
    if number is None:
        raise BadRecord(f"not a number: {value!r}")
    return number


def parse_record_line(line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRecord(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise BadRecord("a record must be a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise BadRecord(f"record lacks {', '.join(missing)}")
    return record


def last_record(text: str) -> dict[str, Any]:
    """The record a single run appended (the output file may hold earlier runs)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BadRecord("the client wrote no record")
    return parse_record_line(lines[-1])


def metrics_from_record(record: dict[str, Any], *, requested: int | None) -> dict[str, float | int | None]:
    """Typed columns for one record; values absent from older formats stay None."""
    completed = _record_number(record.get("completed"))
    metrics: dict[str, float | int | None] = {
        "completed": int(completed) if completed is not None else None,
        "requested": requested,
        "duration_s": _record_number(record.get("duration")),
        "request_throughput": _record_number(record.get("request_throughput")),
        "input_throughput": _record_number(record.get("input_throughput")),
        "output_throughput": _record_number(record.get("output_throughput")),
        "total_throughput": _record_number(record.get("total_throughput")),
        "achieved_concurrency": _record_number(record.get("concurrency")),
    }
    for name, suffix in LATENCIES.items():
        for stat in STATS:
            metrics[f"{name}_{stat}_ms"] = _record_number(record.get(f"{stat}_{suffix}"))
    return metrics


def json_safe(value: Any) -> Any:
    """The record with non-finite floats turned into strings, for a strict JSON column."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
