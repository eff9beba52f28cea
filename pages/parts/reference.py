"""The compare page's reference point: a published measurement pinned beside the team's runs.

A row of the silicon table (domain/importer/reference.py) is imported as an llm-d report,
once (importing it again finds the same run by its content), and added to the compared
runs: the checklist then checks its conditions against the baseline like any run's, and
the verdict says what differs or is unknown.  The reference's published means are shown
beside the baseline's means at the same point.
"""

from __future__ import annotations

import io
import json

import pandas as pd
import streamlit as st

from db import DuplicateImport
from db.imported_runs import import_file
from domain.compare import comparability
from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.importer.conditions import ImportConditions
from domain.importer.reference import TOOL, ReferenceRow, reference_file_name, reference_report, reference_rows
from pages.parts import selection as picker
from pages.parts.auth import current_actor
from pages.parts.common import clear_run_caches, db_guard, store

ROW_KEY = "reference_row"


def _pin(row: ReferenceRow, lang: str) -> int | None:
    """The row's run, imported now or found from an earlier pin; None when the write was refused."""
    data = json.dumps(reference_report(row)).encode("utf-8")
    with db_guard(lang) as guard:
        try:
            result = import_file(store(), io.BytesIO(data), ImportConditions(), actor=current_actor(),
                                 file_name=reference_file_name(row))
        except DuplicateImport as exc:
            return int(exc.run_ids[0])
    if guard.failed or result.refused:
        return None
    clear_run_caches()
    for cached in (picker.cached_choices, picker.cached_picker, picker.cached_picker_by_id):
        cached.clear()
    return int(result.run_ids[0])


def _pin_form(c: Comparison, lang: str) -> None:
    rows = reference_rows()
    choice = st.selectbox(t("reference.row", lang), rows, index=None, key=ROW_KEY, format_func=ReferenceRow.label,
                          placeholder=t("reference.pick", lang))
    if choice is None or not st.button(t("reference.pin", lang), key="reference_pin", icon=":material/push_pin:"):
        return
    run_id = _pin(choice, lang)
    if run_id is None:
        return
    others = [r for r in dict.fromkeys([*c.run_ids, run_id]) if r != c.baseline_run_id]
    st.query_params["runs"] = ",".join(map(str, others))
    st.rerun()


def _reference_runs(c: Comparison) -> list[int]:
    frame = c.frame
    return [int(r) for r in c.run_ids if set(frame.loc[frame["run_id"] == r, "bench_tool"].dropna()) == {TOOL}]


def _beside(c: Comparison, run_id: int, lang: str) -> pd.DataFrame:
    """The reference's published means and the baseline's means at the same (scenario, concurrency)."""
    frame = c.frame
    ref = frame[frame["run_id"] == run_id]
    base = frame[frame["run_id"] == c.baseline_run_id].set_index(["scenario", "concurrency"])
    rows = []
    for point in ref.to_dict("records"):
        key = (point["scenario"], point["concurrency"])
        mine = base.loc[[key]].iloc[0] if key in base.index else None
        for metric in ("ttft", "tpot"):
            rows.append({t("reference.col.point", lang): f"{point['scenario']} @ {point['concurrency']}",
                         t("reference.col.metric", lang): metric.upper(),
                         t("reference.col.reference", lang): point[f"{metric}_mean_ms"],
                         t("reference.col.baseline", lang, run_id=c.baseline_run_id):
                             mine[f"{metric}_mean_ms"] if mine is not None else None})
    return pd.DataFrame(rows)


def reference_section(c: Comparison, lang: str) -> None:
    """Pin a published measurement; show each pinned one beside the baseline."""
    with st.expander(t("reference.title", lang), icon=":material/push_pin:", expanded=bool(_reference_runs(c))):
        st.caption(t("reference.help", lang))
        for run_id in _reference_runs(c):
            rows = c.checklist[c.checklist["run_id"] == run_id].to_dict("records")
            verdict = comparability.summary_line(rows[0], lang) if rows else "?"
            st.markdown(t("reference.pinned", lang, run_id=run_id, baseline=c.baseline_run_id, verdict=verdict))
            st.dataframe(_beside(c, run_id, lang), hide_index=True, width="stretch")
        _pin_form(c, lang)
