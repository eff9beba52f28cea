"""Per-request samples as one table (``requests.REQUEST_COLUMNS``, in milliseconds), from
the requests a client timed: the runner's warm driver and one-shot fallback
(runner/bench_client.py) and an import's ``--output-details`` arrays (db/store.py) are
turned into samples by this one adapter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from domain.results.requests import REQUEST_COLUMNS

# The columns of domain.results.requests.REQUEST_COLUMNS, in its order (checked below).
REQUEST_SCHEMA = pa.schema([
    ("request_idx", pa.int64()), ("success", pa.bool_()), ("input_len", pa.int64()), ("output_len", pa.int64()),
    ("ttft_ms", pa.float64()), ("tpot_ms", pa.float64()), ("e2e_ms", pa.float64()),
    ("itl_ms", pa.list_(pa.float64())), ("start_s", pa.float64()),
])
if tuple(REQUEST_SCHEMA.names) != REQUEST_COLUMNS:
    raise RuntimeError("REQUEST_SCHEMA and domain.results.requests.REQUEST_COLUMNS disagree")


@dataclass(frozen=True)
class MeasuredRequest:
    """One measured request as the client timed it (seconds)."""

    success: bool
    input_len: int | None
    output_len: int | None
    ttft_s: float
    e2e_s: float
    itl_s: list[float]
    start: float | None  # the client's own clock (perf_counter); None where the client gives none


def requests_from_details(record: dict[str, Any]) -> list[MeasuredRequest] | None:
    """The fallback's per-request data from a record written with ``--output-details``:
    a request failed where its error is non-empty; e2e is ttft + the sum of its
    inter-token gaps (the arrays carry no latency and no start time).  None: no arrays."""
    ttfts, itls = record.get("ttfts"), record.get("itls")
    if not isinstance(ttfts, list) or not isinstance(itls, list):
        return None
    n = len(ttfts)
    inputs, outputs = _column(record, "input_lens", n), _column(record, "output_lens", n)
    errors = _column(record, "errors", n)
    requests = []
    for i in range(n):
        gaps = [float(x) for x in (itls[i] if i < len(itls) else None) or []]
        ttft = float(ttfts[i] or 0.0)
        requests.append(MeasuredRequest(success=not errors[i], input_len=inputs[i], output_len=outputs[i],
                                        ttft_s=ttft, e2e_s=ttft + sum(gaps), itl_s=gaps, start=None))
    return requests


def _column(record: dict[str, Any], key: str, n: int) -> list[Any]:
    values = record.get(key)
    values = values if isinstance(values, list) else []
    return [values[i] if i < len(values) else None for i in range(n)]


def _tpot_ms(request: MeasuredRequest) -> float:
    """bench_serving's own TPOT: (latency - ttft) / (output_len - 1), for output_len > 1 only."""
    if not request.success or request.output_len is None or request.output_len <= 1:
        return math.nan
    return (request.e2e_s - request.ttft_s) / (request.output_len - 1) * 1000


def request_table(requests: Sequence[MeasuredRequest]) -> pa.Table:
    """``REQUEST_COLUMNS`` in milliseconds; a failed request's latencies are NaN (the
    client leaves them out of every metric); ``start_s`` is seconds after the earliest
    measured request started (NaN where the client gave no start time)."""
    starts = [r.start for r in requests if r.start is not None]
    first = min(starts) if starts else None
    columns = {
        "request_idx": list(range(len(requests))),
        "success": [r.success for r in requests],
        "input_len": [r.input_len for r in requests],
        "output_len": [r.output_len for r in requests],
        "ttft_ms": [r.ttft_s * 1000 if r.success else math.nan for r in requests],
        "tpot_ms": [_tpot_ms(r) for r in requests],
        "e2e_ms": [r.e2e_s * 1000 if r.success else math.nan for r in requests],
        "itl_ms": [[x * 1000 for x in r.itl_s] for r in requests],
        "start_s": [r.start - first if r.start is not None and first is not None else math.nan for r in requests],
    }
    return pa.table(columns, schema=REQUEST_SCHEMA)


def details_table(record: dict[str, Any]) -> pa.Table | None:
    """The samples an ``--output-details`` record carries (:func:`requests_from_details`),
    None when it has no per-request arrays or they are empty."""
    requests = requests_from_details(record)
    return request_table(requests) if requests else None
