"""A comparison (or one run) as llm-d benchmark reports v0.2.1: one report per measured point.

The structure is the one written down in :mod:`domain.importer.llmd_schema` (every report
this module writes passes its :func:`~domain.importer.llmd_schema.problems`), and
:mod:`domain.importer.llmd` reads it back: a run's reports form one YAML stream, and
importing that stream gives the run's points again, with their figures and conditions.

Where the schema has a field, the figure goes there (latencies in ms and ms/token, rates,
the requests sent and failed, the window's duration, the load, the engine and its
accelerator).  What it has no field for goes under ``scenario.load.native.config.benchdeck``
(the schema's place for a tool's own configuration): the conditions by benchdeck's names,
the requests asked for and the achieved concurrency, each metric's definition as this
harness computes it (:mod:`domain.results.definitions`), and the comparison's verdict
lines, which also open ``run.description``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import yaml

from domain.compare.comparison import Comparison
from domain.importer.llmd import NATIVE_KEY
from domain.importer.llmd_schema import WRITTEN_VERSION
from domain.importer.types import CONDITION_KEYS
from domain.results import definitions

LATENCY_FIELDS = {"ttft": ("time_to_first_token", "ms"), "tpot": ("time_per_output_token", "ms/token"),
                  "itl": ("inter_token_latency", "ms/token"), "e2e": ("request_latency", "ms")}
STAT_FIELDS = {"mean": "mean", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
RATE_FIELDS = {"request_rate": ("request_throughput", "queries/s"),
               "input_token_rate": ("input_throughput", "tokens/s"),
               "output_token_rate": ("output_throughput", "tokens/s"),
               "total_token_rate": ("total_throughput", "tokens/s")}
SOURCES = {"random-ids": "random", "random": "random", "sharegpt": "sampled"}


def _value(value: Any) -> Any:
    """A frame cell as plain data: None for missing, numpy scalars as Python's."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return value.item() if hasattr(value, "item") else value


# -- results ---------------------------------------------------------------------------------


def _statistics(row: Mapping[str, Any], name: str, units: str) -> dict[str, Any] | None:
    stats = {field: _value(row.get(f"{name}_{stat}_ms")) for stat, field in STAT_FIELDS.items()}
    if stats["mean"] is None:
        return None  # the schema's statistics need a mean
    return {"units": units, **{k: float(v) for k, v in stats.items() if v is not None}}


def _requests(row: Mapping[str, Any]) -> dict[str, Any]:
    completed, requested = _value(row.get("completed")), _value(row.get("requested"))
    if requested is None:
        return {"total": int(completed or 0)}
    return {"total": int(requested), "failures": int(requested) - int(completed or 0)}


def _results(row: Mapping[str, Any]) -> dict[str, Any]:
    latency = {field: stats for name, (field, units) in LATENCY_FIELDS.items()
               if (stats := _statistics(row, name, units)) is not None}
    rates = {field: {"units": units, "mean": float(v)} for field, (column, units) in RATE_FIELDS.items()
             if (v := _value(row.get(column))) is not None}
    return {"request_performance": {"aggregate": {"requests": _requests(row), "latency": latency,
                                                  "throughput": rates}}}


# -- scenario --------------------------------------------------------------------------------


def _sequence_length(length: Any, ratio: Any) -> dict[str, Any]:
    if length is None:
        return {"distribution": "other", "value": 0}
    if ratio is None or float(ratio) == 1.0:
        return {"distribution": "fixed", "value": int(length)}
    return {"distribution": "uniform", "value": int(length), "min": max(int(int(length) * float(ratio)), 1),
            "max": int(length)}


def _load(row: Mapping[str, Any], native: dict[str, Any]) -> dict[str, Any]:
    ratio = _value(row.get("random_range_ratio"))
    conc, rate = _value(row.get("concurrency")), _value(row.get("request_rate"))
    std: dict[str, Any] = {
        "tool": _value(row.get("bench_tool")) or "unknown", "tool_version": _value(row.get("bench_version")) or "",
        "source": SOURCES.get(str(_value(row.get("dataset"))), "unknown"),
        "input_seq_len": _sequence_length(_value(row.get("input_len")), ratio),
        "output_seq_len": _sequence_length(_value(row.get("output_len")), ratio),
        "concurrency": int(conc) if conc is not None else math.inf,
    }
    if isinstance(rate, int | float) and math.isfinite(rate) and rate > 0:
        std["rate_qps"] = float(rate)
    return {"metadata": {"schema_version": "0.0.1", "cfg_id": _digest(native["conditions"])},
            "standardized": std, "native": {"config": {NATIVE_KEY: native}}}


