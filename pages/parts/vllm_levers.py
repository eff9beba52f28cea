"""The Build page's vLLM flags (issue 18): one widget per knob of ``domain/flags/data/knobs.yaml``
that the chosen vLLM version has, each captioned with its SGLang counterpart and how the two
differ, then the search over every other flag of that version.

The widgets are the SGLang page's own (``pages/parts/flag_widgets.py``), typed from the vLLM
schema and keeping their values in ``VLLM_ARGS``."""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.i18n import t
from domain.flags.knobs import Knob, knobs
from domain.flags.schema import FlagSpec, Schema
from pages.parts.flag_widgets import VLLM_ARGS, flag_widget

_SEARCH_KEY = "b.vsearch"
_SEARCH_LIMIT = 40  # the most widgets one search draws, as on the SGLang side


def knob_flag(knob: Knob, schema: Schema, args: dict[str, Any]) -> str | None:
    """The spelling this knob's widget edits on ``schema``'s version: one the plan already
    sets, else the first spelling that is neither deprecated nor an "off" switch (vLLM 0.11.2
    has both --cuda-graph-sizes, deprecated, and --cudagraph-capture-sizes), else any."""
    present = [f for f in knob.vllm if f in schema]
    if not present:
        return None
    chosen = next((f for f in present if f in args), None)
    if chosen is not None:
        return chosen
    return next((f for f in present if _current(schema.lookup(f), f)), present[0])


def _current(spec: FlagSpec | None, flag: str) -> bool:
    return spec is not None and not spec.deprecated and not spec.negated(flag)


def _caption(knob: Knob, lang: str) -> str:
    sglang = ", ".join(f"`--{f}`" for f in knob.sglang)
    head = t("build.vllm.sglang_side", lang, flags=sglang) if knob.sglang else t("build.vllm.sglang_none", lang)
    if knob.sglang and not knob.equivalent:
        head = ":orange[:material/warning: " + t("build.vllm.not_same", lang, flags=sglang) + "]"
    return f"**{knob.name[lang]}** · {head}  \n{knob.note[lang]}"


def vllm_levers_section(schema: Schema, lang: str) -> None:
    """A bordered box per knob this version has: the widget, then the SGLang side and the note."""
    st.subheader(t("build.vllm.levers", lang))
    st.caption(t("build.vllm.levers_help", lang, version=schema.version))
    args: dict[str, Any] = st.session_state[VLLM_ARGS]
    columns = st.columns(2)
    drawn = 0
    for knob in knobs():
        flag = knob_flag(knob, schema, args)
        spec = schema.lookup(flag) if flag is not None else None
        if flag is None or spec is None:
            continue
        box = columns[drawn % 2].container(border=True)
        flag_widget(spec, flag, box, lang, store=VLLM_ARGS)
        box.caption(_caption(knob, lang))
        drawn += 1


def _knob_flags(schema: Schema) -> set[str]:
    """Every spelling of every knob's flags on this version (the levers cover them)."""
    covered: set[str] = set()
    for knob in knobs():
        for flag in knob.vllm:
            spec = schema.lookup(flag)
            covered |= set(spec.names) if spec is not None else set()
    return covered


def _matching_specs(schema: Schema, query: str) -> list[tuple[FlagSpec, str]]:
    """Flags no knob covers: those already set (under the spelling set), and those the
    query finds in a name or the help."""
    covered = _knob_flags(schema)
    args: dict[str, Any] = st.session_state[VLLM_ARGS]
    needle = query.lower().strip()
    found: list[tuple[FlagSpec, str]] = []
    for spec in schema.specs:
        if spec.positional or covered & set(spec.names):
            continue
        spelled = next((n for n in spec.names if n in args), None)
        if spelled is None and needle and (any(needle in n for n in spec.names) or needle in spec.help.lower()):
            spelled = spec.positive_name() if spec.takes_no_value else spec.primary
        if spelled is not None:
            found.append((spec, spelled))
    return found


def vllm_advanced_section(schema: Schema, lang: str) -> None:
    """Any other flag of this vLLM version, found by name or help, typed from its schema."""
    with st.expander(t("build.vllm.advanced", lang, version=schema.version),
                     expanded=bool(st.session_state.get(_SEARCH_KEY))):
        query = st.text_input(t("build.search", lang), key=_SEARCH_KEY,
                              placeholder=t("build.vllm.search_placeholder", lang))
        shown = _matching_specs(schema, query)
        st.caption(t("build.advanced_count", lang, shown=len(shown), total=len(schema.specs)))
        for spec, name in shown[:_SEARCH_LIMIT]:
            flag_widget(spec, name, st, lang, store=VLLM_ARGS)
