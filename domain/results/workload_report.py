"""What teams look at for workloads: the prefix cache per point, and rate sweeps as curves.

* :func:`cache_table`: each point's cache state before measuring (flushed or warm), the
  server's own cache-hit figures (``cached_tokens`` it reported per request, summed by the
  client's ``--cache-report``) and TTFT, with a shared-prefix workload's prompts per group
  (the prefix-group size).  A point whose plan expected no reuse (a flushed cache and
  prompts drawn not to share a prefix: ``random-ids``, whose starts the driver keeps
  distinct) but whose server still reported cached tokens is marked ``unexpected_hit``.
* :func:`rate_curves` / :func:`rate_knees`: the points of an open-loop rate sweep
  (domain/plan/arrivals.py) as a curve over the offered rate: achieved request throughput
  and latency per rate.  The knee is :func:`domain.results.curve.knee_of`'s rule with the
  offered rate as x (below saturation the achieved rate follows the offered one, about
  +100 % per doubling; past it, it stays flat), the SLA boundary the first rate whose
  latency metric passes the limit.  A concurrency sweep keeps its own curve and knee
  (:func:`domain.results.curve.saturation_points`); the two never share a row.
"""

from __future__ import annotations

import math

import pandas as pd

from domain.core.i18n import t
from domain.results.analysis import is_missing
from domain.results.curve import DEFAULT_SATURATION_GAIN_PCT, knee_of
from domain.results.workload_columns import unexpected_cache_hit

CACHE_COLUMNS = ("run_id", "run_name", "scenario", "concurrency", "repeat_idx", "workload", "prompts_per_group",
                 "cache_state", "cache_hit_pct", "cached_tokens", "cache_prompt_tokens", "ttft_mean_ms",
                 "ttft_median_ms", "ttft_p99_ms", "unexpected_hit")
RATE_COLUMNS = ("run_id", "run_name", "sweep", "request_rate", "achieved_rps", "ttft_median_ms", "ttft_p99_ms",
                "e2e_median_ms", "tpot_median_ms", "completed")
KNEE_COLUMNS = ("run_id", "run_name", "sweep", "knee_rate", "knee_method", "sla_break_rate", "max_achieved_rps")


def _has(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and bool(frame[column].notna().any())


def cache_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per point with the server's cache figures (empty: no point has any)."""
    if frame.empty or not _has(frame, "cache_hit_pct"):
        return pd.DataFrame(columns=list(CACHE_COLUMNS))
    rows = frame[frame["cache_hit_pct"].notna()].copy()
    rows["unexpected_hit"] = [unexpected_cache_hit(row) is not None for row in rows.to_dict("records")]
    for column in CACHE_COLUMNS:
        if column not in rows.columns:
            rows[column] = None
    return rows[list(CACHE_COLUMNS)].sort_values(["run_id", "scenario", "concurrency", "repeat_idx"])


def cache_by_group_size(frame: pd.DataFrame) -> pd.DataFrame:
    """Cache-hit rate and TTFT per (run, prefix-group size, cache state), means over the
    points: what a shared system prompt buys as more requests share it."""
    table = cache_table(frame)
    table = table[table["prompts_per_group"].notna()]
    if table.empty:
        return pd.DataFrame(columns=["run_id", "run_name", "prompts_per_group", "cache_state", "points",
                                     "cache_hit_pct", "ttft_mean_ms", "ttft_p99_ms"])
    grouped = table.groupby(["run_id", "run_name", "prompts_per_group", "cache_state"], dropna=False)
    return grouped.agg(points=("scenario", "size"), cache_hit_pct=("cache_hit_pct", "mean"),
                       ttft_mean_ms=("ttft_mean_ms", "mean"), ttft_p99_ms=("ttft_p99_ms", "mean")).reset_index()


def rate_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """The points of every rate sweep, one row per (run, sweep, rate), means over repeats."""
    if frame.empty or not _has(frame, "rate_sweep_of"):
        return pd.DataFrame(columns=list(RATE_COLUMNS))
    rows = frame[frame["rate_sweep_of"].notna() & (frame["arrival"] == "poisson")].copy()
    rows["sweep"] = rows["rate_sweep_of"]
    rows["request_rate"] = rows["request_rate"].astype(float)
    rows["achieved_rps"] = rows["request_throughput"]
    metrics = [c for c in RATE_COLUMNS if c not in ("run_id", "run_name", "sweep", "request_rate")]
    curves = rows.groupby(["run_id", "run_name", "sweep", "request_rate"], dropna=False)[metrics].mean()
    return curves.reset_index().sort_values(["run_id", "sweep", "request_rate"])


def rate_knees(curves: pd.DataFrame, *, gain_threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT,
               sla_metric: str = "ttft_p99_ms", sla_threshold_ms: float | None = None) -> pd.DataFrame:
    """Per (run, sweep): the knee rate (achieved throughput stops following the offered
    rate), how it was read, the first rate past the SLA, and the most it achieved."""
    records = []
    for (run_id, run_name, sweep), rows in curves.groupby(["run_id", "run_name", "sweep"], sort=False):
        knee, method = knee_of(list(rows["request_rate"]), list(rows["achieved_rps"]), gain_threshold_pct)
        sla = None
        if sla_threshold_ms is not None:
            sla = next((r for r, v in zip(rows["request_rate"], rows[sla_metric], strict=True)
                        if not is_missing(v) and v > sla_threshold_ms), None)
        records.append((run_id, run_name, sweep, knee, method, sla, float(rows["achieved_rps"].max())))
    return pd.DataFrame.from_records(records, columns=list(KNEE_COLUMNS))


def knee_text(row: pd.Series, lang: str, kind: str) -> str:
    """One sentence per curve: where it saturates (``kind`` 'rate' or 'concurrency')."""
    knee = row.get("knee_rate") if kind == "rate" else row.get("knee_concurrency")
    if knee is None or (isinstance(knee, float) and math.isnan(knee)):
        return t(f"workload.knee_none_{kind}", lang, sweep=row.get("sweep") or row.get("scenario"))
    return t(f"workload.knee_{kind}", lang, sweep=row.get("sweep") or row.get("scenario"), knee=f"{float(knee):g}")
