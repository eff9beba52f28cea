"""AIPerf's exported results (``profile_export_aiperf.json`` / ``.csv``) → one point per file.

Checked against the files aiperf 0.13.0 writes (schema_version 1.4).  Mapping, by
definition rather than by name:

* TTFT ← ``time_to_first_token``; E2E ← ``request_latency``.
* **TPOT ← ``inter_token_latency``**: AIPerf computes it per request as
  (request latency − TTFT) / (output tokens − 1), which is bench_serving's TPOT formula.
* **ITL ← ``inter_chunk_latency``**: the gaps between streamed chunks, pooled over all
  requests, which is what bench_serving's ITL is (AIPerf's "ITL" is a per-request mean).
* mean ← ``avg``, median ← ``p50``; p90/p95/p99 by name.
* duration ← ``benchmark_duration``; throughputs ← ``request_throughput``,
  ``input_token_throughput``, ``output_token_throughput``, ``total_token_throughput``;
  achieved concurrency ← ``effective_concurrency`` avg (time-averaged requests in flight,
  the same quantity as bench_serving's Σ latency / duration); completed ← ``request_count``
  (successful requests).

Conditions come only from the JSON's ``input_config`` (the CSV carries none): the profiling
phase's concurrency, request count and rate, the warmup phase's request count, synthetic
ISL/OSL when their stddev is 0 (fixed lengths, i.e. range ratio 1.0), the seed,
``ignore_eos`` if it was sent, and the model name (a fact from the file).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any, BinaryIO

from domain.importer.lines import MAX_LINE_BYTES
from domain.importer.types import CONDITION_KEYS, DERIVED_KEYS, ImportedPoint, LineProblem, RecordFormat
from domain.results.bench_record import LATENCIES, METRIC_COLUMNS, STATS

MAX_FILE_BYTES = MAX_LINE_BYTES
LATENCY_TAGS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "itl": "inter_chunk_latency",
                "e2e": "request_latency"}
STAT_KEYS = {"mean": "avg", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
SCALAR_TAGS = {"duration_s": "benchmark_duration", "request_throughput": "request_throughput",
               "input_throughput": "input_token_throughput", "output_throughput": "output_token_throughput",
               "total_throughput": "total_token_throughput", "achieved_concurrency": "effective_concurrency"}
EXPECTED_UNITS = {"benchmark_duration": "sec", **{tag: "ms" for tag in LATENCY_TAGS.values()}}
# The CSV names metrics by their display header (with the unit in brackets).
CSV_HEADERS = {
    "Time to First Token (ms)": "time_to_first_token", "Inter Token Latency (ms)": "inter_token_latency",
    "Inter Chunk Latency (ms)": "inter_chunk_latency", "Request Latency (ms)": "request_latency",
    "Benchmark Duration (sec)": "benchmark_duration", "Request Throughput (requests/sec)": "request_throughput",
    "Input Token Throughput (tokens/sec)": "input_token_throughput",
    "Output Token Throughput (tokens/sec)": "output_token_throughput",
    "Total Token Throughput (tokens/sec)": "total_token_throughput", "Effective Concurrency": "effective_concurrency",
    "Request Count": "request_count",
}
AIPERF_FORMAT_JSON = RecordFormat(family="aiperf", base_keys=0, extras=("json",))
AIPERF_FORMAT_CSV = RecordFormat(family="aiperf", base_keys=0, extras=("csv",))


def looks_like_aiperf_json(head: bytes) -> bool:
    return head.lstrip().startswith(b"{") and b'"aiperf_version"' in head


def looks_like_aiperf_csv(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \r\n").startswith(b"Metric,")


def read_capped(stream: BinaryIO) -> bytes | LineProblem:
    data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        return LineProblem(0, "too_long", {"size": len(data)})
    return data


# -- metrics -------------------------------------------------------------------------------


def _stat(metrics: Mapping[str, Mapping[str, Any]], tag: str, key: str) -> float | None:
    value = (metrics.get(tag) or {}).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{tag}.{key} is not a number: {value!r}")
    return float(value)


def _check_units(metrics: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, unit in EXPECTED_UNITS.items():
        found = (metrics.get(tag) or {}).get("unit")
        if found is not None and found != unit:
            raise ValueError(f"{tag} is in {found}, expected {unit}")


def metric_columns(metrics: Mapping[str, Mapping[str, Any]], requested: int | None) -> dict[str, float | int | None]:
    """benchdeck's typed columns from AIPerf metric objects (``{"unit", "avg", "p50", ...}``)."""
    _check_units(metrics)
    completed = _stat(metrics, "request_count", "avg")
    columns: dict[str, float | int | None] = {
        "completed": int(completed) if completed is not None else None,
        "requested": requested,
        **{column: _stat(metrics, tag, "avg") for column, tag in SCALAR_TAGS.items()},
    }
    for name in LATENCIES:
        for stat in STATS:
            columns[f"{name}_{stat}_ms"] = _stat(metrics, LATENCY_TAGS[name], STAT_KEYS[stat])
    return {column: columns[column] for column in METRIC_COLUMNS}


