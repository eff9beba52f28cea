"""Compare runs side by side: the comparability warning, the flags that differ, the metrics
table with deltas (≈ inside the noise), saturation, validity badges, charts for slides,
and the downloads (CSV, Markdown, PNG, SVG, PPTX) — all from domain/ functions."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.results import analysis, comparability, validity
from domain.results.comparison import Comparison
from domain.slides import deck, tables
from domain.slides.charts import styled
from pages.parts.common import current_language
from pages.parts.selection import comparison, pick

lang = current_language()
st.title(t("compare.page_title", lang))


def comparability_warning(c: Comparison) -> None:
    for _, row in c.checklist.iterrows():
        line = f"#{row['run_id']} — {comparability.summary_line(row, lang)}"
        if row["verdict"] == "comparable":
            st.success(line, icon=":material/check_circle:")
        elif row["verdict"] == "not_comparable":
            st.error(line, icon=":material/block:")
        else:
            st.warning(line, icon=":material/warning:")
    st.caption(" · ".join(c.caveat))


def config_diff_section(c: Comparison) -> None:
    st.subheader(t("compare.config_diff", lang))
    show_all = st.toggle(t("compare.show_all_flags", lang))
    diff = comparability.config_diff(c.frame, c.baseline_run_id, c.run_ids, show_all=show_all)
    if diff.empty:
        st.caption(t("compare.no_flag_diff", lang))
    else:
        diff = diff.assign(run_id=[f"#{r}" for r in diff["run_id"]]).rename(columns={
            "run_id": t("col.id", lang), "flag": t("compare.diff.flag", lang),
            "baseline_value": t("compare.diff.baseline", lang), "value": t("compare.diff.value", lang),
            "differs": t("compare.diff.differs", lang), "layer": t("compare.diff.layer", lang),
            "risk": t("compare.diff.risk", lang)})
        st.dataframe(diff, hide_index=True, width="stretch")


VERDICT_STYLE = {"better": "color: #1a7f37; font-weight: 600", "worse": "color: #cf222e; font-weight: 600"}


def metrics_section(c: Comparison) -> pd.DataFrame:
    st.subheader(t("compare.metrics", lang))
    table = analysis.wide_table(c.compare, lang)
    verdicts = c.compare.set_index(["scenario", "concurrency", "metric", "run_id"])["verdict"]
    # Column labels → (run, metric), worked out once rather than per styled column.
    delta_metric = {t("compare.delta_of", lang, metric=analysis.metric_label(m.name, lang)): m.name
                    for m in analysis.METRICS}
    run_of_label = {analysis.run_label(r, n, s, lang): r for r, n, s in
                    zip(c.compare["run_id"], c.compare["run_name"], c.compare["source"], strict=True)}

    def colours(col: pd.Series) -> list[str]:
        run_label, metric_label = col.name
        metric = delta_metric.get(metric_label)
        if metric is None:
            return [""] * len(col)
        run_id = run_of_label.get(run_label)
        return [VERDICT_STYLE.get(str(verdicts.get((scenario, concurrency, metric, run_id))), "")
                for scenario, concurrency in col.index]

    st.dataframe(table.style.apply(colours, axis=0), width="stretch")
    st.caption(t("compare.noise_note", lang))
    return table


def saturation_section(c: Comparison) -> None:
    settings = get_settings()
    st.subheader(t("compare.saturation", lang))
    rows = [{t("col.id", lang): f"#{row['run_id']}", t("compare.col.scenario", lang): row["scenario"],
             t("compare.saturation_at", lang): analysis.rule_text(
                 row, lang, gain_threshold_pct=settings.saturation_gain_pct, sla_metric=settings.sla_metric,
                 sla_threshold_ms=settings.sla_ms)}
            for _, row in c.saturation.iterrows()]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    badges = validity.badges_by_point(c.badges)
    st.subheader(t("compare.validity", lang))
    if badges.empty:
        st.caption(t("compare.no_badges", lang))
    else:
        shown = pd.DataFrame({
            t("col.id", lang): [f"#{r}" for r in badges["run_id"]],
            t("compare.col.scenario", lang): badges["scenario"],
            t("compare.col.concurrency", lang): badges["concurrency"],
            t("compare.validity", lang): [", ".join(validity.badge_label(b, lang) for b in names)
                                          for names in badges["badges"]],
        })
        st.dataframe(shown, hide_index=True, width="stretch")


def charts_section(c: Comparison) -> list[tuple[str, Any]]:
    st.subheader(t("compare.charts", lang))
    charts = deck.standard_charts(c)
    for _title, chart in charts:  # each chart carries its own title
        st.altair_chart(styled(chart))
    return charts


def downloads_section(c: Comparison, table: pd.DataFrame, charts: list[tuple[str, Any]]) -> None:
    st.subheader(t("compare.downloads", lang))
    base = f"benchdeck-compare-{c.baseline_run_id}-" + "-".join(map(str, c.run_ids))
    c1, c2, c3 = st.columns(3)
    c1.download_button("CSV", tables.table_csv(table, c.caveat), file_name=f"{base}.csv", mime="text/csv")
    c2.download_button("Markdown", tables.table_markdown(table, c.caveat, lang), file_name=f"{base}.md",
                       mime="text/markdown")
    if not st.toggle(t("compare.prepare_files", lang), key="compare.prepare",
                     help=t("compare.prepare_help", lang)):
        return
    with st.spinner(t("compare.rendering", lang)):
        c3.download_button("PPTX", deck.comparison_deck(c), file_name=f"{base}.pptx",
                           mime="application/vnd.openxmlformats-officedocument.presentationml.presentation")
        for index, (title, chart) in enumerate(charts):
            a, b = st.columns(2)
            a.download_button(f"PNG · {title}", deck.chart_png(chart, c.caveat),
                              file_name=f"{base}-chart{index + 1}.png", mime="image/png")
            b.download_button(f"SVG · {title}", deck.chart_svg(chart, c.caveat),
                              file_name=f"{base}-chart{index + 1}.svg", mime="image/svg+xml")


selection = pick(lang)
if selection is not None:
    result = comparison(selection, lang)
    if result is not None:
        comparability_warning(result)
        config_diff_section(result)
        metrics_table = metrics_section(result)
        saturation_section(result)
        drawn = charts_section(result)
        downloads_section(result, metrics_table, drawn)
