"""Altair charts of a comparison, built for slides (and, at the end, the run page's two live
charts).

Each builder takes the frames of :mod:`domain.results.analysis` and the UI language and returns an
*unconfigured* chart (so it can still be concatenated, e.g. with a caveat footer); call
:func:`styled` before display or export.  Titles and axis titles come from the catalogue;
metric names (TTFT, TPOT, ITL) stay as the field writes them.

Fonts: vl-convert falls back to a serif CJK face (or tofu, without a CJK font) unless the
font is named, so :func:`styled` names :data:`FONT` for every text element.  Emulated and
imported runs carry a suffix in their legend label and a stroke of their own (the first
source present is solid, the others dash-dot and dotted: :data:`SOURCE_DASHES`).  Given
the comparison's estimates (:func:`domain.results.estimate_overlay.estimates_for`), the
metric and latency charts draw each run's estimate as a thinner dashed line in the run's
colour with a cross at each point (:data:`ESTIMATE_DASH`, :data:`ESTIMATE_SHAPE`), named in
the stroke legend and captioned with how the estimate was checked (its cross-validated
error).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import altair as alt
import pandas as pd

from domain.core.i18n import t
from domain.results import estimate_overlay
from domain.results.analysis import POINT, metric_label, run_label
from domain.results.energy import energy_label
from domain.results.scaling_gap import CAUSES

FONT = "Noto Sans CJK JP"
# The run page's pictures (domain/render/pictures.py ``page_svg``) are SVG whose text the viewer's
# browser draws with its own fonts; vl-convert only measures it, to lay the chart out.  It
# measures each text by outlining its glyphs, which in FONT (a CFF face in a 19 MB
# collection) took most of a picture's time: 0.14 s for a run's points and 0.21 s for its
# "Why not N×?", against 0.04 s and 0.08 s in Liberation Sans (vl-convert 1.9 here, best of
# three).  Liberation Sans ships inside vl-convert, so every server measures with it, and its
# widths are Arial's by design, the face most viewers draw it with (pictures.PAGE_FONT_FAMILY).
PAGE_FONT = "Liberation Sans"
PANEL_WIDTH = 340
PANEL_HEIGHT = 210
FOOTER_WRAP = 130  # characters per caveat line; a slide-wide chart holds about this many
SATURATION_SHAPE = "diamond"
IDEAL_COLOUR = "#888888"

AnyChart = alt.Chart | alt.LayerChart | alt.FacetChart | alt.VConcatChart | alt.HConcatChart | alt.ConcatChart

GPU_METRICS = ("gpu_util_mean", "gpu_mem_peak_gb")
SOURCE_ORDER = ("measured", "emulated", "imported")
# Stroke per source, in the order the sources are present: one source alone stays solid.
SOURCE_DASHES = ([1, 0], [8, 3, 2, 3], [2, 2], [12, 3])
ESTIMATE_DASH = [6, 4]  # the estimate: dashed, thinner, a cross (not a circle) at each point
ESTIMATE_WIDTH = 1.5
ESTIMATE_SHAPE = "cross"  # the estimate's mark at each point (measured points are circles)
MEASURED = "measured"  # the ``kind`` of a chart row: measured, or the estimate's
ESTIMATE = "estimate"
TAIL_LATENCY_METRICS = ("ttft_p99", "e2e_p99")


# -- shared pieces -------------------------------------------------------------------------------


def styled(chart: AnyChart, font: str = FONT) -> AnyChart:
    """The chart with ``font`` (:data:`FONT` unless told) on every text element (titles,
    axes, legends, facet headers)."""
    return (
        chart.configure(font=font)
        .configure_title(font=font, subtitleFont=font, fontSize=18, anchor="start")
        .configure_axis(labelFont=font, titleFont=font, labelFontSize=11, titleFontSize=12)
        .configure_legend(labelFont=font, titleFont=font, labelFontSize=11, titleFontSize=12, labelLimit=320)
        .configure_header(labelFont=font, titleFont=font, labelFontSize=12)
        .configure_text(font=font)
    )


def _title(text: str, subtitle: str | None = None) -> alt.TitleParams:
    return alt.TitleParams(text=text, subtitle=subtitle or alt.Undefined, font=FONT, subtitleFont=FONT)


def with_footer(chart: AnyChart, lines: Sequence[str], head: Sequence[str] = ()) -> alt.VConcatChart:
    """The chart above a block of small text (wrapped), so exports carry it: ``head`` (what
    changed, darker) then ``lines`` (the caveat, grey)."""
    blocks = [_text_block(head, "#222222"), _text_block(lines, "#555555")]
    return alt.vconcat(chart, *[b for b in blocks if b is not None], spacing=12)


def _text_block(lines: Sequence[str], colour: str) -> alt.Chart | None:
    wrapped = [part for line in lines for part in textwrap.wrap(line, FOOTER_WRAP) or [""]]
    if not wrapped:
        return None
    return (
        alt.Chart(pd.DataFrame({"line": wrapped, "order": range(len(wrapped))}))
        .mark_text(align="left", baseline="top", x=0, fontSize=10, color=colour, font=FONT)
        .encode(y=alt.Y("order:O", axis=None), text="line:N")
        .properties(height=14 * len(wrapped), width=PANEL_WIDTH, view=alt.ViewBackground(stroke=None))
    )


def no_data_chart(title: str, what: str, lang: str) -> alt.Chart:
    """A titled panel that says there is no data, in place of a chart whose columns are all
    empty (imported runs without telemetry, a run without TPOT), so an export never shows
    an empty axis from 0 to 0 as if it were a measurement."""
    note = pd.DataFrame({"line": [t("slides.no_data", lang, what=what)]})
    return (alt.Chart(note).mark_text(align="left", baseline="middle", x=0, y=PANEL_HEIGHT / 4, fontSize=14,
                                      color="#555555", font=FONT)
            .encode(text="line:N")
            .properties(width=PANEL_WIDTH, height=PANEL_HEIGHT / 2, view=alt.ViewBackground(stroke=None),
                        title=_title(title)))


def _numeric(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``columns`` as numbers (None and text as NaN) and the rows lacking any of them dropped."""
    out = frame.copy()
    for column in columns:
        out[column] = pd.to_numeric(out[column], errors="coerce")
    return out.dropna(subset=list(columns))


