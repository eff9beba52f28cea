"""The quality rows of the compare and checklist pages (issue 42): one box per kind, a run
that is faster and changed shown as a trade-off (amber with the rule-risk sentence), a
changed run amber, the same green, cannot tell or not measured grey."""

from __future__ import annotations

import streamlit as st

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.core.markdown import streamlit_md_text

BOXES = {"changed": (st.warning, ":material/difference:"), "same": (st.success, ":material/done_all:"),
         "other": (st.info, ":material/help:")}


def quality_section(c: Comparison, lang: str) -> None:
    if not c.quality_rows:
        return
    by_kind: dict[str, list[str]] = {}
    for row in c.quality_rows:
        kind = row.verdict if row.verdict in ("changed", "same") else "other"
        by_kind.setdefault(kind, []).append(streamlit_md_text(row.line))
    st.markdown(f"**{t('quality.page.heading', lang)}**")
    for kind, (box, icon) in BOXES.items():
        if kind in by_kind:
            box("\n\n".join(by_kind[kind]), icon=icon)
