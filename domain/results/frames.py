"""DB rows → the "points frame" the analysis, comparability and export functions take.

One row per measured point: run identity, every condition the point was measured under
(flattened from its stored ``conditions``), the typed metrics, and the telemetry
summaries.  What a row does not know stays ``None`` (imported runs), never a guess.
Measured and emulated runs do know some things implicitly, written down here:
- ``model_revision``: the ``--revision`` flag, else the repo's default branch, which is
  what SGLang loads when none is given;
- ``dtype``: FP8 when the checkpoint is an FP8 one or ``--quantization`` says so, else
  ``--dtype`` (``auto`` when unset);
- ``load_format``: ``--load-format`` (``auto`` when unset; ``dummy`` = random weights);
- ``network``: ``single-host`` for runs the runner measured on one host.
Imported runs whose file carried ``server_info`` know their resolved flags as well.

From the telemetry summaries (``db/queries.py`` POINTS_FOR_COMPARISON, written by
``runner/telemetry.py::summarise``): ``gpu_clock_event_reasons_any`` (NVML's clock-event
reasons OR-ed over the samples and GPUs of the measured window) and
``server_prompt_tokens`` / ``server_generation_tokens`` (the server's own token counters'
increase over that window), ``gpu_power_w_sum`` / ``gpu_power_samples`` / ``gpu_idle_share``
(the run's GPUs' power and idle share over that window, whence :mod:`domain.results.energy`'s
J/token and J/request).  ``host_healthy`` / ``host_health_detail`` are read from the
attempt's host record by :func:`domain.results.validity.host_health` (None: it cannot say).
``point_id`` is the point's row id in ``sweep_points``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from domain.plan.topology import snapshot_gpus
from domain.results.bench_record import METRIC_COLUMNS
from domain.results.energy import energy_columns
from domain.results.validity import host_health
from domain.results.workload_columns import workload_columns

CONDITION_COLUMNS = (
    "input_len", "output_len", "random_range_ratio", "num_prompts", "warmup", "dataset", "seed", "request_rate",
    "apply_chat_template", "thinking_mode", "ignore_eos", "bench_tool", "bench_version", "backend",
    "accept_length", "pinned_acceptance",  # speculative plans only (domain/results/speculative.py)
)
DEFAULT_REVISION = "main (default)"


def _json(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, str):
        return json.loads(value)
    return value


def _dtype(model: str | None, args: Mapping[str, Any], known: bool) -> str | None:
    quantization = str(args.get("quantization") or "")
    if (model and "fp8" in model.lower()) or quantization.startswith(("fp8", "w8a8_fp8")):
        return "fp8"
    if quantization:
        return quantization
    return str(args.get("dtype", "auto")) if known else None


def _record_totals(record: Mapping[str, Any]) -> tuple[Any, Any]:
    return record.get("total_input_tokens"), record.get("total_output_tokens")


def _engine_label(engine: object, conditions: Mapping[str, Any]) -> object:
    """An external run's engine as the checklist and verdicts show it: the declared engine,
    marked as declared (runner/external.py records it per point); others as stored."""
    declared = conditions.get("declared_engine")
    if engine == "external" and declared:
        return f"external: {declared} (declared)"
    return engine


def point_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One DB row (db.Store.points_for_comparison) as one points-frame row."""
    conditions = _json(row.get("conditions"), {})
    args = _json(row.get("server_args"), {})
    facts = _json(row.get("startup_facts"), {})
    environment = _json(row.get("environment"), {})
    # Runs we measured know their full flag set; so do imports whose file carried the server's
    # resolved args (server_info).  Only then is an unset flag known to be at its default.
    # An external server's flags are not benchdeck's to know: unset there is unknown, not a default.
    measured_here = (row.get("source") in ("measured", "emulated") and row.get("engine") != "external") or (
        environment.get("provenance", {}).get("server_args") == "file")
    record = _json(row.get("raw_record"), {})
    total_in, total_out = _record_totals(record)
    gpu_unavailable = row.get("gpu_unavailable")
    topology = _json(row.get("topology"), {})
    healthy, health_detail = host_health(_json(row.get("host_info"), None))
    out: dict[str, Any] = {
        "point_id": _point_id(row.get("id")),
        "run_id": int(row["run_id"]), "run_name": row.get("run_name"), "source": row.get("source"),
        "engine": _engine_label(row.get("engine"), conditions), "model": row.get("model"),
        # The version the runner launched is in the point; the plan may have left it to the host.
        "engine_version": conditions.get("engine_version") or row.get("engine_version"),
        "model_revision": args.get("revision", DEFAULT_REVISION if measured_here else None),
        "dtype": _dtype(row.get("model"), args, measured_here),
        "load_format": args.get("load-format", "auto" if measured_here else None),
        "gpu_type": row.get("gpu_type"), "gpu_count": row.get("gpu_count"),
        # What per-GPU figures divide by: the GPUs the topology's servers use, not the plan's count.
        "gpus_used": snapshot_gpus(topology, row.get("gpu_count")),
        "network": "single-host" if row.get("host_info") else None,
        # The label carries the kind, the P:D ratio and the GPU split (domain/plan/topology.py).
        "topology": _topology_label(topology),
        "server_args": args, "server_args_known": measured_here,
        "tags": _json(row.get("tags"), []), "submitted_at": row.get("submitted_at"),
        "host_healthy": healthy, "host_health_detail": health_detail,
        "max_total_num_tokens": facts.get("max_total_num_tokens"),
        "scenario": row["scenario"], "concurrency": int(row["concurrency"]), "repeat_idx": int(row["repeat_idx"]),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "gpu_util_mean": row.get("gpu_util_mean"), "gpu_mem_peak_gb": row.get("gpu_mem_peak_gb"),
        "kv_usage_peak": row.get("kv_usage_peak"),
        "gpu_clock_event_reasons_max": row.get("gpu_clock_event_reasons_max"),
        "gpu_clock_event_reasons_any": row.get("gpu_clock_event_reasons_any"),
        "server_prompt_tokens": row.get("server_prompt_tokens"),
        "server_generation_tokens": row.get("server_generation_tokens"),
        "telemetry_available": not gpu_unavailable if gpu_unavailable is not None else False,
    }
    for column in CONDITION_COLUMNS:
        out[column] = conditions.get(column)
    out["tokenizer"] = tokenizer_label(conditions.get("tokenizer"))
    out.update(workload_columns(conditions, record))  # workloads, arrivals, cache
    for column in METRIC_COLUMNS:
        out[column] = row.get(column)
    out.update(gpu_power_w_sum=row.get("gpu_power_w_sum"), gpu_power_samples=row.get("gpu_power_samples"),
               gpu_idle_share=row.get("gpu_idle_share"))
    out.update(energy_columns(out))  # J/token and J/request from the power above (energy.py)
    return out


