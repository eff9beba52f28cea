"""The Build page's flag widgets: one typed widget per flag (switch, choice, number or
text, from the version's schema), the levers with their notes, and the search over every
other flag.

The values live in ``SERVER_ARGS`` in session state, not in widget state, so a flag keeps
its value while the search hides its widget."""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.i18n import t
from domain.flags.drift import apply_translations
from domain.flags.levers import lever_notes, parallelism_glossary
from domain.flags.schema import FlagSpec, Schema
from domain.plan.form_input import typed_scalar

SERVER_ARGS = "build.server_args"
_WIDGET_PREFIX = "b.flag."
_SEARCH_LIMIT = 40  # the most widgets one search draws


def forget_flag_widgets() -> None:
    """Drop the widgets' own state, so they are drawn anew from ``SERVER_ARGS``."""
    for key in [k for k in st.session_state if str(k).startswith(_WIDGET_PREFIX)]:
        del st.session_state[key]


def _set_flag(name: str, textual: bool = False) -> None:
    value = st.session_state.get(f"{_WIDGET_PREFIX}{name}")
    if textual and isinstance(value, str):
        value = typed_scalar(value.strip())
    args: dict[str, Any] = st.session_state[SERVER_ARGS]
    if value is None or value == "" or value is False:
        args.pop(name, None)
    else:
        args[name] = value


def _number_widget(spec: FlagSpec, label: str, container: Any, lang: str, kwargs: dict[str, Any]) -> None:
    key = kwargs["key"]
    step: float | int = 1 if spec.type == "int" else 0.01
    if st.session_state[key] is not None and spec.type == "int":
        st.session_state[key] = int(st.session_state[key])
    if st.session_state[key] is not None and spec.type == "float":
        st.session_state[key] = float(st.session_state[key])
    container.number_input(label, step=step, on_change=_set_flag, placeholder=t("build.unset", lang),
                           format="%d" if spec.type == "int" else "%.3f", **kwargs)


def _text_widget(name: str, label: str, container: Any, lang: str, kwargs: dict[str, Any]) -> None:
    """Lists and free values as text, read back by :func:`typed_scalar` on change."""
    key = kwargs["key"]
    current = st.session_state[key]
    st.session_state[key] = "" if current is None else (
        " ".join(map(str, current)) if isinstance(current, list) else str(current))
    kwargs["args"] = (name, True)
    container.text_input(label, on_change=_set_flag, placeholder=t("build.unset", lang), **kwargs)


def flag_widget(spec: FlagSpec, name: str, container: Any, lang: str, *, help_text: str | None = None) -> None:
    """A widget typed from the schema: switch, choice, number or text; empty = SGLang default."""
    key = f"{_WIDGET_PREFIX}{name}"
    args: dict[str, Any] = st.session_state[SERVER_ARGS]
    if key not in st.session_state:
        st.session_state[key] = args.get(name, False if spec.takes_no_value else None)
    label = f"--{name}" + (" ⚠️ " + t("build.deprecated", lang) if spec.deprecated else "")
    default_note = t("build.default", lang, default=spec.default)
    help_text = "\n\n".join(x for x in (help_text, spec.help, default_note) if x)
    kwargs: dict[str, Any] = {"args": (name,), "key": key, "help": help_text}
    if spec.takes_no_value:
        container.toggle(label, on_change=_set_flag, **kwargs)
    elif spec.choices:
        container.selectbox(label, [None, *spec.choices], on_change=_set_flag, placeholder=t("build.unset", lang),
                            format_func=lambda v: t("build.unset", lang) if v is None else str(v), **kwargs)
    elif spec.type in ("int", "float") and not spec.takes_list:
        _number_widget(spec, label, container, lang, kwargs)
    else:
        _text_widget(name, label, container, lang, kwargs)


def _spelling(schema: Schema, names: tuple[str, ...]) -> str | None:
    """The spelling of a lever that this version has (e.g. cuda-graph-max-bs vs …-decode)."""
    return next((n for n in names if schema.lookup(n) is not None), None)


def levers_section(schema: Schema, lang: str) -> None:
    st.subheader(t("build.levers", lang))
    st.caption(t("build.levers_help", lang))
    columns = st.columns(2)
    for index, note in enumerate(lever_notes()):
        name = _spelling(schema, (note.flag, *note.also))
        if name is None:
            continue
        spec = schema.lookup(name)
        assert spec is not None  # noqa: S101 - found just above
        box = columns[index % 2].container(border=True)
        flag_widget(spec, name, box, lang)
        box.caption(f"**{t('build.why', lang)}** {note.why[lang]}  \n"
                    f"**{t('build.caution', lang)}** {note.caution[lang]}")
    st.markdown(f"**{t('build.parallelism', lang)}**")
    thirds = st.columns(3)
    for index, entry in enumerate(parallelism_glossary()):
        spec = schema.lookup(entry.flag)
        if spec is None:
            continue
        box = thirds[index % 3].container(border=True)
        flag_widget(spec, entry.flag, box, lang)
        box.caption(f"**{entry.name[lang]}** — {entry.splits[lang]}")


def _matching_specs(schema: Schema, query: str) -> list[FlagSpec]:
    """Flags that are neither levers nor parallelism: those already set, and those the
    query finds in their name or help."""
    covered = {n for note in lever_notes() for n in (note.flag, *note.also)} | {
        e.flag for e in parallelism_glossary()}
    args: dict[str, Any] = st.session_state[SERVER_ARGS]
    return [s for s in schema.specs if not s.suppressed and s.primary not in covered
            and (s.primary in args or bool(query and (query.lower() in s.primary or query.lower() in s.help.lower())))]


def advanced_section(schema: Schema, lang: str) -> None:
    with st.expander(t("build.advanced", lang), expanded=bool(st.session_state.get("b.search"))):
        query = st.text_input(t("build.search", lang), key="b.search", placeholder="e.g. kv-cache-dtype, radix")
        shown = _matching_specs(schema, query)
        st.caption(t("build.advanced_count", lang, shown=len(shown), total=len(schema.specs)))
        for spec in shown[:_SEARCH_LIMIT]:
            flag_widget(spec, spec.primary, st, lang)


def apply_translation(translation: Any) -> None:
    """A drift translation's button: rewrite the flags, then redraw their widgets."""
    st.session_state[SERVER_ARGS] = apply_translations(st.session_state[SERVER_ARGS], [translation])
    forget_flag_widgets()