def _metric_names(metrics: Sequence[str], lang: str) -> str:
    return ", ".join(metric_label(m, lang) for m in metrics)


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
    return {"color": _run_colour(data, lang), "strokeDash": _stroke_dash(data, lang)}


def _source_rank(source: object) -> int:
    return SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)


def _stroke_dash(data: pd.DataFrame, lang: str) -> alt.StrokeDash:
    """The stroke legend: each source present (measured first), then the estimate when ``data``
    has estimate rows.  The scale is explicit so every layer of a chart agrees on it and the
    estimate's dash never goes to a source."""
    kinds = data["kind"] if "kind" in data.columns else pd.Series(MEASURED, index=data.index)
    measured = data[kinds == MEASURED]
    pairs = sorted(dict.fromkeys(zip(measured["source"], measured["source_label"], strict=True)),
                   key=lambda pair: _source_rank(pair[0]))
    domain = list(dict.fromkeys(label for _, label in pairs))
    dashes = [SOURCE_DASHES[min(i, len(SOURCE_DASHES) - 1)] for i in range(len(domain))]
    if (kinds == ESTIMATE).any():
        domain.append(t("estimate_overlay.legend", lang))
        dashes.append(ESTIMATE_DASH)
    return alt.StrokeDash("source_label:N", title=t("compare.chart.source", lang), legend=_DASH_LEGEND,
                          scale=alt.Scale(domain=domain, range=dashes))


def _estimate_rows(estimates: pd.DataFrame | None, metrics: Sequence[str], lang: str) -> pd.DataFrame:
    """The estimates in the charts' long form (run, point, ``metric``, ``value``, and the
    estimated ``output_tok_s`` for a latency chart's x), for the ``metrics`` that have one
    (:data:`domain.results.estimate_overlay.ESTIMATED_METRICS`); ``kind`` = estimate."""
    wanted = [m for m in metrics if m in estimate_overlay.ESTIMATED_METRICS]
    if estimates is None or not wanted or not estimate_overlay.has_estimates(estimates):
        return pd.DataFrame()
    named = estimates.assign(**{m: estimates[estimate_overlay.ESTIMATED_METRICS[m]] for m in wanted})
    long = named.melt(id_vars=["run_id", "run_name", "source", *POINT, "est_output_tok_s"], value_vars=wanted,
                      var_name="metric", value_name="value")
    long = _runs(_numeric(long, ["value", "concurrency"]), lang)
    long["output_tok_s"] = pd.to_numeric(long["est_output_tok_s"], errors="coerce")
    long["source_label"] = t("estimate_overlay.legend", lang)
    long["kind"] = ESTIMATE
    long["saturated"] = False
    return long.drop(columns=["est_output_tok_s"])