def _stack(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    model = _value(row.get("model"))
    if model is None:
        return []
    args = row.get("server_args") or {}
    tp = args.get("tp-size") or args.get("tensor-parallel-size") or 1
    return [{
        "metadata": {"schema_version": "0.0.1", "label": "engine-0", "cfg_id": _digest(args)},
        "standardized": {
            "kind": "inference_engine", "tool": _engine_tool(row),
            "tool_version": _value(row.get("engine_version")) or "", "role": "replica", "replicas": 1,
            "model": {"name": str(model)},
            "accelerator": {"model": _value(row.get("gpu_type")) or "unknown",
                            "count": int(_value(row.get("gpu_count")) or 0), "parallelism": {"tp": int(tp)}},
        },
        "native": {"args": {f"--{flag}": value for flag, value in args.items()}},
    }]


def _engine_tool(row: Mapping[str, Any]) -> str:
    """The engine as a report names it: benchdeck's SGLang emulator is ``emulator`` (what the
    importer reads as emulated: its output never passes as a measurement)."""
    engine = _value(row.get("engine")) or "unknown"
    return "emulator" if engine == "sglang" and _value(row.get("source")) == "emulated" else str(engine)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


# -- one report per point --------------------------------------------------------------------


def _native(row: Mapping[str, Any], verdict: list[str], lang: str) -> dict[str, Any]:
    conditions = {k: v for k in CONDITION_KEYS if (v := _value(row.get(k))) is not None}
    harness = _value(row.get("bench_tool"))
    return {
        "run_uid": f"benchdeck-run-{int(row['run_id'])}", "run_name": _value(row.get("run_name")),
        "source": _value(row.get("source")), "conditions": conditions,
        # The stack's args are every flag the run set, absent ones at their defaults (as benchdeck knows them).
        "server_args_complete": bool(_value(row.get("server_args_known"))),
        "metrics": {"requested": _value(row.get("requested")),
                    "achieved_concurrency": _value(row.get("achieved_concurrency"))},
        "metric_definitions": {aspect: _definition(harness, aspect, lang) for aspect in definitions.ASPECTS},
        "verdict": verdict,
    }


def _definition(harness: Any, aspect: str, lang: str) -> dict[str, Any]:
    ident = definitions.definition(harness, aspect)
    text = definitions.value_text(definitions.condition(aspect), f"{harness}|{ident or '?'}", lang)
    return {"harness": harness, "definition": ident, "text": text}


def point_report(row: Mapping[str, Any], verdict: list[str], lang: str) -> dict[str, Any]:
    """The v0.2.1 report of one point (a row of the points frame)."""
    native = _native(row, verdict, lang)
    duration = _value(row.get("duration_s"))
    run: dict[str, Any] = {"uid": f"benchdeck-point-{_value(row.get('point_id'))}", "eid": native["run_uid"],
                           "description": " | ".join(verdict) or str(native["run_name"] or ""),
                           "keywords": ["benchdeck", str(native["source"])]}
    if duration is not None:
        run["time"] = {"duration": f"PT{float(duration)!r}S"}
    scenario: dict[str, Any] = {"load": _load(row, native)}
    if stack := _stack(row):
        scenario["stack"] = stack
    return {"version": WRITTEN_VERSION, "run": run, "scenario": scenario, "results": _results(row)}


def run_reports(frame: pd.DataFrame, run_id: int, verdict: list[str], lang: str) -> list[dict[str, Any]]:
    rows = frame[frame["run_id"] == run_id].sort_values(["scenario", "concurrency", "repeat_idx"], kind="stable")
    return [point_report(row, verdict, lang) for row in rows.to_dict("records")]


def comparison_reports(c: Comparison) -> dict[int, list[dict[str, Any]]]:
    """Per run of the comparison (baseline first): its reports, each carrying the verdict lines."""
    verdict = list(c.verdict_lines)
    return {run_id: run_reports(c.frame, run_id, verdict, c.lang) for run_id in [c.baseline_run_id, *c.run_ids]}


def reports_yaml(reports: list[dict[str, Any]]) -> bytes:
    """A YAML stream, one document per report (what domain.importer.llmd reads back)."""
    return yaml.safe_dump_all(reports, sort_keys=False, allow_unicode=True).encode("utf-8")
