"""Charts and tables of workloads for the compare page and the exports: the rate sweep as a
curve with its knee, and the prefix cache per prefix-group size
(:mod:`domain.results.workload_report` computes them; this module only draws and lays out)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render.charts import PANEL_HEIGHT, PANEL_WIDTH, AnyChart, _title
from domain.results import workload_report as report
from domain.results.analysis import run_label

KNEE_DASH = [4, 3]


def rate_curves_of(c: Comparison) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The comparison's rate sweeps and their knees (the SLA boundary under the page's SLA)."""
    curves = report.rate_curves(c.frame)
    metric = f"{c.sla_metric}_ms" if c.sla_metric and f"{c.sla_metric}_ms" in report.RATE_COLUMNS else "ttft_p99_ms"
    knees = report.rate_knees(curves, gain_threshold_pct=c.gain_threshold_pct, sla_metric=metric,
                              sla_threshold_ms=c.sla_threshold_ms)
    return curves, knees


def _labelled(frame: pd.DataFrame, c: Comparison) -> pd.DataFrame:
    out = frame.copy()
    sources = {run_id: source for run_id, (_name, source) in c.run_names.items()}
    out["run"] = [f"{run_label(r, n, sources.get(r), c.lang)} · {s}" for r, n, s in
                  zip(out["run_id"], out["run_name"], out["sweep"], strict=True)]
    return out


def rate_chart(c: Comparison) -> AnyChart | None:
    """Achieved request rate and p99 TTFT against the offered (Poisson) rate, one line per
    (run, sweep), each curve's knee a dashed rule; None without a rate sweep."""
    curves, knees = rate_curves_of(c)
    if curves.empty:
        return None
    long = _labelled(curves, c).melt(id_vars=["run", "request_rate"], value_vars=["achieved_rps", "ttft_p99_ms"],
                                     var_name="metric", value_name="value").dropna(subset=["value"])
    long["panel"] = [t(f"workload.chart.{m}", c.lang) for m in long["metric"]]
    panels = list(dict.fromkeys(long["panel"]))
    runs = list(dict.fromkeys(long["run"]))
    found = _labelled(knees.dropna(subset=["knee_rate"]), c) if not knees.empty else pd.DataFrame()
    rules = [{"run": run, "request_rate": rate, "panel": panel, "metric": "knee", "value": None}
             for run, rate in zip(found.get("run", []), found.get("knee_rate", []), strict=True) for panel in panels]
    data = pd.concat([long, pd.DataFrame(rules)], ignore_index=True) if rules else long
    x = alt.X("request_rate:Q", title=t("workload.chart.offered_rate", c.lang), scale=alt.Scale(type="log", base=2))
    colour = alt.Color("run:N", title=t("compare.chart.run", c.lang), sort=runs)
    lines = (alt.Chart().mark_line(point=True)
             .encode(x=x, y=alt.Y("value:Q", title=None), color=colour,
                     tooltip=["run:N", "request_rate:Q", "panel:N", alt.Tooltip("value:Q", format=",.4~g")])
             .transform_filter(alt.datum.metric != "knee"))
    knee_rules = (alt.Chart().mark_rule(strokeDash=KNEE_DASH).encode(x=x, color=colour)
                  .transform_filter(alt.datum.metric == "knee"))
    layered = alt.layer(lines, knee_rules, data=data).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    subtitle = " · ".join(report.knee_text(row, c.lang, "rate") for _, row in knees.iterrows())
    return (layered.facet(facet=alt.Facet("panel:N", title=None, sort=panels), columns=2)
            .resolve_scale(y="independent")
            .properties(title=_title(t("workload.chart.rate_title", c.lang), subtitle)))


def cache_group_table(c: Comparison) -> pd.DataFrame:
    """Cache-hit rate and TTFT per prefix-group size, headers in the UI language."""
    table = report.cache_by_group_size(c.frame)
    return _headed(table.drop(columns=["run_id"]), c.lang)


def cache_point_table(c: Comparison) -> pd.DataFrame:
    """Every point's cache state and the server's cache figures, headers in the UI language."""
    table = report.cache_table(c.frame)
    return _headed(table.drop(columns=["run_id"]), c.lang)


def rate_table(c: Comparison) -> pd.DataFrame:
    curves, _knees = rate_curves_of(c)
    return _headed(curves.drop(columns=["run_id"]), c.lang)


def knee_table(c: Comparison) -> pd.DataFrame:
    _curves, knees = rate_curves_of(c)
    return _headed(knees.drop(columns=["run_id"]), c.lang)


def _headed(table: pd.DataFrame, lang: str) -> pd.DataFrame:
    return table.rename(columns={column: t(f"workload.col.{column}", lang) for column in table.columns})


def workload_sections(c: Comparison) -> list[tuple[str, pd.DataFrame]]:
    """The exports' workload sections (title, table), only those with rows."""
    sections = [(t("workload.section.cache_groups", c.lang), cache_group_table(c)),
                (t("workload.section.cache_points", c.lang), cache_point_table(c)),
                (t("workload.section.rate_curve", c.lang), rate_table(c)),
                (t("workload.section.rate_knees", c.lang), knee_table(c))]
    return [(title, table) for title, table in sections if not table.empty]


def workload_charts(c: Comparison) -> list[tuple[str, AnyChart]]:
    """The exports' workload charts: the rate curve with its knee, where there is a rate sweep."""
    chart = rate_chart(c)
    return [] if chart is None else [(t("workload.chart.rate_title", c.lang), chart)]