def _point_id(value: Any) -> int | None:
    return None if value is None else int(value)


# pandas 3 keeps "str" columns in Arrow arrays, whose element access builds an Arrow scalar
# each time; the analyses read the points row by row (groups, records, lookups).  The same
# dtype kept as Python objects (same values, same NaN for missing; the comparison's tables
# came out equal) made a nine-run comparison 0.59 -> 0.53 s here, a three-run one 0.28 ->
# 0.27 s (medians of 9, alternating, on the bench's 10,000-run store).
_TEXT = pd.StringDtype("python", na_value=float("nan"))


def points_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame([point_row(r) for r in rows])
    text = {column: _TEXT for column, dtype in frame.dtypes.items() if isinstance(dtype, pd.StringDtype)}
    return frame.astype(text) if text else frame


def _topology_label(topology: dict[str, Any]) -> str | None:
    return topology.get("label") or topology.get("kind")


def tokenizer_label(recorded: Any) -> str | None:
    """The client tokenizer a point recorded (runner/bench_client.py ``condition()``) as one
    comparable value: its source, vocabulary size and content hash; None when unrecorded
    (imports, older points)."""
    if not isinstance(recorded, Mapping) or not recorded.get("sha256"):
        return None
    return f"{recorded.get('source')} · {recorded.get('vocab_size')} ids · {recorded['sha256']}"

