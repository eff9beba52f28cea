"""The Build page's "Carry this configuration over to vLLM" (issue 18): the form's SGLang
flags become the vLLM flags that set the same knobs (``domain.flags.knobs.to_vllm_args``),
and what could not move is listed with the knob's note, never guessed."""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.i18n import t
from domain.core.markdown import md_text
from domain.flags.dialects.vllm import render_vllm_argv
from domain.flags.knobs import knob_for, to_vllm_args
from pages.parts.flag_widgets import SERVER_ARGS, VLLM_ARGS, forget_flag_widgets

CARRIED = "build.vllm_carried"  # (version, SGLang flags carried from, moved, left) of the last carry


def carry_over(version: str) -> None:
    """The button's action: replace the vLLM flags, remember what moved, redraw the widgets."""
    sglang_args = dict(st.session_state[SERVER_ARGS])
    carried = to_vllm_args(sglang_args, version)
    st.session_state[VLLM_ARGS] = dict(carried.args)
    st.session_state[CARRIED] = (version, sglang_args, carried.moved, carried.left, dict(carried.args))
    forget_flag_widgets()


def _shown(flag: str, value: object) -> str:
    return f"--{flag}" if value is True else f"--{flag} {value}"


def _moved_line(sglang_flag: str, vllm_flag: str, sglang_args: dict[str, Any], vllm_args: dict[str, Any],
                version: str, lang: str) -> str:
    """``--max-running-requests 16 → --max-num-seqs 16`` as vLLM will be given it, and the
    knob's note where the two are only the closest counterparts."""
    rendered = " ".join(render_vllm_argv({vllm_flag: vllm_args[vllm_flag]}, version)) or _shown(
        vllm_flag, vllm_args[vllm_flag])
    line = f"`{_shown(sglang_flag, sglang_args[sglang_flag])}` → `{rendered}`"
    knob = knob_for("sglang", sglang_flag)
    if knob is not None and not knob.equivalent:
        line += f" — {md_text(knob.note[lang])}"
    return line


def _left_line(flag: str, value: object, lang: str) -> str:
    knob = knob_for("sglang", flag)
    if knob is None or not knob.vllm:
        why = t("build.vllm.carried_no_counterpart", lang)
    else:
        why = t("build.vllm.carried_no_value", lang) + " " + md_text(knob.note[lang])
    return f"`{_shown(flag, value)}` — {why}"


def carried_report(lang: str) -> None:
    """What the last carry moved and what it left, while the vLLM engine stays chosen."""
    entry = st.session_state.get(CARRIED)
    if entry is None:
        return
    version, sglang_args, moved, left, vllm_args = entry
    lines = [f"**{t('build.vllm.carried_title', lang, version=version)}**"]
    if moved:
        lines.append(t("build.vllm.carried_moved", lang, count=len(moved)))
        lines += [f"- {_moved_line(s, v, sglang_args, vllm_args, version, lang)}" for s, v in moved]
    if left:
        lines.append(t("build.vllm.carried_left", lang, count=len(left)))
        lines += [f"- {_left_line(flag, sglang_args[flag], lang)}" for flag in left]
    st.info("\n".join(lines), icon=":material/swap_horiz:")


def carry_section(version: str, lang: str) -> None:
    """The button (when the form holds SGLang flags), then the last carry's report."""
    sglang_args: dict[str, Any] = st.session_state.get(SERVER_ARGS, {})
    if sglang_args:
        st.caption(t("build.vllm.sglang_kept", lang, count=len(sglang_args)))
        st.button(t("build.vllm.carry", lang), key="b.vllm_carry", icon=":material/swap_horiz:",
                  on_click=carry_over, args=(version,),
                  help=t("build.vllm.carry_help", lang, count=len(sglang_args), version=version))
    else:
        st.caption(t("build.vllm.carry_none", lang))
    carried_report(lang)
