"""bench_serving ``--output-file`` JSONL (SGLang 0.4.x – 0.5.23, Python and Rust clients) → points.

One line is one run of the client (one concurrency).  What a line states becomes a
condition; what it does not state is listed as unknown, never filled in:

* ``input_len``/``output_len``/``random_range_ratio`` come from ``random_*`` only for the
  ``random`` and ``random-ids`` datasets (the client writes them for every dataset);
  ``sharegpt_output_len`` gives ``output_len`` for ShareGPT when it was set.
* ``max_concurrency: null`` means the client ran without a limit: ``concurrency`` is None
  and *not* unknown.
* ``num_prompts`` (and the ``requested`` column) is known only from ``--output-details``,
  whose arrays hold one entry per request sent (the client's ``random`` dataset may send
  fewer than ``--num-prompts``; this is what was sent); no record states it otherwise.
* ``tag`` exists from 0.5.9 on; older records leave it unknown.
* warmup, seed, dataset path, ``--tokenize-prompt``, chat template, EOS handling and
  cache flushing are never recorded: always unknown.

``Infinity``/``NaN`` (Python client) and ``"inf"`` (Rust client) both read as floats.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from domain.flags.schema import all_schemas
from domain.importer.lines import MAX_LINE_BYTES, Line
from domain.importer.slim import OMITTED_KEY, SLIM_ABOVE_BYTES, SlimError, slim_record
from domain.importer.types import CONDITION_KEYS, DERIVED_KEYS, ImportedPoint, LineProblem, RecordFormat, ServerFacts
from domain.results.bench_record import REQUIRED_KEYS, BadRecord, metrics_from_record

DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
OPTIONAL_GROUPS: Mapping[str, tuple[str, ...]] = {
    "details": (*DETAIL_KEYS, "cached_tokens", "cached_tokens_details"),
    "goodput": ("goodput_slos_ms", "request_goodput", "slo_attainment", "slo_attainment_by_metric"),
    "cache_report": ("cache_report",),
}
RUST_ONLY_KEYS = ("protocol",)
RANDOM_DATASETS = ("random", "random-ids")
# server_info keys that change while the server runs; left out of the launch fingerprint.
_LIVE_SERVER_KEYS = ("internal_states", "startup_time", "status", "emulator", "kv_events")


# -- one line ------------------------------------------------------------------------------


def decode_line(line: Line) -> dict[str, Any] | LineProblem | None:
    """The JSON object on ``line``, a problem, or None for a blank line.

    A line over SLIM_ABOVE_BYTES is read by domain.importer.slim (its per-request arrays
    counted, not built), so one long line costs about its own size in memory."""
    if line.too_long:
        return LineProblem(line.number, "too_long", {"size": line.size, "limit": MAX_LINE_BYTES})
    if len(line.data) > SLIM_ABOVE_BYTES:
        return _decode_long_line(line)
    try:
        text = line.data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        return LineProblem(line.number, "not_utf8")
    if not text.strip():
        return None
    try:
        record = json.loads(text)  # Python's json reads the bare Infinity/NaN the client writes
    except json.JSONDecodeError as exc:
        code = "truncated" if _ran_out_of_input(text, exc) else "not_json"
        return LineProblem(line.number, code, {"detail": exc.msg, "column": exc.colno})
    if not isinstance(record, dict):
        return LineProblem(line.number, "not_object")
    return record


_BOM = "\ufeff".encode()


def _decode_long_line(line: Line) -> dict[str, Any] | LineProblem:
    start = len(_BOM) if line.data.startswith(_BOM) else 0
    try:
        return slim_record(line.data, start)
    except SlimError as exc:
        code = "truncated" if exc.at_end and line.data[start:start + 1] == b"{" else "not_json"
        return LineProblem(line.number, code, {"detail": str(exc), "column": exc.position + 1})


_STRUCTURE = frozenset(',:{}[]" \t')


def _ran_out_of_input(text: str, exc: json.JSONDecodeError) -> bool:
    """The parser hit the end of the line: a record cut short (a client killed mid-write).

    A cut record starts like one (``{``) and fails either in a string that never ends (in
    one line a string can only end at the end of the text) or in its last, half-written
    token (``Infi``, ``12.``, ``"\\u00``): nothing structural follows the error."""
    if not text.lstrip().startswith("{"):
        return False
    if exc.msg.startswith("Unterminated string"):
        return True
    return not (set(text[exc.pos:].rstrip()) & _STRUCTURE)


def point_from_record(record: dict[str, Any], line: int,
                      server_cache: dict[str, ServerFacts] | None = None) -> ImportedPoint | LineProblem:
    """Typed columns and conditions for one record, or why it cannot be a point.

    ``server_cache`` lets the points of one launch share one :class:`ServerFacts` (its
    resolved arguments are hundreds of entries; a long file must not hold one per line)."""
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        return LineProblem(line, "missing_keys", {"keys": ", ".join(missing)})
    requested = requests_sent(record)
    try:
        metrics = metrics_from_record(record, requested=requested)
        conditions, unknown = record_conditions(record, requested)
    except BadRecord as exc:
        return LineProblem(line, "bad_value", {"detail": str(exc)})
    if metrics["completed"] is None:
        return LineProblem(line, "bad_value", {"detail": "completed is null"})
    if metrics["completed"] == 0:  # some clients still write a record when nothing succeeded
        return LineProblem(line, "all_failed")
    if refused_as_completed(record):
        return LineProblem(line, "refused_as_completed", {"completed": int(metrics["completed"])})
    return ImportedPoint(
        line=line, metrics=metrics, conditions=conditions, unknown=unknown,
        record_format=record_format(record), server=server_facts(record.get("server_info"), server_cache),
    )


def refused_as_completed(record: Mapping[str, Any]) -> bool:
    """A server that refuses a streamed request (SGLang answers 200 with an SSE error event)
    leaves bench_serving a "success" with no text: the record then claims every requested
    output token while none came back (``total_output_tokens_retokenized`` 0).  Its
    throughput and TTFT describe nothing that was served."""
    retokenized = record.get("total_output_tokens_retokenized")
    claimed = record.get("total_output_tokens")
    return retokenized == 0 and isinstance(claimed, int | float) and claimed > 0


# -- what a record states -------------------------------------------------------------------


def requests_sent(record: Mapping[str, Any]) -> int | None:
    """Requests the run sent, from the ``--output-details`` arrays (one entry per request),
    or from their element counts when a long line's arrays were left out (domain.importer.slim)."""
    omitted = record.get(OMITTED_KEY)
    for key in ("errors", "input_lens"):
        value = record.get(key)
        if isinstance(value, list):
            return len(value)
        if isinstance(omitted, Mapping) and isinstance(omitted.get(key), int):
            return int(omitted[key])
    return None


def _float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRecord(f"not a number: {value!r}")
    return float(value)


def _int(value: Any, key: str) -> int | None:
    number = _float(value)
    if number is None:
        return None
    if not number.is_integer():
        raise BadRecord(f"{key} is not a whole number: {value!r}")
    return int(number)


def _request_rate(value: Any) -> float | str | None:
    rate = _float(value)
    return "inf" if rate is not None and math.isinf(rate) else rate  # "inf": the plan's spelling


def _lengths(record: Mapping[str, Any], dataset: Any) -> dict[str, Any]:
    if dataset in RANDOM_DATASETS:
        return {
            "input_len": _int(record.get("random_input_len"), "random_input_len"),
            "output_len": _int(record.get("random_output_len"), "random_output_len"),
            "random_range_ratio": _float(record.get("random_range_ratio")),
        }
    if dataset == "sharegpt" and record.get("sharegpt_output_len") is not None:
        return {"output_len": _int(record["sharegpt_output_len"], "sharegpt_output_len")}
    return {}


def record_conditions(record: Mapping[str, Any], requested: int | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The conditions a record states and the names of those it leaves unknown."""
    dataset = record.get("dataset_name")
    stated: dict[str, Any] = {
        "backend": record.get("backend"),
        "dataset": dataset,
        "request_rate": _request_rate(record.get("request_rate")),
        **_lengths(record, dataset),
    }
    if "max_concurrency" in record:  # null: no limit, which is known
        stated["concurrency"] = _int(record["max_concurrency"], "max_concurrency")
    if "tag" in record:
        stated["tag"] = record["tag"]
    if requested is not None:
        stated["num_prompts"] = requested
    for key in ("backend", "dataset", "request_rate"):
        if stated[key] is None:
            del stated[key]
    conditions = {key: stated.get(key) for key in CONDITION_KEYS}
    unknown = tuple(k for k in CONDITION_KEYS if k not in stated and k not in DERIVED_KEYS)
    if not _is_rust(record):  # the harness, for its metric definitions (domain/results/definitions.py)
        conditions["bench_tool"] = "sglang.bench_serving"
    return conditions, unknown


def record_format(record: Mapping[str, Any]) -> RecordFormat:
    """The client family from the record's keys: 35 keys up to 0.5.3, 49 from 0.5.9 on."""
    omitted = record.get(OMITTED_KEY)
    present = set(record) | (set(omitted) if isinstance(omitted, Mapping) else set())
    extras = tuple(name for name, keys in OPTIONAL_GROUPS.items() if any(k in present for k in keys))
    optional = {k for keys in OPTIONAL_GROUPS.values() for k in keys} | set(RUST_ONLY_KEYS) | {OMITTED_KEY}
    base = sum(1 for key in present if key not in optional)
    rust = _is_rust(record)
    family = "sglang-rust" if rust else {35: "sglang-35", 49: "sglang-49"}.get(base, f"sglang-{base}")
    return RecordFormat(family=family, base_keys=base, extras=extras)


def _is_rust(record: Mapping[str, Any]) -> bool:
    """The Rust client's record (its own keys, its rate as text)."""
    return "protocol" in record or isinstance(record.get("request_rate"), str)


# -- server_info ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _flag_names_by_dest() -> dict[str, str]:
    """argparse dest → flag name, over every shipped SGLang schema (newest spelling wins)."""
    names: dict[str, str] = {}
    for schema in all_schemas():
        for spec in schema.specs:
            names[spec.dest] = spec.primary
    return names


def _fingerprint(info: Mapping[str, Any]) -> str:
    stable = {k: v for k, v in info.items() if k not in _LIVE_SERVER_KEYS}
    text = json.dumps(stable, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _optional_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def server_facts(info: Any, cache: dict[str, ServerFacts] | None = None) -> ServerFacts | None:
    """Facts from a record's ``server_info`` (absent before 0.5.9; null against servers ≤ 0.5.3)."""
    if not isinstance(info, Mapping):
        return None
    fingerprint = _fingerprint(info)
    if cache is not None and fingerprint in cache:
        return cache[fingerprint]
    names = _flag_names_by_dest()
    args = {names[key]: value for key, value in info.items() if key in names}
    emulator = info.get("emulator") if info.get("emulated") is True else None
    emulator = emulator if isinstance(emulator, Mapping) else {}
    facts = ServerFacts(
        version=_optional_str(info.get("version")),
        max_total_num_tokens=_optional_int(info.get("max_total_num_tokens")),
        model_path=_optional_str(info.get("model_path")),
        launch_command=_optional_str(info.get("launch_command")),
        emulated=info.get("emulated") is True,
        server_args=args,
        fingerprint=fingerprint,
        gpu_type=_optional_str(emulator.get("gpu")),
        gpu_count=_optional_int(emulator.get("gpu_count")),
    )
    if cache is not None:
        cache[fingerprint] = facts
    return facts