def _with_estimates(measured: pd.DataFrame, estimated: pd.DataFrame) -> pd.DataFrame:
    """Measured rows (``kind`` = measured) and the estimate rows of the runs, scenarios and
    metrics measured (a chart of part of a comparison draws the estimates of that part)."""
    measured = measured.assign(kind=MEASURED)
    if estimated.empty:
        return measured
    drawn = set(zip(measured["run_id"], measured["scenario"], measured["metric"], strict=True))
    estimated = estimated[[key in drawn for key in zip(estimated["run_id"], estimated["scenario"],
                                                        estimated["metric"], strict=True)]]
    return pd.concat([measured, estimated], ignore_index=True) if not estimated.empty else measured


def _estimate_layer(x: alt.X, y: alt.Y, data: pd.DataFrame, lang: str, **encodings: object) -> alt.Chart:
    """The estimate's dashed line per run (same colour as the run), under the measured lines;
    a small cross at each point, so a scenario measured at one concurrency (no line) still
    shows its estimate (filled: a stroked mark would take the line's dash)."""
    tooltip = ["run:N", "source_label:N", "concurrency:Q", alt.Tooltip("value:Q", format=",.4~g")]
    marks = alt.OverlayMarkDef(shape=ESTIMATE_SHAPE, filled=True, size=45, opacity=0.9)
    return (alt.Chart().mark_line(strokeWidth=ESTIMATE_WIDTH, opacity=0.9, point=marks)
            .encode(x=x, y=y, tooltip=tooltip, **_run_encodings(data, lang), **encodings)
            .transform_filter(alt.datum.kind == ESTIMATE))


_POINT_KEYS = ("run_id", *POINT, "metric")  # which run, point and metric a row is (small, and what tests read)


