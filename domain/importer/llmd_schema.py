"""The llm-d benchmark report, v0.2 and v0.2.1, as a structure written down here, and a checker.

Written from the published definition (``llmdbenchmark/analysis/benchmark_report/`` in
llm-d/llm-d-benchmark: ``schema_v0_2.py``, ``schema_v0_2_1.py``, ``schema_v0_2_components.py``,
``base.py``); no file of that project is copied.  What the definition says, as this module
encodes it:

* every object refuses keys it does not name, except ``Statistics`` (extra keys ignored),
  ``results.observability`` and a ``generic`` stack component (extra keys allowed);
* a ``Statistics`` has ``units`` and ``mean`` (a number), every other field optional;
  each place a statistic sits allows only some units (:data:`UNITS`);
* required: ``run.uid``, ``results``; inside a ``scenario.load``: ``metadata``,
  ``standardized`` (``tool``, ``tool_version``, ``source``, ``input_seq_len``) and
  ``native``; inside a stack component: ``metadata`` (``label``, ``cfg_id``),
  ``standardized`` (told apart by ``kind``) and ``native``;
* ``load.standardized.concurrency`` is an integer ≥ 1 or infinity; ``rate_qps`` > 0.

v0.2.1 adds, all optional: ``requests.request_size``, ``requests.multimodal`` and the
``image_rate``/``video_rate``/``audio_rate`` throughputs.  :func:`problems` returns one line
per violation, each naming its path (``results.request_performance.aggregate.latency.
time_to_first_token.units``); an empty list means the document has this structure.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VERSIONS = ("0.2", "0.2.1")
WRITTEN_VERSION = "0.2.1"

UNITS = {
    "quantity": ("count", "pixels"),
    "portion": ("percent", "fraction"),
    "ratio": ("ratio",),
    "time": ("ms", "s"),
    "memory": ("bytes", "MB", "GB", "TB", "MiB", "GiB", "TiB"),
    "gen_latency": ("ms/token", "s/token"),
    "gen_throughput": ("tokens/s",),
    "request_throughput": ("queries/s",),
    "media_throughput": ("images/s", "videos/s", "audios/s"),
    "power": ("Watts",),
}
ALL_UNITS = (*dict.fromkeys(u for group in UNITS.values() for u in group),
             "Mbit/s", "Gbit/s", "Tbit/s", "GiB/s", "MB/s", "GB/s", "TB/s")
STAT_KEYS = ("mean", "mode", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
             "p99p9", "max")


# -- the building blocks --------------------------------------------------------------------

Check = Callable[[Any, str], list[str]]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(minimum: float | None = None, *, strict_min: bool = False, integer: bool = False) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not _is_number(value) or (integer and not isinstance(value, int)):
            return [f"{path}: expected {'an integer' if integer else 'a number'}, found {value!r}"]
        if minimum is not None and (value <= minimum if strict_min else value < minimum):
            return [f"{path}: {value!r} is below the minimum ({'>' if strict_min else '≥'} {minimum})"]
        return []
    return check


def text(value: Any, path: str) -> list[str]:
    return [] if isinstance(value, str) else [f"{path}: expected text, found {value!r}"]


def boolean(value: Any, path: str) -> list[str]:
    return [] if isinstance(value, bool) else [f"{path}: expected true or false, found {value!r}"]


def anything(value: Any, path: str) -> list[str]:
    return []


def timestamp(value: Any, path: str) -> list[str]:
    if isinstance(value, dt.datetime):
        return []
    try:
        dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return [f"{path}: not an ISO-8601 timestamp: {value!r}"]
    return []


def one_of(*values: str) -> Check:
    def check(value: Any, path: str) -> list[str]:
        return [] if value in values else [f"{path}: {value!r} is not one of {', '.join(values)}"]
    return check


def list_of(item: Check) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [p for i, v in enumerate(value) for p in item(v, f"{path}[{i}]")]
    return check


def mapping_of(item: Check) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, Mapping):
            return [f"{path}: expected an object"]
        return [p for k, v in value.items() for p in item(v, f"{path}.{k}")]
    return check


@dataclass(frozen=True)
class Obj:
    """An object: its fields (name → check), which are required, whether others may appear."""

    fields: Mapping[str, Check]
    required: frozenset[str] = frozenset()
    extra: bool = False
    after: Callable[[Mapping[str, Any], str], list[str]] | None = field(default=None)

    def __call__(self, value: Any, path: str) -> list[str]:
        if not isinstance(value, Mapping):
            return [f"{path or 'report'}: expected an object"]
        out = [f"{_join(path, name)}: required" for name in sorted(self.required) if name not in value]
        for name, item in value.items():
            check = self.fields.get(name)
            if check is None:
                if not self.extra:
                    out.append(f"{_join(path, str(name))}: not a field of the schema")
            elif item is not None or name in self.required:
                out += check(item, _join(path, str(name)))
        if not out and self.after is not None:
            out += self.after(value, path)
        return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def obj(required: Sequence[str] = (), *, extra: bool = False,
        after: Callable[[Mapping[str, Any], str], list[str]] | None = None, **fields: Check) -> Obj:
    return Obj(fields, frozenset(required), extra, after)


def statistics(kind: str) -> Check:
    """A ``Statistics`` whose units must be of ``kind`` (:data:`UNITS`); extra keys are ignored."""
    base = obj(("units", "mean"), extra=True, units=one_of(*ALL_UNITS), mean=number(),
               stddev=number(0), **{k: number() for k in STAT_KEYS if k not in ("mean", "stddev")})

    def check(value: Any, path: str) -> list[str]:
        out = base(value, path)
        if not out and value["units"] not in UNITS[kind]:
            out.append(f"{path}.units: {value['units']!r} must be one of {', '.join(UNITS[kind])}")
        return out
    return check


# -- scenario --------------------------------------------------------------------------------

def _concurrency(value: Any, path: str) -> list[str]:
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return []
    if isinstance(value, str) and value.strip().lower() in (".inf", "inf", "infinity"):
        return []
    return number(1, integer=True)(value, path)


SEQUENCE_LENGTH = obj(("distribution", "value"), distribution=one_of("fixed", "gaussian", "uniform", "other"),
                      value=number(0), std_dev=number(0), min=number(0, integer=True), max=number(1, integer=True))
LOAD_STANDARDIZED = obj(
    ("tool", "tool_version", "source", "input_seq_len"),
    tool=text, tool_version=text, parallelism=number(1, integer=True), source=one_of("random", "sampled", "unknown"),
    stage=number(0, integer=True), input_seq_len=SEQUENCE_LENGTH, output_seq_len=SEQUENCE_LENGTH,
    prefix=obj(("prefix_len", "num_groups", "num_users_per_group", "num_prefixes"), prefix_len=SEQUENCE_LENGTH,
               num_groups=number(1, integer=True), num_users_per_group=number(1, integer=True),
               num_prefixes=number(1, integer=True)),
    multi_turn=obj(enabled=boolean, max_turns=SEQUENCE_LENGTH),
    rate_qps=number(0, strict_min=True), concurrency=_concurrency,
)
NATIVE = obj(args=mapping_of(anything), envars=mapping_of(anything), config=anything)
LOAD = obj(("metadata", "standardized", "native"),
           metadata=obj(schema_version=text, cfg_id=text, description=text),
           standardized=LOAD_STANDARDIZED, native=NATIVE)

_PARALLELISM = obj(tp=number(0, integer=True), dp=number(0, integer=True), dp_local=number(0, integer=True),
                   workers=number(0, integer=True), ep=number(1, integer=True), pp=number(1, integer=True))
INFERENCE_ENGINE = obj(
    ("kind", "tool", "tool_version", "role", "replicas", "model", "accelerator"),
    kind=one_of("inference_engine"), tool=text, tool_version=text, role=one_of("replica", "prefill", "decode"),
    replicas=number(1, integer=True), model=obj(("name",), name=text),
    accelerator=obj(("model", "count", "parallelism"), model=text, count=number(0, integer=True),
                    parallelism=_PARALLELISM),
)
GENERIC = obj(("kind", "tool", "tool_version"), extra=True, kind=one_of("generic"), tool=text, tool_version=text)


def _standardized_component(value: Any, path: str) -> list[str]:
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if kind == "inference_engine":
        return INFERENCE_ENGINE(value, path)
    if kind == "generic":
        return GENERIC(value, path)
    return [f"{path}.kind: {kind!r} is not one of generic, inference_engine"]


COMPONENT = obj(("metadata", "standardized", "native"),
                metadata=obj(("label", "cfg_id"), schema_version=text, label=text, cfg_id=text, description=text),
                standardized=_standardized_component, native=NATIVE)
SCENARIO = obj(stack=list_of(COMPONENT), load=LOAD)

# -- results ---------------------------------------------------------------------------------

_MEDIA = {"count": statistics("quantity"), "filesize": statistics("memory")}
_VISUAL = {**_MEDIA, "pixels": statistics("quantity"), "aspect_ratio": statistics("ratio")}
MULTIMODAL = obj(image=Obj(_VISUAL), video=Obj({**_VISUAL, "frames": statistics("quantity")}),
                 audio=Obj({**_MEDIA, "duration": statistics("time")}))
REQUESTS = obj(("total",), total=number(0, integer=True), failures=number(0, integer=True),
               incomplete=number(0, integer=True), input_length=statistics("quantity"),
               output_length=statistics("quantity"), request_size=statistics("memory"), multimodal=MULTIMODAL)
LATENCY = obj(time_to_first_token=statistics("time"), normalized_time_per_output_token=statistics("gen_latency"),
              time_per_output_token=statistics("gen_latency"), inter_token_latency=statistics("gen_latency"),
              request_latency=statistics("time"))
THROUGHPUT = obj(input_token_rate=statistics("gen_throughput"), output_token_rate=statistics("gen_throughput"),
                 total_token_rate=statistics("gen_throughput"), request_rate=statistics("request_throughput"),
                 image_rate=statistics("media_throughput"), video_rate=statistics("media_throughput"),
                 audio_rate=statistics("media_throughput"))
_SERIES_POINT = Obj({"ts": timestamp, "value": anything, **{k: number() for k in STAT_KEYS}}, frozenset({"ts"}))
SERIES = obj(("units", "series"), units=one_of(*ALL_UNITS), series=list_of(_SERIES_POINT))
_RATES = ("input_token_rate", "output_token_rate", "total_token_rate", "request_rate")
TIME_SERIES = obj(latency=Obj(dict.fromkeys(LATENCY.fields, SERIES)),
                  throughput=Obj({"units": one_of(*ALL_UNITS), **dict.fromkeys(_RATES, SERIES)}))
REQUEST_PERFORMANCE = obj(aggregate=obj(requests=REQUESTS, latency=LATENCY, throughput=THROUGHPUT),
                          time_series=TIME_SERIES)
COMPONENT_HEALTH = obj(("component_label",), component_label=text, total_restarts=number(0, integer=True),
                       failed_replicas=number(0, integer=True),
                       replica_health=list_of(obj(("replica_id",), replica_id=text, restarts=number(0, integer=True),
                                                  healthy=boolean, logs=text)))
RESULTS = obj(request_performance=REQUEST_PERFORMANCE, observability=obj(extra=True), profiling=anything,
              component_health=list_of(COMPONENT_HEALTH))

RUN = obj(("uid",), uid=text, eid=text, cid=text, pid=text, user=text, description=text,
          keywords=list_of(text), time=obj(start=timestamp, end=timestamp, duration=text))
REPORT = obj(("run", "results"), version=one_of(*VERSIONS), run=RUN, scenario=SCENARIO, results=RESULTS)


def problems(document: Any) -> list[str]:
    """Every way ``document`` departs from the v0.2.x report structure; empty when it has it."""
    return REPORT(document, "")
