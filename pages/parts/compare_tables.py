"""The compare page's tables of points × runs (pages/compare.py): the run headers, the metric
tables and the scaling-efficiency table, each built once per comparison (``derived``).

They live here rather than in the page so that the server can build a linked comparison's
first screen before the page's first run does (:func:`warm_compare`, called by
scripts/page_warmup.py when the page's HTML is asked for), as it does for the analysis
itself (``warm_comparison``): the run labels and the three default tables were about a
third of the page's own time on a cold visit of nine runs, profiled here."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
import streamlit as st

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render import tables
from domain.results import analysis
from pages.parts.selection import derived, warm_comparison

Point = tuple[Any, Any, Any]  # (run_id, scenario, concurrency)
STATISTICS = ("p50", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
# The metric table's choices: a kind is a metric, or a latency whose statistic the selector picks.
KINDS = {"throughput": "output_tok_s", "total": "total_tok_s", "qps": "qps", "ttft": "ttft", "tpot": "tpot",
         "itl": "itl", "e2e": "e2e", "gpu_util": "gpu_util_mean", "gpu_mem": "gpu_mem_peak_gb",
         "kv_usage": "kv_usage_peak", "kv_capacity": "kv_capacity", "energy": "j_per_token"}
DEFAULT_KINDS = ("throughput", "ttft", "tpot")
NAME_CHARS = 18  # a run name longer than this is cut in headers; the full name is in the column's help
NOT_COMPARABLE_MARK = "✗"  # a character every font has (an emoji needs an emoji font)
VERDICT_STYLE = {"better": "color: #1a7f37; font-weight: 600", "worse": "color: #cf222e; font-weight: 600",
                 "changed": "color: #9a6700"}  # 'small' (inside the practical threshold): no colour


def short(text: object, limit: int = NAME_CHARS) -> str:
    value = str(text)
    return value if len(value) <= limit else value[:limit - 1] + "…"


def metric_of(kind: str, stat: str) -> str:
    """The metric name of a table kind at the chosen statistic (``ttft`` + ``p90`` → ``ttft_p90``)."""
    metric = KINDS[kind]
    return f"{metric}_{stat}" if metric in LATENCIES else metric


def run_headers(c: Comparison) -> dict[int, tuple[str, str]]:
    return derived(c, "run_headers", lambda: _run_headers(c))


def _run_headers(c: Comparison) -> dict[int, tuple[str, str]]:
    """Per run (baseline first): (short header, full label).  The full label is the exports'
    (source and not-comparable marks included); the short one is "#id name…", with
    :data:`NOT_COMPARABLE_MARK` first for a run that is not comparable, so nine runs fit
    side by side and a long name never fills the screen."""
    headers = {}
    for run_id in [c.baseline_run_id, *c.run_ids]:
        if run_id not in c.run_names:
            continue
        mark = f"{NOT_COMPARABLE_MARK} " if run_id in c.not_comparable else ""
        headers[int(run_id)] = (f"{mark}#{run_id} {short(c.run_names[run_id][0])}", tables.marked_label(c, run_id))
    return headers


def points_pivot(c: Comparison, cell: Callable[[Point], str], lang: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Points (scenario, concurrency) as rows, runs side by side as columns ("#id", labelled
    by :func:`run_headers` with the full name as help), each cell ``cell(point)``."""
    headers = run_headers(c)
    index = pd.MultiIndex.from_frame(c.summary[list(analysis.POINT)].drop_duplicates().sort_values(
        list(analysis.POINT), key=lambda s: s.astype(str) if s.name == "scenario" else s))
    index.names = [t("compare.col.scenario", lang), t("compare.col.concurrency", lang)]
    table = pd.DataFrame({f"#{run_id}": [cell((run_id, s, conc)) for s, conc in index] for run_id in headers},
                         index=index)
    config = {f"#{run_id}": st.column_config.TextColumn(label, help=full)
              for run_id, (label, full) in headers.items()}
    return table, config


