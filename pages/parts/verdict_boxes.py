"""The comparability verdicts of the compare and checklist pages, one box per verdict."""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

# Worst first: red when not comparable, amber when comparable except, green when comparable.
VERDICT_BOX = {"not_comparable": (st.error, ":material/block:"),
               "comparable_except": (st.warning, ":material/warning:"),
               "comparable": (st.success, ":material/check_circle:")}


def verdict_boxes(lines: Iterable[tuple[object, str]]) -> None:
    """``(verdict, line)`` per compared run, the lines already safe as Markdown: one box per
    verdict, worst first, each compared run one paragraph of it in the order given (an
    unknown verdict counts as "comparable except").  One box, not one per run: eight runs
    made eight boxes that pushed everything else off the screen, and each box is a browser
    element to draw on every fresh visit."""
    by_verdict: dict[str, list[str]] = {}
    for verdict, line in lines:
        by_verdict.setdefault(str(verdict) if str(verdict) in VERDICT_BOX else "comparable_except", []).append(line)
    for verdict, (box, icon) in VERDICT_BOX.items():
        if verdict in by_verdict:
            box("\n\n".join(by_verdict[verdict]), icon=icon)