def _drawn(data: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Only the columns a chart's encodings and filters read: the data travels inside the
    chart (to the browser, into every PNG/SVG/slide), and the summary it comes from has
    about a hundred columns."""
    return data[list(dict.fromkeys(columns))]


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
                 title: str | None = None, columns: int = 2, estimates: pd.DataFrame | None = None) -> AnyChart:
    """Each metric against concurrency, one line per run, one panel per metric (independent
    y scales); saturation points (from :func:`domain.results.curve.saturation_points`) as diamonds.
    A metric with no value at all gets no panel and is named in the subtitle; with none
    left the chart is :func:`no_data_chart`.  ``estimates``
    (:func:`domain.results.estimate_overlay.estimates_for`): each run's estimate of the
    metrics that have one, dashed, and a caption saying how the estimate was checked."""
    title = title or t("compare.chart.metrics_title", lang)
    long = summary.melt(id_vars=["run_id", "run_name", "source", *POINT], value_vars=list(metrics),
                        var_name="metric", value_name="value")
    long = _numeric(long, ["value", "concurrency"])
    if long.empty:
        return no_data_chart(title, _metric_names(metrics, lang), lang)
    missing = [m for m in metrics if m not in set(long["metric"])]
    long = _runs(long, lang)
    long["saturated"] = _saturation_flags(long, saturation)
    long = _with_estimates(long, _estimate_rows(estimates, metrics, lang))
    long["panel"] = _panel(long, long["metric"].map(lambda m: metric_label(m, lang)))
    x = _concurrency_x(long["concurrency"], lang)
    tooltip = ["run:N", "concurrency:Q", "panel:N", alt.Tooltip("value:Q", format=",.4~g")]
    y = alt.Y("value:Q", title=None)
    lines = (alt.Chart().mark_line(point=True).encode(x=x, y=y, tooltip=tooltip, **_run_encodings(long, lang))
             .transform_filter(alt.datum.kind == MEASURED))
    marks = (alt.Chart().mark_point(shape=SATURATION_SHAPE, size=160, filled=True, opacity=0.9)
             .encode(x=x, y=y, color=_run_colour(long, lang)).transform_filter(alt.datum.saturated))
    notes = [t("compare.chart.saturation_legend", lang)] if long["saturated"].any() else []
    if missing:
        notes.append(t("slides.no_data_metrics", lang, metrics=_metric_names(missing, lang)))
    layers: list[alt.Chart] = [lines, marks]
    if (long["kind"] == ESTIMATE).any():
        layers.insert(0, _estimate_layer(x, y, long, lang))
        notes.append(estimate_overlay.chart_caption(estimates, lang) or "")
    drawn = _drawn(long, *_POINT_KEYS, "value", "run", "panel", "kind", "saturated", "source_label")
    layered = alt.layer(*layers, data=drawn).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return (layered.facet(facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(long["panel"]))),
                          columns=columns)
            .resolve_scale(y="independent")
            .properties(title=_title(title, " · ".join(notes) or None)))


def gpu_chart(summary: pd.DataFrame, lang: str, *, saturation: pd.DataFrame | None = None) -> AnyChart:
    """GPU utilisation and memory against concurrency."""
    return metric_chart(summary, GPU_METRICS, lang, saturation=saturation, title=t("compare.chart.gpu_title", lang))


# -- Pareto --------------------------------------------------------------------------------------


def pareto_chart(pareto: pd.DataFrame, lang: str, stat: str = "p50") -> AnyChart:
    """Throughput per GPU against interactivity (tok/s/user), every point labelled with its
    concurrency and, where its power was sampled, its J/output token; the frontier
    (``on_frontier``) joined by a line and ringed; no point with both values:
    :func:`no_data_chart`.  ``stat`` is the TPOT statistic the interactivity was computed
    from (``curve.pareto_points``' ``tpot_<stat>``): the subtitle names it."""
    subtitle = t("compare.chart.pareto_subtitle", lang, tpot=t(f"compare.chart.pareto_tpot.{stat}", lang))
    data = _numeric(pareto, ["interactivity", "throughput_per_gpu"])
    if data.empty:
        return no_data_chart(t("compare.chart.pareto_title", lang), subtitle, lang)
    data = _runs(data, lang)
    data["panel"] = data["scenario"].astype(str)
    data["label"] = ["c=" + str(c) + energy_label(j, lang) for c, j in
                     zip(data["concurrency"], data.get("j_per_token", [None] * len(data)), strict=True)]
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
    drawn = _drawn(data, "interactivity", "throughput_per_gpu", "run", "source_label", "concurrency", "label", "panel",
                   "on_frontier")
    layered = alt.layer(frontier, points, rings, labels, data=drawn).properties(width=PANEL_WIDTH * 2 - 80,
                                                                             height=PANEL_HEIGHT + 60)
    return layered.facet(facet=alt.Facet("panel:N", title=None), columns=1).properties(
        title=_title(t("compare.chart.pareto_title", lang), subtitle))


# -- tail latency vs throughput ---------------------------------------------------------------------


def latency_vs_throughput_chart(summary: pd.DataFrame, lang: str, metrics: Sequence[str] = TAIL_LATENCY_METRICS,
                                *, estimates: pd.DataFrame | None = None) -> AnyChart:
    """TTFT and E2E p99 against output throughput, each run's points joined in concurrency
    order; points lacking either value are left out, and with none left: :func:`no_data_chart`.
    ``estimates``: for median metrics (``ttft_p50``, ``e2e_p50``), each run's estimated
    latency against its estimated throughput, dashed, with the estimate's caption."""
    long = summary.melt(id_vars=["run_id", "run_name", "source", *POINT, "output_tok_s"], value_vars=list(metrics),
                        var_name="metric", value_name="value")
    long = _numeric(long, ["value", "output_tok_s"])
    if long.empty:
        return no_data_chart(t("compare.chart.latency_title", lang), _metric_names(metrics, lang), lang)
    long = _with_estimates(_runs(long, lang), _estimate_rows(estimates, metrics, lang))
    long["panel"] = _panel(long, long["metric"].map(lambda m: metric_label(m, lang)))
    x = alt.X("output_tok_s:Q", title=metric_label("output_tok_s", lang))
    y = alt.Y("value:Q", title=t("compare.chart.latency_ms", lang))
    lines = alt.Chart().mark_line(point=True).encode(
        x=x, y=y, order="concurrency:Q",
        tooltip=["run:N", "concurrency:Q", alt.Tooltip("output_tok_s:Q", format=",.1f"),
                 alt.Tooltip("value:Q", format=",.1f")],
        **_run_encodings(long, lang)).transform_filter(alt.datum.kind == MEASURED)
    layers: list[alt.Chart] = [lines]
    caption = None
    if (long["kind"] == ESTIMATE).any():
        layers.insert(0, _estimate_layer(x, y, long, lang, order="concurrency:Q"))
        caption = estimate_overlay.chart_caption(estimates, lang)
    drawn = _drawn(long, *_POINT_KEYS, "output_tok_s", "value", "run", "panel", "kind", "source_label")
    layered = alt.layer(*layers, data=drawn).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return (layered.facet(facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(long["panel"]))), columns=2)
            .resolve_scale(y="independent")
            .properties(title=_title(t("compare.chart.latency_title", lang), caption)))


