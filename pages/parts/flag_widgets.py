"""The Build page's flag widgets: one typed widget per flag (switch, choice, number or
text, from the version's schema), the levers with their notes, and the search over every
other flag.

The values live in ``SERVER_ARGS`` in session state, not in widget state, so a flag keeps
its value while the search hides its widget."""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.i18n import t
from domain.flags.dialect import FlagDialect
from domain.flags.dialects.sglang import SGLANG_FLAGS
from domain.flags.dialects.vllm import VLLM_FLAGS
from domain.flags.drift import apply_translations
from domain.flags.levers import lever_notes, parallelism_glossary
from domain.flags.schema import FlagSpec, Schema
from domain.plan.form_input import typed_scalar
from pages.parts.build_field_errors import FLAG_SLOT_PREFIX, slot_under

SERVER_ARGS = "build.server_args"  # the SGLang (and SGLang emulator) flags
VLLM_ARGS = "build.vllm_args"  # the vLLM flags, kept apart: switching engine loses neither
# Each store's widgets under a prefix of their own (a flag may be spelled alike on both engines).
_WIDGET_PREFIXES = {SERVER_ARGS: "b.flag.", VLLM_ARGS: "b.vflag."}
_DIALECTS: dict[str, FlagDialect] = {SERVER_ARGS: SGLANG_FLAGS, VLLM_ARGS: VLLM_FLAGS}  # whose flags each store holds
_SEARCH_LIMIT = 40  # the most widgets one search draws
# How a widget's value is read back: as it is, a text read as a scalar, a list of scalars
# (vLLM's nargs='+' flags take separate arguments), or a three-way switch whose "off" is kept.
Mode = str  # "plain" | "text" | "list" | "tri"


def forget_flag_widgets() -> None:
    """Drop the widgets' own state, so they are drawn anew from ``SERVER_ARGS`` / ``VLLM_ARGS``."""
    prefixes = tuple(_WIDGET_PREFIXES.values())
    for key in [k for k in st.session_state if str(k).startswith(prefixes)]:
        del st.session_state[key]


def _set_flag(name: str, store: str = SERVER_ARGS, mode: Mode = "plain") -> None:
    value = st.session_state.get(f"{_WIDGET_PREFIXES[store]}{name}")
    if mode == "text" and isinstance(value, str):
        value = typed_scalar(value.strip())
    if mode == "list" and isinstance(value, str):
        value = [typed_scalar(item) for item in value.replace(",", " ").split()] or None
    args: dict[str, Any] = st.session_state[store]
    if value is None or value == "" or (value is False and mode != "tri"):
        args.pop(name, None)
    else:
        args[name] = value


def _number_type(spec: FlagSpec) -> str | None:
    """"int" or "float" for a flag a number box edits (vLLM's ``optional:int`` too); None
    for the rest (vLLM's ``1k``-style counts and lists are typed as text)."""
    kind = spec.base_type
    return kind if kind in ("int", "float") and not spec.takes_list else None


def _number_widget(kind: str, label: str, container: Any, lang: str, kwargs: dict[str, Any]) -> None:
    key = kwargs["key"]
    step: float | int = 1 if kind == "int" else 0.01
    if isinstance(st.session_state[key], bool):
        st.session_state[key] = None  # a switch's value left by a typo: the validator names it in the plan
    if st.session_state[key] is not None and kind == "int":
        st.session_state[key] = int(st.session_state[key])
    if st.session_state[key] is not None and kind == "float":
        st.session_state[key] = float(st.session_state[key])
    container.number_input(label, step=step, on_change=_set_flag, placeholder=t("build.unset", lang),
                           format="%d" if kind == "int" else "%.3f", **kwargs)


def _text_widget(label: str, container: Any, lang: str, kwargs: dict[str, Any]) -> None:
    """Lists and free values as text, read back by :func:`typed_scalar` on change."""
    key = kwargs["key"]
    current = st.session_state[key]
    st.session_state[key] = "" if current is None else (
        " ".join(map(str, current)) if isinstance(current, list) else str(current))
    container.text_input(label, on_change=_set_flag, placeholder=t("build.unset", lang), **kwargs)


def _three_way(spec: FlagSpec, label: str, container: Any, lang: str, kwargs: dict[str, Any]) -> None:
    """A vLLM switch with an "off" spelling (``--no-enable-x``): unset, on or off, since
    off is not the default for every such switch (prefix caching is on unless turned off)."""
    shown = {None: t("build.unset", lang), True: f"--{spec.positive_name()}", False: f"--{spec.negative_name()}"}
    container.selectbox(label, [None, True, False], on_change=_set_flag, format_func=lambda v: shown[v],
                        placeholder=t("build.unset", lang), **kwargs)


def flag_widget(spec: FlagSpec, name: str, container: Any, lang: str, *, help_text: str | None = None,
                store: str = SERVER_ARGS) -> None:
    """A widget typed from the schema: switch, choice, number or text; empty = the engine's
    default.  ``store`` is where the value lives: SGLang's ``SERVER_ARGS`` or ``VLLM_ARGS``."""
    key = f"{_WIDGET_PREFIXES[store]}{name}"
    args: dict[str, Any] = st.session_state[store]
    # A plan that spells the off switch itself (``disable-x: true``) keeps a plain toggle.
    dialect = _DIALECTS[store]
    three_way = dialect.form_three_way and spec.takes_no_value and spec.negative_name() is not None \
        and not spec.negated(name)
    if key not in st.session_state:
        st.session_state[key] = args.get(name, False if spec.takes_no_value and not three_way else None)
    label = f"--{name}" + (" ⚠️ " + t("build.deprecated", lang) if spec.deprecated else "")
    default_note = t("build.default", lang, default=spec.default)
    help_text = "\n\n".join(x for x in (help_text, spec.help, default_note) if x)
    number = _number_type(spec)
    mode = "tri" if three_way else ("plain" if spec.takes_no_value or spec.choices or number else (
        "list" if dialect.form_list_words and spec.takes_list else "text"))
    kwargs: dict[str, Any] = {"args": (name, store, mode), "key": key, "help": help_text}
    if three_way:
        _three_way(spec, label, container, lang, kwargs)
    elif spec.takes_no_value:
        container.toggle(label, on_change=_set_flag, **kwargs)
    elif spec.choices:
        container.selectbox(label, [None, *spec.choices], on_change=_set_flag, placeholder=t("build.unset", lang),
                            format_func=lambda v: t("build.unset", lang) if v is None else str(v), **kwargs)
    elif number is not None:
        _number_widget(number, label, container, lang, kwargs)
    else:
        _text_widget(label, container, lang, kwargs)
    slot_under(container, FLAG_SLOT_PREFIX + name)  # where this flag's errors show (pages/build.py)


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


def apply_translation(translation: Any, store: str = SERVER_ARGS) -> None:
    """A drift translation's button: rewrite the flags (SGLang's, or vLLM's in ``VLLM_ARGS``),
    then redraw their widgets."""
    st.session_state[store] = apply_translations(st.session_state[store], [translation])
    forget_flag_widgets()
