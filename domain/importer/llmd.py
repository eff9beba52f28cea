"""The llm-d benchmark report (v0.2 / v0.2.1) → points: one report is one measured point.

A file holds one report (JSON or YAML), several (a YAML stream of documents, or a JSON
list: what ``runner export --format llmd-report`` writes for a run), each checked first
against the structure in :mod:`domain.importer.llmd_schema`; a report that departs from it
is refused with the path of each problem.

What maps onto benchdeck's conditions (everything else stays unknown):

* the harness: ``scenario.load.standardized.tool`` → ``bench_tool`` and its ``tool_version`` →
  ``bench_version``; the harness decides which report field is benchdeck's TPOT and ITL
  (:data:`LATENCY_FIELDS`) and, through :mod:`domain.results.definitions`, what they mean;
* the load: ``concurrency`` (infinite: no limit), ``rate_qps`` → ``request_rate`` (absent with
  a concurrency: a closed loop, ``inf``), fixed ``input_seq_len``/``output_seq_len`` → the
  lengths and range ratio 1.0, ``source`` → ``dataset`` (``<tool>-<source>``), the
  requests sent (``requests.total``) → ``num_prompts``;
* the stack's ``inference_engine``: the model, the accelerator (GPU type from its model
  name, count), the engine and its version → facts shown as "from the file"; its native
  args too, for SGLang engines, when the report says they are the complete set;
* benchdeck's own reports also carry, under ``scenario.load.native.config.benchdeck``, the
  conditions and figures the schema has no field for (seed, warmup, achieved concurrency,
  ...): read back, so an export imports as the run it came from.

The schema has no per-request arrays; a report carries aggregates only, so its points have
no per-request samples ("no per-request data").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from domain.importer.llmd_schema import problems as schema_problems
from domain.importer.types import CONDITION_KEYS, DERIVED_KEYS, ImportedPoint, LineProblem, RecordFormat
from domain.results.bench_record import LATENCIES, METRIC_COLUMNS, STATS

NATIVE_KEY = "benchdeck"
# benchdeck column → report latency field, per harness (default: by name).  llm-d's AIPerf
# converter writes AIPerf's inter_token_latency, which is (latency − TTFT) / (tokens − 1)
# per request: benchdeck's TPOT quantity, so it is read as TPOT and ITL stays unknown.
DEFAULT_LATENCY_FIELDS = {"ttft": "time_to_first_token", "tpot": "time_per_output_token",
                          "itl": "inter_token_latency", "e2e": "request_latency"}
LATENCY_FIELDS = {"aiperf": {**DEFAULT_LATENCY_FIELDS, "tpot": "inter_token_latency", "itl": None}}
STAT_FIELDS = {"mean": "mean", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
TO_MS = {"ms": 1.0, "s": 1000.0, "ms/token": 1.0, "s/token": 1000.0}
THROUGHPUT_FIELDS = {"request_throughput": "request_rate", "input_throughput": "input_token_rate",
                     "output_throughput": "output_token_rate", "total_throughput": "total_token_rate"}
SGLANG_TOOLS = ("sglang", "emulator")


def looks_like_llmd(head: bytes, file_name: str = "") -> bool:
    """A report: JSON naming ``run`` and ``results``, or YAML with a top-level ``results:``/``run:``."""
    stripped = head.lstrip(b"\xef\xbb\xbf \r\n\t")
    if stripped.startswith((b"{", b"[")):
        return b'"results"' in head and b'"run"' in head and b'"aiperf_version"' not in head
    yaml_name = file_name.lower().endswith((".yaml", ".yml"))
    return yaml_name and re.search(rb"^(results|run|version):", head, re.MULTILINE) is not None


def documents(data: bytes) -> list[Any] | LineProblem:
    """The reports of a file: one, a YAML stream, or a JSON list."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return LineProblem(0, "not_utf8", {"detail": str(exc)})
    try:
        parsed = json.loads(text) if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(text))
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        return LineProblem(0, "not_json", {"detail": str(exc).splitlines()[0], "column": 0})
    if isinstance(parsed, dict):
        return [parsed]
    return [d for d in parsed if d is not None] if isinstance(parsed, list) else [parsed]