# -- scaling efficiency ------------------------------------------------------------------------------


SCALING_MARKS = ("cold", "super_linear")  # columns the scaling frame may carry, each a badge on its points


def scaling_chart(scaling: pd.DataFrame, lang: str, summary: pd.DataFrame | None = None) -> AnyChart:
    """Per scenario, two panels: the speed-up over the lowest concurrency against the ideal
    linear speed-up (log–log, so the ideal is a straight line), and the efficiency against
    the ideal 100 % (ideals dashed grey).  ``summary`` (optional) supplies run names and
    sources; without it runs are named by id.  Points the scaling frame marks ``cold`` or
    ``super_linear`` get a red cross and are named in the subtitle; no efficiency at all:
    :func:`no_data_chart`."""
    title = t("compare.chart.scaling_title", lang)
    data = _numeric(scaling, ["speedup", "efficiency", "concurrency"])
    if data.empty:
        return no_data_chart(title, t("compare.chart.scaling_subtitle", lang), lang)
    data = _runs(_with_run_names(data, summary), lang)
    data["efficiency_pct"] = data["efficiency"] * 100.0
    data["ideal_pct"] = 100.0
    present = [m for m in SCALING_MARKS if m in data.columns and data[m].fillna(False).astype(bool).any()]
    data["flagged"] = (data[present].fillna(False).astype(bool).any(axis=1) if present
                       else pd.Series(False, index=data.index))
    marks = [t(f"slides.scaling.{m}", lang) + " (✕)" for m in present]
    subtitle = " · ".join([t("compare.chart.scaling_subtitle", lang), *marks])
    scenarios = list(dict.fromkeys(data["scenario"]))
    rows = [_scaling_row(data[data["scenario"] == s], str(s) if len(scenarios) > 1 else None, lang) for s in scenarios]
    return alt.vconcat(*rows).properties(title=_title(title, subtitle))


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
        flagged = alt.Chart().mark_point(shape="cross", size=180, color="#cf222e", filled=True).encode(
            x=x, y=alt.Y(f"{value}:Q", scale=y_scale)).transform_filter(alt.datum.flagged)
        title = alt.TitleParams(t(title_key, lang) + (f" · {scenario}" if scenario else ""), fontSize=13,
                                anchor="middle", font=FONT)
        drawn = _drawn(data, "concurrency", value, ideal, "speedup", "efficiency", "run", "source_label", "flagged")
        return alt.layer(ideal_line, lines, flagged, data=drawn).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT,
                                                                           title=title)

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
# Built here, not in pages/run.py, so that domain/render/ stays the one place importing altair.


def run_points_chart(points: pd.DataFrame) -> alt.FacetChart:
    """The run page's per-point chart: ``points`` in long form (scenario, concurrency,
    metric, value), one line per scenario over concurrency on a log₂ axis, a panel per metric."""
    return alt.Chart(points).mark_line(point=True).encode(
        # The measured concurrencies as the ticks (a log axis alone labels 1.1, 1.2, … between 1 and 2).
        x=alt.X("concurrency:Q", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted({float(v) for v in points["concurrency"].dropna()}), format="~g")),
        y=alt.Y("value:Q", title=None),
        color="scenario:N", tooltip=["scenario", "concurrency", "metric", "value"],
    ).properties(height=200, width=320).facet(column=alt.Column("metric:N", title=None)).resolve_scale(y="independent")


