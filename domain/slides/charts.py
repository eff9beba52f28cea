"""Altair charts of a comparison, built for slides (and, at the end, the run page's two live
charts).

Each builder takes the frames of :mod:`domain.results.analysis` and the UI language and returns an
*unconfigured* chart (so it can still be concatenated, e.g. with a caveat footer); call
:func:`styled` before display or export.  Titles and axis titles come from the catalogue;
metric names (TTFT, TPOT, ITL) stay as the field writes them.

Fonts: vl-convert falls back to a serif CJK face (or tofu, without a CJK font) unless the
font is named, so :func:`styled` names :data:`FONT` for every text element.  Emulated and
imported runs carry a suffix in their legend label and a dashed stroke.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import altair as alt
import pandas as pd

from domain.core.i18n import t
from domain.results.analysis import POINT, metric_label, run_label

FONT = "Noto Sans CJK JP"
PANEL_WIDTH = 340
PANEL_HEIGHT = 210
FOOTER_WRAP = 130  # characters per caveat line; a slide-wide chart holds about this many
SATURATION_SHAPE = "diamond"
IDEAL_COLOUR = "#888888"

AnyChart = alt.Chart | alt.LayerChart | alt.FacetChart | alt.VConcatChart | alt.HConcatChart | alt.ConcatChart

GPU_METRICS = ("gpu_util_mean", "gpu_mem_peak_gb")
TAIL_LATENCY_METRICS = ("ttft_p99", "e2e_p99")


# -- shared pieces -------------------------------------------------------------------------------


def styled(chart: AnyChart) -> AnyChart:
    """The chart with :data:`FONT` on every text element (titles, axes, legends, facet headers)."""
    return (
        chart.configure(font=FONT)
        .configure_title(font=FONT, subtitleFont=FONT, fontSize=18, anchor="start")
        .configure_axis(labelFont=FONT, titleFont=FONT, labelFontSize=11, titleFontSize=12)
        .configure_legend(labelFont=FONT, titleFont=FONT, labelFontSize=11, titleFontSize=12, labelLimit=320)
        .configure_header(labelFont=FONT, titleFont=FONT, labelFontSize=12)
        .configure_text(font=FONT)
    )


def _title(text: str, subtitle: str | None = None) -> alt.TitleParams:
    return alt.TitleParams(text=text, subtitle=subtitle or alt.Undefined, font=FONT, subtitleFont=FONT)


def with_footer(chart: AnyChart, lines: Sequence[str]) -> alt.VConcatChart:
    """The chart above a block of small caveat text (wrapped), so exports carry it."""
    wrapped = [part for line in lines for part in textwrap.wrap(line, FOOTER_WRAP) or [""]]
    footer = (
        alt.Chart(pd.DataFrame({"line": wrapped, "order": range(len(wrapped))}))
        .mark_text(align="left", baseline="top", x=0, fontSize=10, color="#555555", font=FONT)
        .encode(y=alt.Y("order:O", axis=None), text="line:N")
        .properties(height=14 * len(wrapped), width=PANEL_WIDTH, view=alt.ViewBackground(stroke=None))
    )
    return alt.vconcat(chart, footer, spacing=12)


def _runs(frame: pd.DataFrame, lang: str) -> pd.DataFrame:
    """Adds the legend label of each run ('run') and its source in words ('source_label')."""
    out = frame.copy()
    out["run"] = [run_label(r, n, s, lang) for r, n, s in zip(out["run_id"], out["run_name"], out["source"],
                                                              strict=True)]
    out["source_label"] = [t(f"source.{s}", lang) if s else "?" for s in out["source"]]
    return out


# A dash legend shows nothing unless its stroke symbol gets a colour and a length.
_DASH_LEGEND = alt.Legend(symbolType="stroke", symbolStrokeColor="black", symbolFillColor="black",
                          symbolStrokeWidth=2, symbolSize=200)


def _run_colour(data: pd.DataFrame, lang: str) -> alt.Color:
    # Legend in the order the runs came (the baseline first), not alphabetically.
    return alt.Color("run:N", title=t("compare.chart.run", lang), sort=list(dict.fromkeys(data["run"])))


def _run_encodings(data: pd.DataFrame, lang: str) -> dict[str, alt.SchemaBase]:
    return {
        "color": _run_colour(data, lang),
        "strokeDash": alt.StrokeDash("source_label:N", title=t("compare.chart.source", lang),
                                     legend=_DASH_LEGEND),
    }


def _concurrency_x(values: pd.Series, lang: str) -> alt.X:
    # Concurrency sweeps double; a log2 axis spaces 1, 2, 4, 8 … evenly.
    ticks = sorted({float(v) for v in values.dropna()})
    return alt.X("concurrency:Q", title=t("compare.chart.concurrency", lang),
                 scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=ticks, format="~g"))


def _panel(frame: pd.DataFrame, label: pd.Series) -> pd.Series:
    """Facet panel names: the metric, with the scenario added when there are several."""
    if frame["scenario"].nunique() > 1:
        return label + " · " + frame["scenario"].astype(str)
    return label


def _saturation_flags(frame: pd.DataFrame, saturation: pd.DataFrame | None) -> pd.Series:
    if saturation is None or saturation.empty:
        return pd.Series(False, index=frame.index)
    marks = {(r, s, c) for r, s, c in zip(saturation["run_id"], saturation["scenario"], saturation["concurrency"],
                                          strict=True) if pd.notna(c)}
    return pd.Series([(r, s, c) in marks for r, s, c in zip(frame["run_id"], frame["scenario"], frame["concurrency"],
                                                            strict=True)], index=frame.index)


# -- metric vs concurrency -------------------------------------------------------------------------


def metric_chart(summary: pd.DataFrame, metrics: Sequence[str], lang: str, *, saturation: pd.DataFrame | None = None,
                 title: str | None = None, columns: int = 2) -> alt.FacetChart:
    """Each metric against concurrency, one line per run, one panel per metric (independent
    y scales); saturation points (from :func:`domain.results.analysis.saturation_points`) as diamonds."""
    long = summary.melt(id_vars=["run_id", "run_name", "source", *POINT], value_vars=list(metrics),
                        var_name="metric", value_name="value")
    long = _runs(long, lang)
    long["panel"] = _panel(long, long["metric"].map(lambda m: metric_label(m, lang)))
    long["saturated"] = _saturation_flags(long, saturation)
    x = _concurrency_x(long["concurrency"], lang)
    tooltip = ["run:N", "concurrency:Q", "panel:N", alt.Tooltip("value:Q", format=",.4~g")]
    y = alt.Y("value:Q", title=None)
    lines = alt.Chart().mark_line(point=True).encode(x=x, y=y, tooltip=tooltip, **_run_encodings(long, lang))
    marks = (alt.Chart().mark_point(shape=SATURATION_SHAPE, size=160, filled=True, opacity=0.9)
             .encode(x=x, y=y, color=_run_colour(long, lang)).transform_filter(alt.datum.saturated))
    has_marks = bool(long["saturated"].any())
    subtitle = t("compare.chart.saturation_legend", lang) if has_marks else None
    layered = alt.layer(lines, marks, data=long).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return (layered.facet(facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(long["panel"]))),
                          columns=columns)
            .resolve_scale(y="independent")
            .properties(title=_title(title or t("compare.chart.metrics_title", lang), subtitle)))


def gpu_chart(summary: pd.DataFrame, lang: str, *, saturation: pd.DataFrame | None = None) -> alt.FacetChart:
    """GPU utilisation and memory against concurrency."""
    return metric_chart(summary, GPU_METRICS, lang, saturation=saturation, title=t("compare.chart.gpu_title", lang))


# -- Pareto --------------------------------------------------------------------------------------


def pareto_chart(pareto: pd.DataFrame, lang: str) -> alt.FacetChart:
    """Throughput per GPU against interactivity (tok/s/user), every point labelled with its
    concurrency, the frontier (``on_frontier``) joined by a line and ringed."""
    data = _runs(pareto.dropna(subset=["interactivity", "throughput_per_gpu"]), lang)
    data["panel"] = data["scenario"].astype(str)
    data["label"] = "c=" + data["concurrency"].astype(str)
    x = alt.X("interactivity:Q", title=t("compare.chart.interactivity", lang), scale=alt.Scale(zero=False))
    y = alt.Y("throughput_per_gpu:Q", title=t("compare.chart.throughput_per_gpu", lang))
    points = alt.Chart().mark_point(filled=True, size=70).encode(
        x=x, y=y, color=_run_colour(data, lang),
        shape=alt.Shape("source_label:N", title=t("compare.chart.source", lang)),
        tooltip=["run:N", "concurrency:Q", alt.Tooltip("interactivity:Q", format=",.1f"),
                 alt.Tooltip("throughput_per_gpu:Q", format=",.1f")])
    labels = alt.Chart().mark_text(dx=7, dy=-7, align="left", fontSize=9, color="#444444").encode(
        x=x, y=y, text="label:N")
    frontier = alt.Chart().mark_line(color="black", strokeWidth=1.5, strokeDash=[4, 3]).encode(
        x=x, y=y, order="interactivity:Q").transform_filter(alt.datum.on_frontier)
    rings = alt.Chart().mark_point(size=260, color="black", strokeWidth=1.5).encode(
        x=x, y=y).transform_filter(alt.datum.on_frontier)
    layered = alt.layer(frontier, points, rings, labels, data=data).properties(width=PANEL_WIDTH * 2 - 80,
                                                                             height=PANEL_HEIGHT + 60)
    return layered.facet(facet=alt.Facet("panel:N", title=None), columns=1).properties(
        title=_title(t("compare.chart.pareto_title", lang), t("compare.chart.pareto_subtitle", lang)))


# -- tail latency vs throughput ---------------------------------------------------------------------


def latency_vs_throughput_chart(summary: pd.DataFrame, lang: str,
                                metrics: Sequence[str] = TAIL_LATENCY_METRICS) -> alt.FacetChart:
    """TTFT and E2E p99 against output throughput, each run's points joined in concurrency order."""
    long = summary.melt(id_vars=["run_id", "run_name", "source", *POINT, "output_tok_s"], value_vars=list(metrics),
                        var_name="metric", value_name="value")
    long = _runs(long, lang)
    long["panel"] = _panel(long, long["metric"].map(lambda m: metric_label(m, lang)))
    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("output_tok_s:Q", title=metric_label("output_tok_s", lang)),
        y=alt.Y("value:Q", title=t("compare.chart.latency_ms", lang)),
        order="concurrency:Q",
        tooltip=["run:N", "concurrency:Q", alt.Tooltip("output_tok_s:Q", format=",.1f"),
                 alt.Tooltip("value:Q", format=",.1f")],
        **_run_encodings(long, lang))
    layered = alt.layer(lines, data=long).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return (layered.facet(facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(long["panel"]))), columns=2)
            .resolve_scale(y="independent")
            .properties(title=_title(t("compare.chart.latency_title", lang))))