# -- conditions (JSON only) ----------------------------------------------------------------


def _phase(config: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for phase in config.get("phases") or ():
        if isinstance(phase, Mapping) and phase.get("kind") == kind:
            return phase
    return {}


def _fixed_length(spec: Any) -> int | None:
    """A synthetic length that every prompt has (stddev 0), else None."""
    if not isinstance(spec, Mapping) or spec.get("stddev") not in (0, 0.0):
        return None
    mean = spec.get("mean")
    return int(mean) if isinstance(mean, int | float) and float(mean).is_integer() else None


def _dataset_conditions(config: Mapping[str, Any]) -> dict[str, Any]:
    datasets = config.get("datasets") or []
    if len(datasets) != 1 or not isinstance(datasets[0], Mapping):
        return {}
    dataset = datasets[0]
    prompts = dataset.get("prompts") or {}
    stated: dict[str, Any] = {"dataset": f"aiperf-{dataset.get('type')}" if dataset.get("type") else None,
                              "seed": dataset.get("random_seed")}
    isl, osl = _fixed_length(prompts.get("isl")), _fixed_length(prompts.get("osl"))
    stated.update(input_len=isl, output_len=osl)
    if isl is not None and osl is not None:
        stated["random_range_ratio"] = 1.0  # every prompt exactly mean tokens: what ratio 1.0 means
    return {k: v for k, v in stated.items() if v is not None}


def _load_conditions(config: Mapping[str, Any]) -> dict[str, Any]:
    profiling, warmup = _phase(config, "profiling"), _phase(config, "warmup")
    stated: dict[str, Any] = {"concurrency": profiling.get("concurrency"), "num_prompts": profiling.get("requests"),
                              "warmup": warmup.get("requests") if warmup else None}
    rate = profiling.get("request_rate") or profiling.get("rate")
    if rate is not None:
        stated["request_rate"] = "inf" if math.isinf(float(rate)) else float(rate)
    elif profiling.get("type") == "concurrency":
        stated["request_rate"] = "inf"  # concurrency mode: a new request as soon as a slot frees
    return {k: v for k, v in stated.items() if v is not None}


def _endpoint_conditions(config: Mapping[str, Any]) -> dict[str, Any]:
    endpoint = config.get("endpoint") or {}
    stated: dict[str, Any] = {}
    if endpoint.get("type"):
        stated["backend"] = f"aiperf-{endpoint['type']}"
    extra = endpoint.get("extra") or {}
    if isinstance(extra, Mapping) and isinstance(extra.get("ignore_eos"), bool):
        stated["ignore_eos"] = extra["ignore_eos"]
    return stated


def config_conditions(config: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    stated = {**_dataset_conditions(config), **_load_conditions(config), **_endpoint_conditions(config)}
    conditions = {key: stated.get(key) for key in CONDITION_KEYS}
    unknown = tuple(k for k in CONDITION_KEYS if k not in stated and k not in DERIVED_KEYS)
    return conditions, unknown


def _file_facts(document: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    models = (config.get("models") or {}).get("items") or []
    names = [m.get("name") for m in models if isinstance(m, Mapping) and m.get("name")]
    endpoint = config.get("endpoint") or {}
    facts = {"client": f"aiperf {document.get('aiperf_version')}", "model": names[0] if len(names) == 1 else None,
             "streaming": endpoint.get("streaming"), "endpoint_type": endpoint.get("type")}
    return {k: v for k, v in facts.items() if v is not None}


# -- files ---------------------------------------------------------------------------------


def point_from_aiperf_json(data: bytes) -> tuple[ImportedPoint | LineProblem, dict[str, Any] | None]:
    """The point of one ``profile_export_aiperf.json``, and the parsed document (the raw record)."""
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return LineProblem(0, "not_json", {"detail": str(exc), "column": 0}), None
    if not isinstance(document, dict):
        return LineProblem(0, "not_object"), None
    problem = _aiperf_problem(document)
    if problem is not None:
        return problem, document
    config = document.get("input_config") or {}
    conditions, unknown = config_conditions(config)
    conditions.update(bench_tool="aiperf", bench_version=document.get("aiperf_version"))
    try:
        metrics = metric_columns(document, conditions.get("num_prompts"))
    except ValueError as exc:
        return LineProblem(0, "bad_value", {"detail": str(exc)}), document
    point = ImportedPoint(line=0, metrics=metrics, conditions=conditions, unknown=unknown,
                          record_format=AIPERF_FORMAT_JSON, file_facts=_file_facts(document, config))
    return point, document


def _aiperf_problem(document: Mapping[str, Any]) -> LineProblem | None:
    if document.get("was_cancelled") is True or document.get("is_complete") is False:
        return LineProblem(0, "aiperf_incomplete")
    count = (document.get("request_count") or {}).get("avg")
    if not count:
        return LineProblem(0, "all_failed")
    return None


def _csv_tables(text: str) -> dict[str, dict[str, str]]:
    """Every ``Metric,...`` table of the CSV merged: header → {column: cell}."""
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for cells in csv.reader(io.StringIO(text)):
        if not cells or not any(cells):
            header = None
        elif cells[0] == "Metric":
            header = cells
        elif header is not None:
            rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=False))
    return rows


def _csv_metrics(rows: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, float]]:
    metrics: dict[str, dict[str, float]] = {}
    for header, tag in CSV_HEADERS.items():
        cells = rows.get(header)
        if cells is None:
            continue
        values = {"avg": cells["Value"]} if "Value" in cells else dict(cells)
        metrics[tag] = {k: float(v) for k, v in values.items() if v not in ("", "N/A")}
    return metrics


def point_from_aiperf_csv(data: bytes) -> tuple[ImportedPoint | LineProblem, dict[str, Any] | None]:
    """The point of one ``profile_export_aiperf.csv`` (2-decimal figures, no configuration)."""
    try:
        rows = _csv_tables(data.decode("utf-8-sig"))
        metrics = _csv_metrics(rows)
    except (UnicodeDecodeError, csv.Error, ValueError) as exc:
        return LineProblem(0, "bad_value", {"detail": str(exc)}), None
    raw: dict[str, Any] = {"aiperf_csv": rows}
    if not (metrics.get("request_count") or {}).get("avg"):
        return LineProblem(0, "all_failed"), raw
    conditions, unknown = config_conditions({})
    conditions["bench_tool"] = "aiperf"
    point = ImportedPoint(line=0, metrics=metric_columns(metrics, None), conditions=conditions, unknown=unknown,
                          record_format=AIPERF_FORMAT_CSV, file_facts={"client": "aiperf"})
    return point, raw
