"""A point's workload, arrival and prefix-cache figures, as points-frame columns.

* ``workload``: the plan's workload with its file's hash (domain/plan/workload.py), else
  the dataset's name, so points measured before workloads existed compare as before.
* ``arrival``: "closed-loop" or "poisson", from the point's request rate
  (domain/plan/arrivals.py); a fatal condition, so a rate point and a concurrency point
  are never lined up.  ``rate_sweep_of``: a rate sweep's scenario before its rate suffix.
* ``cache_state``: "flushed" when the client flushed the server's prefix cache after the
  warmup (``--flush-cache``), else "warm"; what the plan asked and the runner did.
* ``cache_hit_pct`` / ``cached_tokens`` / ``cache_prompt_tokens``: the server's own counts,
  the ``cached_tokens`` it reported with each measured request, summed by the client
  (``cache_report`` in the record, ``--cache-report``); None where the record has none.
* ``prompts_per_group``: a shared-prefix workload's requests per system prompt (the
  prefix-group size the compare page groups cache figures by).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from domain.plan.arrivals import arrival_of

WORKLOAD_COLUMNS = ("workload", "arrival", "rate_sweep_of", "cache_state", "cache_hit_pct", "cached_tokens",
                    "cache_prompt_tokens", "prompts_per_group")
_PER_GROUP = re.compile(r"\bprompts_per_group=([0-9]+)\b")


def workload_columns(conditions: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    found = record.get("cache_report")
    report: Mapping[str, Any] = found if isinstance(found, dict) else {}
    workload = conditions.get("workload") or conditions.get("dataset")
    flushed = conditions.get("flush_cache")
    return {
        "workload": workload,
        "arrival": arrival_of(conditions.get("request_rate")),
        "rate_sweep_of": conditions.get("rate_sweep_of"),
        "cache_state": None if flushed is None else ("flushed" if flushed else "warm"),
        "cache_hit_pct": _number(report.get("cache_hit_rate_pct")),
        "cached_tokens": _number(report.get("total_cached_tokens")),
        "cache_prompt_tokens": _number(report.get("total_prompt_tokens")),
        "prompts_per_group": _per_group(workload),
    }


def _per_group(workload: object) -> int | None:
    match = _PER_GROUP.search(workload) if isinstance(workload, str) else None
    return int(match.group(1)) if match else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# A flushed point of prompts drawn not to share a prefix (random-ids: the driver keeps their
# starts distinct) should find nothing cached; more than this share of its prompt tokens
# cached means something reused a prefix the plan did not expect (a cache not flushed, a
# dataset with repeats).  Random prompts share at most an accidental token or two, far below
# one 32-token page out of every hundred.
UNEXPECTED_HIT_PCT = 1.0
NO_REUSE_DATASETS = frozenset({"random-ids"})


def unexpected_cache_hit(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """The validity badge of a point that hit the cache where its plan expected none."""
    hit = row.get("cache_hit_pct")
    if row.get("cache_state") != "flushed" or row.get("dataset") not in NO_REUSE_DATASETS:
        return None
    if not isinstance(hit, int | float) or isinstance(hit, bool) or not hit > UNEXPECTED_HIT_PCT:
        return None
    return "unexpected_cache_hit", f"{hit:.1f} % of prompt tokens cached by the server"