# -- scaling efficiency ------------------------------------------------------------------------------


def scaling_chart(scaling: pd.DataFrame, lang: str, summary: pd.DataFrame | None = None) -> alt.VConcatChart:
    """Per scenario, two panels: the speed-up over the lowest concurrency against the ideal
    linear speed-up (log–log, so the ideal is a straight line), and the efficiency against
    the ideal 100 % (ideals dashed grey).  ``summary`` (optional) supplies run names and
    sources; without it runs are named by id."""
    data = _runs(_with_run_names(scaling, summary), lang)
    data["efficiency_pct"] = data["efficiency"] * 100.0
    data["ideal_pct"] = 100.0
    scenarios = list(dict.fromkeys(data["scenario"]))
    rows = [_scaling_row(data[data["scenario"] == s], str(s) if len(scenarios) > 1 else None, lang) for s in scenarios]
    return alt.vconcat(*rows).properties(
        title=_title(t("compare.chart.scaling_title", lang), t("compare.chart.scaling_subtitle", lang)))


def _scaling_row(data: pd.DataFrame, scenario: str | None, lang: str) -> alt.HConcatChart:
    x = _concurrency_x(data["concurrency"], lang)
    tooltip = ["run:N", "concurrency:Q", alt.Tooltip("speedup:Q", format=".2f"),
               alt.Tooltip("efficiency:Q", format=".0%")]
    log2 = alt.Scale(type="log", base=2)

    def panel(value: str, ideal: str, title_key: str, scale: alt.Scale | None) -> AnyChart:
        y_scale = scale if scale is not None else alt.Undefined
        ideal_line = alt.Chart().mark_line(color=IDEAL_COLOUR, strokeDash=[6, 4]).encode(
            x=x, y=alt.Y(f"{ideal}:Q", scale=y_scale), detail="run:N")
        lines = alt.Chart().mark_line(point=True).encode(
            x=x, y=alt.Y(f"{value}:Q", title=t(title_key, lang), scale=y_scale), tooltip=tooltip,
            **_run_encodings(data, lang))
        title = alt.TitleParams(t(title_key, lang) + (f" · {scenario}" if scenario else ""), fontSize=13,
                                anchor="middle", font=FONT)
        return alt.layer(ideal_line, lines, data=data).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT, title=title)

    return alt.hconcat(panel("speedup", "ideal_speedup", "compare.chart.speedup", log2),
                       panel("efficiency_pct", "ideal_pct", "compare.chart.efficiency", None))


