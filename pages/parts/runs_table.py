"""A table of runs whose selected row opens that run's page in this tab.

The tables' "open" links (Streamlit's LinkColumn) open a new browser tab, and a new tab
loads Streamlit's scripts and opens a session before the run page can show (about 2 s in
Chromium here, ``python -m bench pages_browser``, reload column); a page switch inside the
open app takes a fraction of that (in app column).  Selecting a row switches page; the link
stays for those who want the new tab.

The tables sit in fragments that redraw every few seconds, so the row a user picked may
have moved by the rerun that the pick starts (a new run on top).  The selection is read
against the ids of the table as it was drawn, kept in the session, not against a fresh
read: the run opened is the one the user saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st

RUN_PAGE = "pages/run.py"


def picked_run(state: object, shown: Sequence[int]) -> int | None:
    """The run of the row selected in a dataframe's widget ``state`` (``{"selection":
    {"rows": [position, …]}}``), looked up in the ids ``shown`` in that table; None when no
    row is selected or the position is not among them."""
    selection = state.get("selection") if isinstance(state, Mapping) else None
    rows = selection.get("rows") if isinstance(selection, Mapping) else None
    if not rows or not 0 <= int(rows[0]) < len(shown):
        return None
    return int(shown[int(rows[0])])


def runs_table(frame: pd.DataFrame, ids: Sequence[int], key: str, lang: str, *,
               column_config: Mapping[str, Any] | None = None) -> None:
    """``frame`` (one row per run, ``ids`` in its order) with single-row selection; a row
    the user selected in the table as last drawn opens its run page here."""
    run_id = picked_run(st.session_state.get(key), st.session_state.get(f"{key}.ids", []))
    if run_id is not None:
        st.switch_page(RUN_PAGE, query_params={"run": str(run_id), "lang": lang})
    st.session_state[f"{key}.ids"] = [int(i) for i in ids]
    st.dataframe(frame, hide_index=True, width="stretch", column_config=column_config, key=key,
                 on_select="rerun", selection_mode="single-row")
