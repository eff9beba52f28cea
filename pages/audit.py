"""Audit log (admins only): who did what and when, filterable.

The log is append-only (db/ has no UPDATE or DELETE for it).  db/ checks the reader's
role again, so this page is not the only guard.
"""

from __future__ import annotations

import json
from datetime import datetime, time

import pandas as pd
import streamlit as st

from domain.core.i18n import t
from pages.parts.auth import current_actor
from pages.parts.common import current_language, db_guard, store

LIMIT = 500
lang = current_language()
actor = current_actor()

st.title(t("audit.title", lang))
st.caption(t("audit.help", lang))

with db_guard(lang) as guard:
    actions = store().audit_actions(reader=actor)
    c1, c2, c3, c4 = st.columns(4)
    action = c1.selectbox(t("audit.action", lang), [None, *actions], format_func=lambda a: a or t("audit.any", lang))
    who = c2.text_input(t("audit.actor", lang)).strip() or None
    run_id = c3.number_input(t("audit.run", lang), min_value=1, value=None, step=1)
    since = c4.date_input(t("audit.since", lang), value=None)
    entries = store().audit_entries(
        reader=actor, action=action, actor=who, run_id=int(run_id) if run_id else None,
        since=datetime.combine(since, time.min) if since else None, limit=LIMIT,
    )
if guard.failed:
    st.stop()

if not entries:
    st.info(t("audit.empty", lang))
    st.stop()
st.caption(t("audit.count", lang, n=len(entries), limit=LIMIT))
frame = pd.DataFrame({
    t("audit.col_time", lang): [e.logged_at for e in entries],
    t("audit.col_actor", lang): [e.actor for e in entries],
    t("audit.col_action", lang): [e.action for e in entries],
    t("audit.col_run", lang): [e.run_id for e in entries],
    # Compact JSON: the launch argv and hashes stay exact and copyable.
    t("audit.col_details", lang): [json.dumps(json.loads(e.details or "{}"), ensure_ascii=False)
                                   for e in entries],
})
st.dataframe(frame, hide_index=True, width="stretch")
