"""The compare page's workloads tab: the prefix cache per prefix-group size and per point
(the server's own cached-token counts, unexpected hits marked), and each rate sweep as a
curve with its knee beside the knee of each concurrency sweep
(domain/render/workload_charts.py draws them; the exports carry the same tables)."""

from __future__ import annotations

import streamlit as st

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render import tables, workload_charts
from domain.render.charts import styled
from domain.results import workload_report as report


def workload_section(c: Comparison, lang: str) -> None:
    st.subheader(t("workload.page.title", lang))
    groups, points = workload_charts.cache_group_table(c), workload_charts.cache_point_table(c)
    rates = workload_charts.rate_chart(c)
    if groups.empty and points.empty and rates is None:
        st.caption(t("workload.page.none", lang))
        return
    if not groups.empty:
        st.markdown(f"**{t('workload.section.cache_groups', lang)}**")
        st.dataframe(groups, hide_index=True, width="stretch")
    if not points.empty:
        st.markdown(f"**{t('workload.section.cache_points', lang)}**")
        st.dataframe(points, hide_index=True, width="stretch")
        st.caption(t("workload.page.cache_note", lang))
    if rates is not None:
        _rates(c, rates, lang)
    data = tables.workload_csv(c)
    if data is not None:
        base = f"benchdeck-compare-{c.baseline_run_id}-" + "-".join(map(str, c.run_ids))
        st.download_button(t("workload.page.download", lang), data, file_name=f"{base}-workloads.csv",
                           mime="text/csv", on_click="ignore")


def _rates(c: Comparison, chart: object, lang: str) -> None:
    st.markdown(f"**{t('workload.section.rate_curve', lang)}**")
    st.altair_chart(styled(chart), theme=None)  # type: ignore[arg-type]
    st.dataframe(workload_charts.knee_table(c), hide_index=True, width="stretch")
    concurrency = c.saturation[~c.saturation["scenario"].astype(str).str.contains(".rate", regex=False)]
    lines = [report.knee_text(row, lang, "concurrency") for _, row in concurrency.iterrows()]
    if lines:
        st.markdown("\n".join(f"- #{row.run_id} {line}" for row, line in
                              zip(concurrency.itertuples(), lines, strict=True)))
    st.caption(t("workload.page.never_compared", lang))
