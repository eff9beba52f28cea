"""The build form's quality switch (issue 42): the probe after the sweep, its prompt set,
an optional eval set on the runner host, and the minutes it adds to the run."""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.i18n import t
from domain.plan.quality import QualityPlan, probe_seconds
from domain.plan.run_plan import RunPlan

QUALITY_KEYS = ("q.on", "q.prompts", "q.output_len", "q.concurrency", "q.seed", "q.eval_path", "q.scorer")
_DEFAULTS = QualityPlan()


def load_quality_into_form(plan: RunPlan) -> None:
    ss, quality = st.session_state, plan.quality
    ss["q.on"] = quality is not None
    q = quality or _DEFAULTS
    ss["q.prompts"], ss["q.output_len"], ss["q.concurrency"], ss["q.seed"] = (q.prompts, q.output_len,
                                                                               q.concurrency, q.seed)
    ss["q.eval_path"] = q.eval.path if q.eval is not None else ""
    ss["q.scorer"] = q.eval.scorer if q.eval is not None else "exact"


def quality_mapping() -> dict[str, Any]:
    """The plan's ``quality`` section from the widgets (nothing when the switch is off)."""
    ss = st.session_state
    if not ss.get("q.on"):
        return {}
    section: dict[str, Any] = {"prompts": int(ss["q.prompts"]), "output_len": int(ss["q.output_len"]),
                               "concurrency": int(ss["q.concurrency"]), "seed": int(ss["q.seed"])}
    path = str(ss.get("q.eval_path") or "").strip()
    if path:
        section["eval"] = {"path": path, "scorer": ss.get("q.scorer") or "exact"}
    return {"quality": section}


def quality_section(lang: str, plan: RunPlan | None) -> None:
    st.subheader(t("quality.form.heading", lang))
    for key, value in zip(QUALITY_KEYS, (False, _DEFAULTS.prompts, _DEFAULTS.output_len, _DEFAULTS.concurrency,
                                         _DEFAULTS.seed, "", "exact"), strict=True):
        st.session_state.setdefault(key, value)
    st.toggle(t("quality.form.switch", lang), key="q.on", help=t("quality.form.switch_help", lang))
    if not st.session_state["q.on"]:
        return
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input(t("quality.form.prompts", lang), min_value=1, max_value=1000, key="q.prompts")
    c2.number_input(t("quality.form.output_len", lang), min_value=1, max_value=4096, key="q.output_len")
    c3.number_input(t("quality.form.concurrency", lang), min_value=1, max_value=1024, key="q.concurrency")
    c4.number_input(t("quality.form.seed", lang), min_value=0, max_value=2**31 - 1, key="q.seed")
    e1, e2 = st.columns([3, 1])
    e1.text_input(t("quality.form.eval_path", lang), key="q.eval_path", help=t("quality.form.eval_help", lang))
    e2.selectbox(t("quality.form.scorer", lang), ["exact", "regex", "numeric"], key="q.scorer")
    if plan is not None and plan.quality is not None:
        minutes = probe_seconds(plan.quality) / 60
        st.caption(t("quality.form.minutes", lang, minutes=f"{minutes:.1f}"))