def metric_cell(row: Mapping[str, Any], lang: str = "en") -> str:
    """"1,234.5 (+3.2%)" as the slides write it, "~" before a mean of repeats' percentiles,
    "†" after a quantile from too few requests."""
    if analysis.is_missing(row["value"]):
        return ""
    text = tables.format_number(row["value"])
    metric = analysis.METRIC_BY_NAME.get(str(row["metric"]))
    if metric is not None and metric.quantile_pct is not None and row["basis"] == "mean_of_repeats":
        text = "~" + text
    delta = analysis.delta_text(row["delta_pct"], row["verdict"], lang, row.get("delta_low_pct"),
                                row.get("delta_high_pct"))
    text += f" ({delta})" if delta else ""
    return text + (" †" if bool(row["low_n"]) else "")


MetricTable = tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]


def metric_table(c: Comparison, metric: str, lang: str) -> MetricTable:
    """One metric, points × runs: the cells, their styles (by verdict) and the column config;
    built once per comparison (the comparison is per language, so is this)."""
    return derived(c, ("metric_table", metric, lang), functools.partial(_metric_table, c, metric, lang))


def _metric_table(c: Comparison, metric: str, lang: str) -> MetricTable:
    rows = c.compare[c.compare["metric"] == metric]
    by_point = {(r["run_id"], r["scenario"], r["concurrency"]): r for r in rows.to_dict("records")}
    table, config = points_pivot(c, lambda key: metric_cell(by_point[key], lang) if key in by_point else "", lang)
    styles = pd.DataFrame({column: [VERDICT_STYLE.get(str(by_point[key]["verdict"]), "") if key in by_point else ""
                                    for key in ((int(column[1:]), s, conc) for s, conc in table.index)]
                           for column in table.columns}, index=table.index)
    return table, styles, config


def efficiency_cell(row: Mapping[str, Any], lang: str) -> str:
    """"87%", "393% · eff. >100%" (badged), "25% · cold", "102% · ≈ linear": an efficiency
    above 100 % never appears without a word saying what it is."""
    efficiency = row["efficiency"]
    if analysis.is_missing(efficiency):
        return ""
    text = t("compare_page.efficiency_cell", lang, pct=f"{100 * efficiency:,.0f}")
    marks = [t(f"compare_page.badge_short.{badge}", lang) for badge, column in
             (("cold_first_point", "cold"), ("super_linear", "super_linear")) if bool(row[column])]
    if not marks and efficiency > 1.0:
        marks.append(t("compare_page.near_linear", lang))
    if bool(row["cold"]) and row["baseline_concurrency"] != row["concurrency"]:  # left out: measured from the next
        marks.append(t("compare_page.efficiency_basis", lang, c=tables.format_number(row["baseline_concurrency"])))
    return " · ".join([text, *marks])


def scaling_table(c: Comparison, lang: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The scaling efficiency, points × runs (the analyses' first tab, open by default)."""
    def build() -> tuple[pd.DataFrame, dict[str, Any]]:
        by_point = {(r["run_id"], r["scenario"], r["concurrency"]): r for r in c.scaling.to_dict("records")}
        return points_pivot(c, lambda key: efficiency_cell(by_point[key], lang) if key in by_point else "", lang)

    return derived(c, ("scaling_table", lang), build)


def warm_compare(query: Mapping[str, list[str]]) -> None:
    """The compare page's first screen for a link (``warm_comparison``'s query, plus
    ``stat``): the analysis, then the run headers, the default metric tables at the linked
    statistic and the scaling table, in the order the page reads them."""
    found = warm_comparison(query)
    if found is None:
        return
    c, lang = found
    stat = (query.get("stat") or [STATISTICS[0]])[-1]  # the last, as st.query_params.get reads it
    if stat not in STATISTICS:  # as the page's picker reads it: the first statistic
        stat = STATISTICS[0]
    run_headers(c)
    for kind in DEFAULT_KINDS:
        metric_table(c, metric_of(kind, stat), lang)
    scaling_table(c, lang)