def _get(document: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(document, Mapping):
            return None
        document = document.get(key)
    return document


# -- metrics ---------------------------------------------------------------------------------


def _stat_ms(stats: Mapping[str, Any] | None, key: str) -> float | None:
    if not stats or stats.get(key) is None:
        return None
    return float(stats[key]) * TO_MS[stats["units"]]


def _rate(stats: Mapping[str, Any] | None) -> float | None:
    return float(stats["mean"]) if stats and stats.get("mean") is not None else None


def _duration_s(text: Any) -> float | None:
    """ISO-8601 ``PT49.97S`` / ``PT1M2.5S`` → seconds."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([0-9.eE+-]+)S)?", str(text or ""))
    if not match or not any(match.groups()):
        return None
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds if (hours or minutes) else float(match.group(3))


def _requests(aggregate: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(completed, requested): requests sent less the failed and incomplete ones."""
    requests = aggregate.get("requests") or {}
    total = requests.get("total")
    if total is None:
        return None, None
    lost = (requests.get("failures") or 0) + (requests.get("incomplete") or 0)
    return int(total) - int(lost), int(total)


def report_metrics(report: Mapping[str, Any], tool: str | None, native: Mapping[str, Any]) -> dict[str, Any]:
    aggregate = _get(report, "results", "request_performance", "aggregate") or {}
    latency, throughput = aggregate.get("latency") or {}, aggregate.get("throughput") or {}
    completed, requested = _requests(aggregate)
    stated = native.get("metrics") or {}
    columns: dict[str, Any] = {
        "completed": completed, "requested": stated.get("requested", requested),
        "duration_s": _duration_s(_get(report, "run", "time", "duration")),
        "achieved_concurrency": stated.get("achieved_concurrency"),
        **{column: _rate(throughput.get(name)) for column, name in THROUGHPUT_FIELDS.items()},
    }
    fields = LATENCY_FIELDS.get(str(tool), DEFAULT_LATENCY_FIELDS)
    for name in LATENCIES:
        field_name = fields[name]
        stats = latency.get(field_name) if field_name else None
        for stat in STATS:
            columns[f"{name}_{stat}_ms"] = _stat_ms(stats, STAT_FIELDS[stat])
    return {column: columns.get(column) for column in METRIC_COLUMNS}


# -- conditions ------------------------------------------------------------------------------


def _fixed(length: Any) -> int | None:
    if not isinstance(length, Mapping) or length.get("distribution") != "fixed":
        return None
    value = length.get("value")
    return int(value) if isinstance(value, int | float) and float(value).is_integer() else None


def _concurrency(value: Any) -> tuple[bool, int | None]:
    """(stated, value): infinite concurrency is stated, as no limit (None)."""
    if value is None:
        return False, None
    if isinstance(value, str) or (isinstance(value, float) and math.isinf(value)):
        return True, None
    return True, int(value)


def load_conditions(load: Mapping[str, Any], total: int | None) -> dict[str, Any]:
    std = load.get("standardized") or {}
    stated: dict[str, Any] = {"input_len": _fixed(std.get("input_seq_len")),
                              "output_len": _fixed(std.get("output_seq_len")), "num_prompts": total}
    if stated["input_len"] is not None and stated["output_len"] is not None:
        stated["random_range_ratio"] = 1.0
    known, concurrency = _concurrency(std.get("concurrency"))
    if known:
        stated["concurrency"] = concurrency
    if std.get("rate_qps") is not None:
        stated["request_rate"] = float(std["rate_qps"])
    elif concurrency is not None:
        stated["request_rate"] = "inf"  # a concurrency without a rate: the next request as a slot frees
    if std.get("source") in ("random", "sampled") and std.get("tool"):
        stated["dataset"] = f"{std['tool']}-{std['source']}"
    return {k: v for k, v in stated.items() if v is not None or k == "concurrency"}


def report_conditions(report: Mapping[str, Any], native: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    load = _get(report, "scenario", "load") or {}
    total = _get(report, "results", "request_performance", "aggregate", "requests", "total")
    stated = {**load_conditions(load, total), **(native.get("conditions") or {})}
    conditions = {key: stated.get(key) for key in CONDITION_KEYS}
    unknown = tuple(k for k in CONDITION_KEYS if k not in stated and k not in DERIVED_KEYS)
    std = load.get("standardized") or {}
    conditions.update(bench_tool=std.get("tool") or None, bench_version=std.get("tool_version") or None)
    return conditions, unknown


# -- the stack -------------------------------------------------------------------------------


def gpu_type(accelerator_model: str) -> str:
    """``NVIDIA-H100-80GB-HBM3`` → ``H100``: the first word that names a GPU generation."""
    for word in re.split(r"[\s_\-]+", accelerator_model):
        if re.fullmatch(r"[A-Z]{1,3}[0-9]{2,4}[A-Za-z]*", word):
            return word
    return accelerator_model


def _engine(tool: str) -> str:
    lowered = tool.lower()
    for engine in ("sglang", "emulator", "vllm", "trt-llm", "dynamo"):
        if engine in lowered:
            return engine
    return "other"


def stack_facts(report: Mapping[str, Any], complete_args: bool = False) -> dict[str, Any]:
    """The engine component's facts.  Its native args become the run's server args only when
    the report says they are the whole set the run had (benchdeck's own export of a run whose
    flags it knows): a flag absent from them is then at its default, not unknown."""
    engines = [c for c in _get(report, "scenario", "stack") or []
               if _get(c, "standardized", "kind") == "inference_engine"]
    if len(engines) != 1:
        return {}
    std, native = engines[0]["standardized"], engines[0].get("native") or {}
    accelerator = std.get("accelerator") or {}
    engine = _engine(std.get("tool") or "")
    facts: dict[str, Any] = {
        "model": _get(std, "model", "name") or None, "engine": engine if std.get("tool") else None,
        "engine_version": std.get("tool_version") or None,
        "gpu_type": gpu_type(accelerator["model"]) if accelerator.get("model") else None,
        "gpu_count": accelerator.get("count") or None,
    }
    if engine in SGLANG_TOOLS and native.get("args") and complete_args:
        facts["server_args"] = {str(k).lstrip("-"): v for k, v in native["args"].items()}
    return {k: v for k, v in facts.items() if v is not None}


def _config_model(report: Mapping[str, Any]) -> dict[str, Any]:
    """The model AIPerf's own configuration names (llm-d's AIPerf converter keeps it as the
    native config, without a stack), when it names one."""
    names = _get(report, "scenario", "load", "native", "config", "endpoint", "model_names")
    return {"model": names[0]} if isinstance(names, list) and len(names) == 1 and isinstance(names[0], str) else {}


# -- one report ------------------------------------------------------------------------------


def _record_format(report: Mapping[str, Any], tool: str | None) -> RecordFormat:
    return RecordFormat(family="llmd-report", base_keys=0,
                        extras=(f"v{report.get('version') or '0.2'}", str(tool or "unknown")))


def point_from_report(report: Any, index: int) -> ImportedPoint | LineProblem:
    """``index`` (1-based) stands for the line: which report of the file a problem is in."""
    found = schema_problems(report)
    if found:
        return LineProblem(index, "bad_value", {"detail": "; ".join(found[:3]) + (" …" if len(found) > 3 else "")})
    native = _get(report, "scenario", "load", "native", "config", NATIVE_KEY) or {}
    tool = _get(report, "scenario", "load", "standardized", "tool")
    conditions, unknown = report_conditions(report, native)
    metrics = report_metrics(report, tool, native)
    if metrics["completed"] == 0:  # None: the report does not count requests (a published figure)
        return LineProblem(index, "all_failed")
    facts = {**_config_model(report), **stack_facts(report, bool(native.get("server_args_complete"))),
             "client": f"{tool or '?'} (llm-d report v{report.get('version') or '0.2'})"}
    if native.get("run_uid"):
        facts["experiment_id"] = native["run_uid"]
    return ImportedPoint(line=index, metrics=metrics, conditions=conditions, unknown=unknown,
                         record_format=_record_format(report, tool), file_facts=facts)


def points_from_file(data: bytes) -> tuple[list[ImportedPoint], list[LineProblem], list[Any]]:
    """Every report of a file as a point (or a problem), and the parsed reports (the raw records)."""
    parsed = documents(data)
    if isinstance(parsed, LineProblem):
        return [], [parsed], []
    points: list[ImportedPoint] = []
    problems: list[LineProblem] = []
    for index, report in enumerate(parsed, start=1):
        outcome = point_from_report(report, index)
        (points if isinstance(outcome, ImportedPoint) else problems).append(outcome)  # type: ignore[arg-type]
    return points, problems, parsed