def telemetry_sparklines(samples: pd.DataFrame) -> alt.FacetChart:
    """The run page's telemetry: a small line per metric over seconds (``t``), one line per point."""
    # Under a router or PD topology each worker's /metrics is its own source
    # ("server:prefill-0", ...): colour by source then, so the roles stay apart.
    by_role = samples["source"].astype(str).str.startswith("server:").any()
    return alt.Chart(samples).mark_line().encode(
        # Trailing zeros trimmed: a metric that stays 0 (no queue) read "0.000000" on every tick.
        x=alt.X("t:Q", title="s"), y=alt.Y("value:Q", title=None, axis=alt.Axis(format=",.8~g")),
        color=alt.Color("source:N" if by_role else "point:N", legend=alt.Legend(orient="bottom", labelLimit=400)),
        detail="point:N",
    ).properties(height=90, width=260).facet(facet=alt.Facet("metric:N", title=None), columns=3).resolve_scale(
        y="independent")


GAP_COLOURS = {  # one fixed colour per cause, in CAUSES order; remaining is grey (not a cause)
    "running_cap_or_kv_pool": "#d62728", "throttling": "#8c564b", "eager_batches": "#9467bd",
    "decode_step_growth": "#1f77b4", "prefill_interference": "#ff7f0e", "length_variance": "#2ca02c",
    "remaining": "#bbbbbb",
}


GAP_STEP_WIDTH = 72  # px per concurrency step: room for "c=256→512" at the axis' font


def scaling_gap_chart(gaps: pd.DataFrame, lang: str, *, titled: bool = True) -> AnyChart:
    """One stacked bar per concurrency step: each cause's tok/s of the gap between linear
    scaling and the measured throughput (``domain.results.scaling_gap.explain_gaps``), a
    black tick at the gap itself (a cause below zero helped), the cause's sentence as its
    tooltip; a row per scenario.  ``titled=False``: under a heading that already says "Why
    not N×?" (the run page), the chart names only its scenario."""
    if gaps.empty:
        return no_data_chart(t("scaling_gap.title", lang), t("scaling_gap.none", lang), lang)
    step, cause, tok_s = (t(f"scaling_gap.axis_{k}", lang) for k in ("step", "cause", "tok_s"))
    data = gaps.drop(columns=["params"]).assign(
        **{step: [t("scaling_gap.step", lang, c_from=a, c_to=b) for a, b in zip(gaps.c_from, gaps.c_to, strict=True)],
           cause: [t(f"scaling_gap.cause_label.{c}", lang) for c in gaps.cause],
           "order": [CAUSES.index(c) for c in gaps.cause],
           "sentence": [t(k, lang, **p) for k, p in zip(gaps.sentence_key, gaps.params, strict=True)]})
    steps = list(dict.fromkeys(data.sort_values(["c_from", "c_to"])[step]))
    labels = [t(f"scaling_gap.cause_label.{c}", lang) for c in CAUSES]
    x = alt.X(f"{step}:N", sort=steps, title=step, axis=alt.Axis(labelAngle=0))
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y("tok_s:Q", title=tok_s, stack="zero"),
        color=alt.Color(f"{cause}:N", title=cause, sort=labels,
                        scale=alt.Scale(domain=labels, range=[GAP_COLOURS[c] for c in CAUSES])),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip(f"{step}:N"), alt.Tooltip(f"{cause}:N"), alt.Tooltip("tok_s:Q", format=",.0f"),
                 alt.Tooltip("share:Q", format=".0%"), alt.Tooltip("sentence:N")],
    )
    ticks = alt.Chart().mark_tick(color="black", thickness=2, size=28).encode(
        x=x, y=alt.Y("gap:Q"),
        tooltip=[alt.Tooltip("ideal:Q", format=",.0f"), alt.Tooltip("measured:Q", format=",.0f"),
                 alt.Tooltip("gap:Q", format=",.0f")],
    ).transform_filter(alt.datum.order == 0)  # one row per step
    # Wide enough for every step's label upright (a run of 1…512 has nine steps, whose labels
    # overlapped at the panel's usual width).
    width = max(PANEL_WIDTH, GAP_STEP_WIDTH * len(steps))
    layer = alt.layer(bars, ticks, data=data).properties(width=width, height=PANEL_HEIGHT)
    if data["scenario"].nunique() > 1:
        faceted = layer.facet(row=alt.Row("scenario:N", title=None))
        return faceted.properties(title=_title(t("scaling_gap.title", lang))) if titled else faceted
    scenario = str(data["scenario"].iloc[0])
    if not titled:
        return layer.properties(title=_title(f"{t('compare.col.scenario', lang)} {scenario}"))
    return layer.properties(title=_title(t("scaling_gap.title", lang), scenario))