def _with_run_names(scaling: pd.DataFrame, summary: pd.DataFrame | None) -> pd.DataFrame:
    if summary is None:
        out = scaling.copy()
        out["run_name"], out["source"] = out["run_id"].astype(str), None
        return out
    names = summary[["run_id", "run_name", "source"]].drop_duplicates("run_id")
    return scaling.merge(names, on="run_id", how="left")


# -- the run page's live charts ------------------------------------------------------------------
# Built here, not in pages/run.py, so that domain/slides/ stays the one place importing altair.


def run_points_chart(points: pd.DataFrame) -> alt.FacetChart:
    """The run page's per-point chart: ``points`` in long form (scenario, concurrency,
    metric, value), one line per scenario over concurrency on a log₂ axis, a panel per metric."""
    return alt.Chart(points).mark_line(point=True).encode(
        x=alt.X("concurrency:Q", scale=alt.Scale(type="log", base=2)), y=alt.Y("value:Q", title=None),
        color="scenario:N", tooltip=["scenario", "concurrency", "metric", "value"],
    ).properties(height=200, width=320).facet(column=alt.Column("metric:N", title=None)).resolve_scale(y="independent")


def telemetry_sparklines(samples: pd.DataFrame) -> alt.FacetChart:
    """The run page's telemetry: a small line per metric over seconds (``t``), one line per point."""
    # Under a router or PD topology each worker's /metrics is its own source
    # ("server:prefill-0", ...): colour by source then, so the roles stay apart.
    by_role = samples["source"].astype(str).str.startswith("server:").any()
    return alt.Chart(samples).mark_line().encode(
        x=alt.X("t:Q", title="s"), y=alt.Y("value:Q", title=None),
        color=alt.Color("source:N" if by_role else "point:N", legend=alt.Legend(orient="bottom", labelLimit=400)),
        detail="point:N",
    ).properties(height=90, width=260).facet(facet=alt.Facet("metric:N", title=None), columns=3).resolve_scale(
        y="independent")
