"""Which runs are comparable: a matrix of runs × conditions against the baseline, grouped
by condition family (✓ match, ✗ both values, ? unknown, ≠ intended), a summary line per
run, and each run's highest rule-risk layer and broken contest rules."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from domain.core.i18n import t
from domain.results import comparability
from pages.parts.common import current_language
from pages.parts.selection import comparison, pick

lang = current_language()
st.title(t("checklist.page_title", lang))
st.caption(t("checklist.help", lang))


def matrix_table(matrix: pd.DataFrame, labels: dict[int, str]) -> pd.DataFrame:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for _, row in matrix.iterrows():
        key = (comparability.family_label(row["family"], lang), comparability.condition_label(row["condition"], lang))
        rows.setdefault(key, {})[labels[row["run_id"]]] = comparability.state_text(row, lang)
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=[t("checklist.family", lang),
                                                                t("checklist.condition", lang)])
    return table


def _cell_style(value: object) -> str:
    text = str(value)
    if text.startswith("✓"):
        return "color: #1a7f37"
    if text.startswith("✗"):
        return "color: #cf222e; font-weight: 600"
    return "color: #9a6700"


selection = pick(lang)
if selection is not None:
    result = comparison(selection, lang)
    if result is not None and result.run_ids:
        labels = {int(r): f"#{r}" for r in result.matrix["run_id"].unique()}
        for _, row in result.checklist.iterrows():
            st.markdown(f"**#{row['run_id']}** — {comparability.summary_line(row, lang)}")
        table = matrix_table(result.matrix, labels)
        st.dataframe(table.style.map(_cell_style), width="stretch", height=min(900, 38 + 35 * len(table)))
        st.subheader(t("checklist.risk", lang))
        risk = comparability.risk_columns(result.frame)
        st.dataframe(risk, hide_index=True, width="stretch")
        st.page_link("pages/compare.py", label=t("checklist.to_compare", lang), icon=":material/compare_arrows:",
                     query_params=dict(st.query_params))
