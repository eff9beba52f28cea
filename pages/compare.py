"""Compare runs side by side.  From the top: each run's verdict against the baseline naming
every difference with both values (red when not comparable) and what changed (flags with
their layer and risk, conditions under test); the flag diff; the metrics, one table per
metric with the runs side by side (value and Δ: "≈" inside the noise, "?" without a noise
estimate) at the chosen latency statistic (p50 / p90 / p99); the cold first points with the
control that keeps them; then the analyses, one tab each, only the open one drawn: scaling
efficiency with its badges, goodput under an SLA, saturation, validity per point (points ×
runs), the Pareto front of interactivity against throughput per GPU with the change between
two of its points, the estimates, the charts; the downloads.

Every number comes from :mod:`domain.results` and every export from :mod:`domain.render`
(which put the verdict and what changed first); this page only lays them out.  Charts are
shown with Vega's own palette (``theme=None``), the one the PNG/SVG/PPTX exports use, so a
run has one colour everywhere."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Hashable

import pandas as pd
import streamlit as st

from db.scaling_gap_inputs import explained_gaps
from domain.compare import config_diff, cross_engine
from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.core.markdown import streamlit_md_text
from domain.core.settings import get_settings
from domain.flags.risk import LayerTable, risk_layers
from domain.render import charts, deck, one_slide, pictures, tables
from domain.render.charts import AnyChart, styled
from domain.results import analysis, curve, energy, estimate_overlay, interval_notes, validity
from pages.parts.common import current_language, db_guard, store
from pages.parts.compare_tables import (
    DEFAULT_KINDS,
    KINDS,
    LATENCIES,
    NOT_COMPARABLE_MARK,
    STATISTICS,
    Point,
    metric_of,
    metric_table,
    points_pivot,
    run_headers,
    scaling_table,
)
from pages.parts.quality_rows import quality_section
from pages.parts.reference import reference_section
from pages.parts.selection import comparison, derived, pick, request_samples
from pages.parts.verdict_boxes import verdict_boxes
from pages.parts.workload_section import workload_section

lang = current_language()
st.title(t("compare.page_title", lang))

KEEP_COLD_KEY = "compare.keep_cold"
STAT_KEY = "compare.stat"
FAR_BELOW_SHOWN = 3  # points far below their estimate listed at once; the rest behind an expander


# -- small helpers -----------------------------------------------------------------------------


md = streamlit_md_text  # text shown through Markdown as literal text (a run name, a flag value)


# -- verdict and what changed --------------------------------------------------------------------


def verdict_section(c: Comparison) -> None:
    """One line per compared run: the verdict naming each difference with both values and the
    change under test from the older run to the newer (the exports' first lines), in one box
    per verdict (``verdict_boxes``); every changed flag with its layer and risk behind a click."""
    verdict_boxes((verdict, md(line)) for verdict, line in zip(c.checklist["verdict"], c.headline_lines, strict=True))
    quality_section(c, lang)
    if c.changed_lines:
        with st.expander(t("compare_page.changed", lang)):
            st.markdown("\n".join(f"- {md(line)}" for line in c.changed_lines))
    # The caveat repeats the verdict lines for the exports' footers; here they are above.
    st.caption(md(" · ".join(line for line in c.caveat if line not in set(c.verdict_lines))))


def _layer_name(layers: LayerTable, layer_id: object) -> str:
    layer = next((known for known in layers.layers if known.id == layer_id), None)
    return (layer.name.get(lang) or layer.name["en"]) if layer else ""


def config_diff_section(c: Comparison) -> None:
    st.subheader(t("compare.config_diff", lang))
    show_all = st.toggle(t("compare.show_all_flags", lang))
    # The differing flags are the comparison's own (``flag_diff``, the same call): only the
    # full list is computed here, when asked for.
    diff = c.flag_diff if not show_all else derived(
        c, ("config_diff", show_all),
        lambda: config_diff.config_diff(c.frame, c.baseline_run_id, c.run_ids, show_all=show_all))
    if diff.empty:
        st.caption(t("compare.no_flag_diff", lang))
    else:
        across_engines = diff["counterpart"].notna().any()
        layers = risk_layers()
        diff = diff.assign(
            run_id=[f"#{r}" for r in diff["run_id"]],
            # The layer's and the risk's names in the page's language, not their ids.
            layer=[_layer_name(layers, v) for v in diff["layer"]],
            risk=[t(f"flags.risk.level.{v}", lang) if isinstance(v, str) else "" for v in diff["risk"]],
            counterpart=[t(f"compare.diff.counterpart.{v}", lang) if isinstance(v, str) else "" for v in
                         diff["counterpart"]],
        ).rename(columns={
            "run_id": t("col.id", lang), "flag": t("compare.diff.flag", lang),
            "baseline_value": t("compare.diff.baseline", lang), "value": t("compare.diff.value", lang),
            "differs": t("compare.diff.differs", lang), "layer": t("compare.diff.layer", lang),
            "risk": t("compare.diff.risk", lang), "counterpart": t("compare.diff.counterpart", lang)})
        if not across_engines:  # runs of one engine: every flag is its own row, no counterpart to name
            diff = diff.drop(columns=[t("compare.diff.counterpart", lang)])
        st.dataframe(diff, hide_index=True, width="stretch")
    notes = derived(c, "cross_engine_notes",
                    lambda: cross_engine.cross_engine_notes(c.frame, c.baseline_run_id, c.run_ids, lang))
    if notes:
        st.caption(t("compare.knob.heading", lang))
        st.markdown("\n".join(f"- {md(line)}" for line in notes))


# -- metrics -------------------------------------------------------------------------------------

def statistic_picker() -> str:
    """The latency statistic for the tables and charts, kept in the URL (``stat=p90``)."""
    wanted = st.query_params.get("stat")
    stat = st.radio(t("compare_page.statistic", lang), STATISTICS, horizontal=True, key=STAT_KEY,
                    index=STATISTICS.index(wanted) if wanted in STATISTICS else 0,
                    format_func=lambda s: t(f"compare_page.stat.{s}", lang))
    st.query_params["stat"] = stat
    if stat == "p90":
        st.caption(t("compare_page.p90_note", lang))
    return str(stat)


def metrics_section(c: Comparison, stat: str) -> list[str]:
    """The tables of the metrics the user picks; returns those metrics (the page's metric
    chart draws the same ones)."""
    st.subheader(t("compare.metrics", lang))
    kinds = st.multiselect(t("compare_page.metrics_shown", lang), list(KINDS), default=list(DEFAULT_KINDS),
                           format_func=lambda k: t(f"compare_page.kind.{k}", lang), key="compare.kinds")
    for kind in kinds:
        metric = metric_of(kind, stat)
        label = analysis.metric_label(metric, lang)
        table, styles, config = metric_table(c, metric, lang)
        st.markdown(f"**{md(label)}**")
        if (table == "").all().all():
            st.caption(t("compare_page.no_values", lang, metric=label))
            continue
        st.dataframe(table.style.apply(lambda _col, s=styles: s[_col.name], axis=0), column_config=config,
                     width="stretch")
        missing = [f"#{r} {s} c={conc}" for (r, s, conc), v in _values(c, metric).items() if analysis.is_missing(v)]
        if missing and metric in analysis.METRIC_BY_NAME and analysis.METRIC_BY_NAME[metric].latency:
            st.caption(md(t("compare_page.p90_missing", lang, metric=label, points=", ".join(missing))))
    st.caption(md(t("compare_page.cells", lang, low_n=analysis.low_n_text(lang))) + "  \n"
               + md(t("compare_page.headers", lang, mark=NOT_COMPARABLE_MARK)))
    st.caption(md(analysis.noise_rule_text(lang, c.practical_threshold_pct)))
    intervals_explained(c, [metric_of(kind, stat) for kind in kinds])
    return [metric_of(kind, stat) for kind in kinds]


def intervals_explained(c: Comparison, metrics: list[str]) -> None:
    """Per point and metric shown: n, the requests' lag-1 autocorrelation ρ and the effective
    sample n_eff behind its interval (domain/results/interval_notes.py)."""
    summary = interval_notes.correlation_summary(c.compare, metrics, lang)
    if summary is not None:
        st.caption(md(summary))
    with st.expander(t("intervals.title", lang)):
        st.caption(md(t("intervals.explain", lang)))
        st.dataframe(interval_notes.interval_rows(c.compare, metrics, lang), hide_index=True, width="stretch",
                     column_config={t("intervals.col.rho", lang): st.column_config.NumberColumn(format="%.2f"),
                                    t("intervals.col.n_eff", lang): st.column_config.NumberColumn(format="%.0f")})


def _values(c: Comparison, metric: str) -> dict[Point, object]:
    if metric not in c.summary.columns:
        return {}
    return dict(zip(zip(c.summary["run_id"], c.summary["scenario"], c.summary["concurrency"], strict=True),
                    c.summary[metric], strict=True))


# -- goodput ----------------------------------------------------------------------------------


def samples_by_point(c: Comparison) -> dict[Point, list[tuple[pd.DataFrame, float]]]:
    """(run, scenario, concurrency) → one (requests, duration_s) per repeat with samples, under
    the scenario names the comparison uses."""
    samples = request_samples(c.frame)
    found: dict[Point, list[tuple[pd.DataFrame, float]]] = {}
    for row in c.frame[["run_id", "scenario", "concurrency", "point_id", "duration_s"]].to_dict("records"):
        point_id = row["point_id"]
        requests = None if analysis.is_missing(point_id) else samples.get(int(point_id))
        if requests is None:  # none kept, or its file is gone
            continue
        found.setdefault((row["run_id"], row["scenario"], row["concurrency"]), []).append(
            (requests, row["duration_s"]))
    return found


def _sla_defaults() -> tuple[float | None, float | None]:
    settings = get_settings()
    if not settings.sla_ms:
        return None, None
    return ((settings.sla_ms, None) if settings.sla_metric.startswith("ttft")
            else (None, settings.sla_ms) if settings.sla_metric.startswith("tpot") else (None, None))


def goodput_section(c: Comparison) -> None:
    st.subheader(t("compare_page.goodput", lang))
    ttft_default, tpot_default = _sla_defaults()
    left, right = st.columns(2)
    ttft = left.number_input(t("compare_page.goodput_ttft", lang), min_value=0.1, value=ttft_default, step=10.0,
                             key="compare.goodput_ttft", help=t("compare_page.goodput_limits_help", lang))
    tpot = right.number_input(t("compare_page.goodput_tpot", lang), min_value=0.1, value=tpot_default, step=1.0,
                              key="compare.goodput_tpot", help=t("compare_page.goodput_limits_help", lang))
    if ttft is None and tpot is None:
        st.caption(t("compare_page.goodput_set_limit", lang))
        return
    good = curve.goodput_table(c.summary, samples_by_point(c), ttft_ms=ttft, tpot_ms=tpot)
    by_point = {(r["run_id"], r["scenario"], r["concurrency"]): r for r in good.to_dict("records")}

    def cell(key: Point) -> str:
        row = by_point.get(key)
        if row is None:
            return ""
        if row["reason"] == "no_samples":
            return t("compare_page.goodput_no_samples", lang)
        return t("compare_page.goodput_cell", lang, rps=tables.format_number(row["goodput_rps"]),
                 pct=f"{100 * row['good_fraction']:.0f}")

    table, config = points_pivot(c, cell, lang)
    st.dataframe(table, column_config=config, width="stretch")
    st.caption(md(curve.goodput_rule_text(lang, ttft, tpot)))
    if (good["reason"] == "no_samples").any():
        st.caption(curve.goodput_reason_text("no_samples", lang))


# -- scaling efficiency, cold first points ------------------------------------------------------------


def cold_points_notice(c: Comparison) -> None:
    """The cold first points and the toggle that keeps them: above the analyses' tabs, not in
    one of them, because keeping them changes the efficiencies, knees and saturation points."""
    cold = c.scaling[c.scaling["cold"].fillna(False).astype(bool)]
    if cold.empty:
        return
    points = ", ".join(f"#{r} {s} c={conc}" for r, s, conc in zip(cold["run_id"], cold["scenario"],
                                                                cold["concurrency"], strict=True))
    st.warning(md(t("compare_page.cold_points", lang, points=points)) + "  \n"
               + md(validity.badge_explanation("cold_first_point", lang)), icon=":material/ac_unit:")
    st.toggle(t("compare_page.keep_cold", lang), key=KEEP_COLD_KEY, help=t("compare_page.keep_cold_help", lang))


def scaling_section(c: Comparison) -> None:
    st.subheader(t("compare_page.scaling", lang))
    table, config = scaling_table(c, lang)
    st.dataframe(table, column_config=config, width="stretch")
    st.caption(md(curve.scaling_rule_text(lang)))
    st.caption(md(t("compare_page.near_linear_note", lang,
                    super_pct=f"{curve.SUPER_LINEAR_EFFICIENCY * 100:g}")))
    if c.scaling["super_linear"].fillna(False).astype(bool).any():
        st.caption(md(validity.badge_explanation("super_linear", lang)))


# -- saturation and validity ------------------------------------------------------------------


def saturation_section(c: Comparison) -> None:
    """Scenarios × runs, each cell the concurrency where the sweep saturates and the rule that
    fired (with its setting), or "not saturated"."""
    settings = get_settings()
    st.subheader(t("compare.saturation", lang))
    headers = run_headers(c)
    by_curve = {(r["run_id"], r["scenario"]): r for r in c.saturation.to_dict("records")}

    def cell(run_id: int, scenario: object) -> str:
        row = by_curve.get((run_id, scenario))
        if row is None:
            return ""
        rule = curve.rule_text(pd.Series(row), lang, gain_threshold_pct=settings.saturation_gain_pct,
                               sla_metric=settings.sla_metric, sla_threshold_ms=settings.sla_ms)
        at = row["concurrency"]
        return rule if analysis.is_missing(at) else f"c={tables.format_number(at)} · {rule}"

    scenarios = sorted(c.summary["scenario"].unique(), key=str)
    table = pd.DataFrame({f"#{run_id}": [cell(run_id, s) for s in scenarios] for run_id in headers},
                         index=pd.Index(scenarios, name=t("compare.col.scenario", lang)))
    config = {f"#{run_id}": st.column_config.TextColumn(label, help=full) for run_id, (label, full) in headers.items()}
    st.dataframe(table, column_config=config, width="stretch")


SOURCE_BADGES = frozenset({"emulated", "imported"})  # true of every point of a run: its name says so


def validity_section(c: Comparison) -> None:
    """Points × runs, each cell the point's badges as short labels; each column's help and the
    legend below give every badge's label and one-sentence explanation."""
    st.subheader(t("compare.validity", lang))
    badges = validity.badges_by_point(c.badges) if not c.badges.empty else pd.DataFrame()
    by_point: dict[Point, list[str]] = {}
    for row in badges.to_dict("records"):
        shown = [b for b in row["badges"] if b not in SOURCE_BADGES]
        if shown:
            by_point[(row["run_id"], row["scenario"], row["concurrency"])] = shown
    if not by_point:
        st.caption(t("compare.no_badges", lang))
        return
    table, config = points_pivot(c, lambda key: ", ".join(t(f"compare_page.badge_short.{b}", lang)
                                                          for b in by_point.get(key, [])), lang)
    for run_id in run_headers(c):
        present = sorted({b for (r, _, _), names in by_point.items() if r == run_id for b in names})
        column = config[f"#{run_id}"]
        help_text = column.get("help") or ""
        column["help"] = "\n\n".join([help_text, *(_badge_line(b) for b in present)])
    st.dataframe(table, column_config=config, width="stretch")
    used = sorted({b for names in by_point.values() for b in names})
    with st.expander(t("compare_page.validity_legend", lang), expanded=True):
        st.markdown("\n".join(f"- {md(_badge_line(b))}" for b in used))
        st.caption(t("compare_page.validity_source_note", lang))


def _badge_line(badge: str) -> str:
    return (f"{t(f'compare_page.badge_short.{badge}', lang)} = {validity.badge_label(badge, lang)}: "
            f"{validity.badge_explanation(badge, lang)}")


# -- Pareto -------------------------------------------------------------------------------------


def pareto_section(c: Comparison, pareto: pd.DataFrame, stat: str, chart: AnyChart) -> None:
    st.subheader(t("compare_page.pareto", lang))
    show_chart(c, (stat, "pareto"), chart)
    st.caption(t("compare_page.pareto_tpot", lang, stat=t(f"compare_page.stat.{stat}", lang)))
    no_energy = energy.energy_absence_line(c.frame, lang)  # the labels' J/token: which runs have none, and why
    if no_energy is not None:
        st.caption(md(no_energy))
    plotted = set(pareto.dropna(subset=["interactivity", "throughput_per_gpu"])["run_id"])
    absent = [label for run_id, (label, _) in run_headers(c).items() if run_id not in plotted]
    if absent:
        st.caption(md(t("compare_page.pareto_absent", lang, runs=", ".join(absent))))
    front = pareto[pareto["on_frontier"].astype(bool)]
    keys: list[Point] = list(zip(front["run_id"], front["scenario"], front["concurrency"], strict=True))
    if len(keys) < 2:
        st.caption(t("compare_page.pareto_too_few", lang))
        return
    headers = run_headers(c)
    labels = {key: t("compare_page.pareto_point", lang, run=headers.get(int(key[0]), (f"#{key[0]}",))[0],
                     scenario=key[1], concurrency=key[2]) for key in keys}
    left, right = st.columns(2)
    a = left.selectbox(t("compare_page.pareto_from", lang), keys, index=0, format_func=labels.__getitem__,
                       key="compare.pareto_a")
    b = right.selectbox(t("compare_page.pareto_to", lang), keys, index=1, format_func=labels.__getitem__,
                        key="compare.pareto_b")
    change = curve.pareto_change(pareto, a, b)
    box = st.info if change["problem"] is None else st.warning
    box(md(curve.pareto_change_text(change, lang, labels)), icon=":material/swap_horiz:")


# -- charts and downloads ---------------------------------------------------------------------------


SUBTITLE_CELLS = 140  # a subtitle line's width in half-width characters (a CJK one counts two): ~900 px


def _wrapped_subtitle(chart: AnyChart) -> AnyChart:
    """The chart with a long subtitle broken into lines: Vega never wraps a title, so one long
    line (the scaling chart's rule and badges) widens the chart past the page."""
    title = getattr(chart, "title", None)
    subtitle = getattr(title, "subtitle", None)
    if not isinstance(subtitle, str) or _cells(subtitle) <= SUBTITLE_CELLS:
        return chart
    out = chart.copy(deep=True)
    out.title.subtitle = _wrap_cells(subtitle, SUBTITLE_CELLS)
    return out


def _cells(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _wrap_cells(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` cells, broken after a space or any wide character."""
    lines, line = [], ""
    for word in re.findall(r"[^\s]+\s*", text):
        pieces = [word] if _cells(word) <= width else list(word)  # a CJK run has no spaces: break anywhere
        for piece in pieces:
            if line and _cells(line + piece) > width:
                lines.append(line.rstrip())
                line = ""
            line += piece
    return [*lines, line.rstrip()] if line.strip() else lines


PAGE_LEGEND_LIMIT = 560  # px: a legend below the chart may use the page's width (about 940 px at 1400)


def show_chart(c: Comparison, key: Hashable, chart: AnyChart) -> None:
    """:func:`on_page` of ``chart``, built once per comparison and ``key``."""
    st.altair_chart(derived(c, ("on_page", key), lambda: on_page(chart)), theme=None)


def on_page(chart: AnyChart) -> AnyChart:
    """The chart as the exports style it, with its legends below it rather than to its right:
    at 1400 px the page is about 940 px wide, and two 340 px panels plus a legend of long run
    names do not fit beside each other.  theme=None keeps Vega's own categorical palette, the
    one every export uses (Streamlit's theme would recolour the runs in shades of one hue)."""
    return styled(_wrapped_subtitle(chart)).configure_legend(
        labelFont=charts.FONT, titleFont=charts.FONT, labelFontSize=11, titleFontSize=12,
        labelLimit=PAGE_LEGEND_LIMIT, orient="bottom", direction="vertical")


def pareto_of(c: Comparison, stat: str) -> pd.DataFrame:
    """The Pareto points at the chosen TPOT statistic, once per comparison and statistic."""
    return derived(c, ("pareto", stat), lambda: curve.pareto_points(c.summary, tpot_metric=f"tpot_{stat}"))


def slide_chart(c: Comparison, stat: str, title: str) -> AnyChart:
    """One chart of the slide set (:func:`_slide_builders`), built when first needed, then
    once per comparison and statistic (Altair takes about a second for all five)."""
    return derived(c, ("chart", stat, title), _slide_builders(c, stat)[title])


def slide_set(c: Comparison, stat: str) -> list[tuple[str, AnyChart]]:
    """The whole slide set, for the downloads."""
    return [(title, slide_chart(c, stat, title)) for title in _slide_builders(c, stat)]


def metric_chart_of(c: Comparison, metrics: list[str]) -> AnyChart:
    """The slide set's metric chart, of ``metrics`` only (the tables shown)."""
    return derived(c, ("metric_chart", *metrics), lambda: charts.metric_chart(
        c.summary, metrics or ["output_tok_s"], lang, saturation=c.saturation, columns=2,
        estimates=tables.comparison_estimates(c)))


def _slide_builders(c: Comparison, stat: str) -> dict[str, Callable[[], AnyChart]]:
    """The slide set at the chosen statistic, by title, in slide order: metric panels two to
    a row (three cut off the last panel and its legend at 1400 px); dashed estimate lines
    beside the measured curves."""
    latency = [f"{name}_{stat}" for name in LATENCIES]
    return {
        t("compare.chart.metrics_title", lang): lambda: charts.metric_chart(
            c.summary, ["output_tok_s", "qps", *latency], lang, saturation=c.saturation, columns=2,
            estimates=tables.comparison_estimates(c)),
        t("compare.chart.pareto_title", lang): lambda: charts.pareto_chart(pareto_of(c, stat), lang, stat),
        t("compare.chart.latency_title", lang): lambda: charts.latency_vs_throughput_chart(
            c.summary, lang, metrics=(f"ttft_{stat}", f"e2e_{stat}"), estimates=tables.comparison_estimates(c)),
        t("compare.chart.gpu_title", lang): lambda: charts.gpu_chart(c.summary, lang, saturation=c.saturation),
        t("compare.chart.scaling_title", lang): lambda: charts.scaling_chart(c.scaling, lang, c.summary),
    }


def estimate_section(c: Comparison) -> None:
    """Measured ÷ estimated per point, a sentence per point far below its estimate, and how
    the estimate was made and checked (its cross-validated error)."""
    estimates = tables.comparison_estimates(c)
    st.subheader(t("estimate_overlay.section", lang))
    far_below = estimate_overlay.far_below_sentences(estimates, lang)
    if far_below:
        # One box, not one per point: nine runs of a slow sweep made sixty warnings.
        st.warning("\n".join(f"- {md(s)}" for s in far_below[:FAR_BELOW_SHOWN]))
    if len(far_below) > FAR_BELOW_SHOWN:
        with st.expander(t("estimate_overlay.far_below_more", lang, n=len(far_below) - FAR_BELOW_SHOWN)):
            st.markdown("\n".join(f"- {md(s)}" for s in far_below[FAR_BELOW_SHOWN:]))
    if estimate_overlay.has_estimates(estimates):
        # Estimates to a tenth, ratios to a hundredth: the table showed four decimals of both.
        formats = {t(f"estimate_overlay.col.{column}", lang): st.column_config.NumberColumn(
            format="%.2f" if column.startswith("ratio_") else "%.1f") for column in estimate_overlay.TABLE_COLUMNS}
        st.dataframe(estimate_overlay.estimate_table(estimates, lang), hide_index=True, column_config=formats)
    for line in (estimate_overlay.calibration_lines(estimates, lang)
                 or estimate_overlay.refusal_lines(estimates, lang)):
        st.caption(line)


def charts_section(c: Comparison, stat: str, metrics: list[str]) -> None:
    """One tab per chart, and only the open tab's chart built and drawn: the browser takes
    about a second and a half to draw all four at nine runs (Vega, sixteen panels), most
    of the page's time, and a chart in a closed tab is drawn all the same.  The metric
    chart draws the metrics whose tables are shown; the exports keep every metric."""
    st.subheader(t("compare.charts", lang))
    metrics_title = t("compare.chart.metrics_title", lang)
    titles = [title for title in _slide_builders(c, stat) if title != t("compare.chart.pareto_title", lang)]
    tabs = st.tabs(titles, key=f"compare.chart_tab.{lang}", on_change="rerun")
    for tab, title in zip(tabs, titles, strict=True):
        if not tab.open:
            continue
        with tab:
            chart = metric_chart_of(c, metrics) if title == metrics_title else slide_chart(c, stat, title)
            show_chart(c, (stat, title, *(metrics if title == metrics_title else ())), chart)
            if title == t("compare.chart.gpu_title", lang) and _no_gpu_values(c):
                st.caption(t("compare_page.no_gpu_note", lang))


def analyses(c: Comparison, stat: str, metrics: list[str]) -> dict[str, Callable[[], None]]:
    """The analyses below the metrics, by tab, in reading order."""
    return {
        "scaling": lambda: scaling_section(c),
        "goodput": lambda: goodput_section(c),
        "saturation": lambda: saturation_section(c),
        "validity": lambda: validity_section(c),
        "pareto": lambda: pareto_section(c, pareto_of(c, stat), stat,
                                         slide_chart(c, stat, t("compare.chart.pareto_title", lang))),
        "estimates": lambda: estimate_section(c),
        "charts": lambda: charts_section(c, stat, metrics),
        "workloads": lambda: workload_section(c, lang),
    }


def analyses_section(c: Comparison, stat: str, metrics: list[str]) -> None:
    """One tab per analysis, and only the open tab drawn.  Drawn all at once, the seven took
    the browser about a second and a half at nine runs (two Vega charts, five data grids),
    more than the rest of the page; a closed tab's content is drawn all the same, so the
    tabs are Streamlit's stateful ones (opening one reruns the page, which recomputes
    nothing: every analysis is derived once per comparison)."""
    st.subheader(t("compare_page.analyses", lang))
    sections = analyses(c, stat, metrics)
    tabs = st.tabs([t(f"compare_page.tab.{name}", lang) for name in sections], key=f"compare.analysis_tab.{lang}",
                   on_change="rerun")
    for tab, draw in zip(tabs, sections.values(), strict=True):
        if tab.open:
            with tab:
                draw()


def _no_gpu_values(c: Comparison) -> bool:
    return all(pd.to_numeric(c.summary[m], errors="coerce").isna().all() for m in charts.GPU_METRICS)


def deck_gaps(c: Comparison) -> dict[int, pd.DataFrame]:
    """Each compared run's "why not N×?" split for the deck (db/scaling_gap_inputs.py, as
    ``runner export`` reads it); none when the database cannot be read (the reason is shown)."""
    with db_guard(lang) as guard:
        gaps = explained_gaps(store(), [c.baseline_run_id, *c.run_ids])
    return {} if guard.failed else gaps


PPTX_MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def downloads_section(c: Comparison, stat: str, metrics: list[str]) -> None:
    """The one slide first (the metrics shown, at the chosen statistic), then the full deck,
    CSV and Markdown beside it, each one click; the chart pictures behind a toggle.  A
    download does not rerun the page (on_click="ignore"): a rerun would render every file
    again and withdraw the ones a following click was fetching.  Each file is written when
    clicked (Streamlit calls ``data`` then), not on every rerun of the page."""
    st.subheader(t("compare.downloads", lang))
    base = f"benchdeck-compare-{c.baseline_run_id}-" + "-".join(map(str, c.run_ids))
    page_ref = f"/compare?baseline={c.baseline_run_id}&runs={','.join(map(str, c.run_ids))}"
    report_ref = f"{base}-deck.pptx · {page_ref}"
    st.download_button(t("compare.download_slide", lang),
                       lambda: one_slide.one_slide(c, report_ref, metrics or one_slide.DEFAULT_METRICS),
                       file_name=f"{base}-slide.pptx", mime=PPTX_MIME, on_click="ignore", type="primary",
                       icon=":material/slideshow:", help=t("compare.download_slide_help", lang))
    c1, c2, c3 = st.columns(3)
    c1.download_button(t("compare.download_deck", lang),
                       lambda: deck.comparison_deck(c, chart_set=slide_set(c, stat), gaps=deck_gaps(c)),
                       file_name=f"{base}-deck.pptx", mime=PPTX_MIME, on_click="ignore")
    c2.download_button("CSV", lambda: tables.comparison_csv(c), file_name=f"{base}.csv", mime="text/csv",
                       on_click="ignore")
    c3.download_button("Markdown", lambda: tables.comparison_markdown(c), file_name=f"{base}.md",
                       mime="text/markdown", on_click="ignore")
    if st.toggle(t("compare.prepare_files", lang), key="compare.prepare", help=t("compare.prepare_help", lang)):
        chart_pictures(c, stat, base)


def chart_pictures(c: Comparison, stat: str, base: str) -> None:
    """PNG and SVG of every chart of the slide set; rendering takes seconds, so a bar moves per file."""
    chart_set = slide_set(c, stat)
    steps = 2 * len(chart_set)
    bar = st.progress(0.0, text=t("compare.rendering", lang))
    for index, (title, chart) in enumerate(chart_set):
        a, b = st.columns(2)
        bar.progress(2 * index / steps, text=f"{t('compare.rendering', lang)} {title}")
        a.download_button(f"PNG · {title}", pictures.comparison_chart_png(c, chart),
                          file_name=f"{base}-chart{index + 1}.png", mime="image/png", on_click="ignore")
        b.download_button(f"SVG · {title}", pictures.comparison_chart_svg(c, chart),
                          file_name=f"{base}-chart{index + 1}.svg", mime="image/svg+xml", on_click="ignore")
    bar.empty()


# -- the page -----------------------------------------------------------------------------------

selection = pick(lang)
if selection is not None:
    # The toggle is drawn below (beside the cold points it concerns); its state from the last
    # rerun decides how this one is computed.
    result = comparison(selection, lang, keep_cold=bool(st.session_state.get(KEEP_COLD_KEY, False)))
    if result is not None:
        verdict_section(result)
        reference_section(result, lang)  # a published measurement pinned beside the runs
        config_diff_section(result)
        statistic = statistic_picker()
        shown_metrics = metrics_section(result, statistic)
        cold_points_notice(result)
        analyses_section(result, statistic, shown_metrics)
        downloads_section(result, statistic, shown_metrics)
