"""How each point's interval was made, as the compare page explains it: per run, point and
metric, the requests behind it, their lag-1 autocorrelation ρ and the effective sample
n_eff the interval was built for (:mod:`domain.results.requests`: ρ from the requests in
completion order, n_eff = n ÷ the variance inflation ρ implies), or that the interval is
across repeats (no ρ: the repeats are independent launches; a two-level bootstrap for a
value pooled over the repeats' requests, the t interval for a mean of their values).

A pure function of the comparison's long table (:func:`domain.results.analysis.compare_table`,
its ``n``, ``rho``, ``n_eff`` and ``ci`` columns).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from domain.core.i18n import t
from domain.core.numbers import real_number
from domain.results.analysis import metric_label

INTERVAL_KEYS = ("run", "scenario", "concurrency", "metric", "n", "rho", "n_eff", "how")


def interval_rows(compare: pd.DataFrame, metrics: Sequence[str], lang: str) -> pd.DataFrame:
    """One row per (run, point, metric of ``metrics``) that has an interval: the run as
    "#id", the point, the metric's label, n, ρ, n_eff (NaN for an interval across repeats)
    and how the interval was made in words; headers in ``lang`` (``intervals.col.<key>``)."""
    rows = compare[compare["metric"].isin(list(metrics)) & compare["ci"].notna()]
    records = [_record(row, lang) for row in rows.to_dict("records")]
    table = pd.DataFrame.from_records(records, columns=list(INTERVAL_KEYS))
    return table.rename(columns={key: t(f"intervals.col.{key}", lang) for key in INTERVAL_KEYS})


def _record(row: dict[str, object], lang: str) -> tuple[object, ...]:
    rho, n_eff = _number(row.get("rho")), _number(row.get("n_eff"))
    how = "requests" if not math.isnan(n_eff) else _across_repeats(row) if row.get("repeats", 1) != 1 else "other"
    # "#id" as the page's tables head their columns: a full name would push ρ out of view.
    return (f"#{row['run_id']}", row["scenario"], row["concurrency"], metric_label(str(row["metric"]), lang),
            _number(row.get("n")), rho, n_eff, t(f"intervals.how.{how}", lang))


def _across_repeats(row: dict[str, object]) -> str:
    """A pooled value's interval is the two-level bootstrap (domain/results/repeat_bootstrap.py);
    a mean of the repeats' values has the t interval."""
    return "two_level" if row.get("basis") == "pooled" else "repeats"


def _number(value: object) -> float:
    number = real_number(value)
    return math.nan if number is None else number


def correlation_summary(compare: pd.DataFrame, metrics: Sequence[str], lang: str) -> str | None:
    """One sentence: the range of ρ and of n_eff ÷ n over the intervals from requests (how
    much the correlation of requests widened them); None when no interval is from requests."""
    rows = compare[compare["metric"].isin(list(metrics))]
    rho = pd.to_numeric(rows["rho"], errors="coerce")
    share = pd.to_numeric(rows["n_eff"], errors="coerce") / pd.to_numeric(rows["n"], errors="coerce")
    kept = rho.notna() & share.notna()
    if not kept.any():
        return None
    return t("intervals.summary", lang, rho_low=f"{rho[kept].min():.2f}", rho_high=f"{rho[kept].max():.2f}",
             share_low=f"{share[kept].min() * 100:.0f}", share_high=f"{share[kept].max() * 100:.0f}")
