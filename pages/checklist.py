"""Which runs are comparable: a matrix of runs × conditions against the baseline, grouped
by condition family (✓ match, ✗ both values, ? unknown, ≠ intended), the high-risk server
flags (quantization incl. KV-cache dtype, speculative decoding, experimental) as conditions
of their own, every difference that makes a run not comparable marked with both values, a
verdict line per run (red when not comparable), and each run's highest rule-risk layer and
broken contest rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from domain.compare import comparability, config_diff
from domain.core.i18n import t
from domain.core.markdown import streamlit_md_text
from pages.parts.common import current_language
from pages.parts.quality_rows import quality_section
from pages.parts.selection import comparison, pick
from pages.parts.verdict_boxes import verdict_boxes

lang = current_language()
st.title(t("checklist.page_title", lang))
st.caption(t("checklist.help", lang))


def cell_text(row: Mapping[str, Any]) -> str:
    """A matrix cell with both values; a difference (or one-sided unknown) that makes the run
    not comparable says so."""
    text = comparability.state_text(row, lang)
    if bool(row["fatal"]) and row["state"] in ("differ", "unknown"):
        text += t("compare_page.fatal_mark", lang)
    return text


def matrix_table(matrix: pd.DataFrame, labels: dict[int, str]) -> pd.DataFrame:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for row in matrix.to_dict("records"):
        key = (comparability.family_label(row["family"], lang), comparability.condition_label(row["condition"], lang))
        rows.setdefault(key, {})[labels[row["run_id"]]] = cell_text(row)
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=[t("checklist.family", lang),
                                                                t("checklist.condition", lang)])
    return table


FATAL_MARK = {t("compare_page.fatal_mark", language) for language in ("ja", "en")}


def _cell_style(value: object) -> str:
    text = str(value)
    if text.startswith("✓"):
        return "color: #1a7f37"
    if any(text.endswith(mark) for mark in FATAL_MARK):
        return "color: #cf222e; font-weight: 700; background-color: #ffebe9"
    if text.startswith("✗"):
        return "color: #cf222e"
    return "color: #9a6700"


def risk_table(risk: pd.DataFrame) -> pd.DataFrame:
    """The risk columns in the page's language: headers and risk levels named, lists joined."""
    return pd.DataFrame({
        t("col.id", lang): [f"#{r}" for r in risk["run_id"]],
        t("checklist.col.risk_version", lang): risk["risk_version"],
        t("checklist.col.highest_risk", lang): [t(f"flags.risk.level.{v}", lang) if isinstance(v, str) else "—"
                                                for v in risk["highest_risk"]],
        t("checklist.col.broken_rules", lang): [", ".join(v) for v in risk["broken_rules"]],
        t("checklist.col.unclassified_flags", lang): [", ".join(f"--{f}" for f in flags)
                                                     for flags in risk["unclassified_flags"]],
        t("checklist.col.notes", lang): [", ".join(v) for v in risk["notes"]],
    })


selection = pick(lang)
if selection is not None:
    result = comparison(selection, lang)
    if result is not None and result.run_ids:
        labels = {int(r): f"#{r}" for r in result.matrix["run_id"].unique()}
        # As literal text: a value (an imported model name) can neither format nor typeset ($…$).
        verdict_boxes((row["verdict"], streamlit_md_text(f"#{row['run_id']} — {comparability.summary_line(row, lang)}"
                                                          )) for row in result.checklist.to_dict("records"))
        quality_section(result, lang)
        table = matrix_table(result.matrix, labels)
        st.dataframe(table.style.map(_cell_style), width="stretch", height=min(900, 38 + 35 * len(table)))
        st.caption(t("compare_page.fatal_legend", lang))
        st.subheader(t("checklist.risk", lang))
        st.dataframe(risk_table(config_diff.risk_columns(result.frame)), hide_index=True, width="stretch")
        st.page_link("pages/compare.py", label=t("checklist.to_compare", lang), icon=":material/compare_arrows:",
                     query_params=dict(st.query_params))
