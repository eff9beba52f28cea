"""What every page shares: the language switch, the identity, and cached DB reads."""

from __future__ import annotations

import getpass
from typing import Any

import streamlit as st

from db import DbBusy, Store
from domain.i18n import LANGUAGES, t
from domain.settings import get_settings

LANG_KEY = "lang"
LANG_WIDGET_KEY = "lang_switch"
# Short TTL: pages poll live state, and each uncached read costs a locked open/close (~25 ms).
QUERY_TTL_S = 2


def current_language() -> str:
    if LANG_KEY not in st.session_state:
        st.session_state[LANG_KEY] = get_settings().language
    return str(st.session_state[LANG_KEY])


def _adopt_widget_language() -> None:
    st.session_state[LANG_KEY] = st.session_state[LANG_WIDGET_KEY]


def language_switch() -> None:
    """The sidebar switch.  The chosen language lives in its own key, not the widget's,
    so that it survives page switches and the widget can be rebuilt with it as index."""
    lang = current_language()
    st.sidebar.radio(
        "言語 / Language",
        options=list(LANGUAGES),
        index=LANGUAGES.index(lang),
        format_func=lambda code: {"ja": "日本語", "en": "English"}[code],
        key=LANG_WIDGET_KEY,
        on_change=_adopt_widget_language,
        horizontal=True,
    )


def current_user() -> str:
    return getpass.getuser()


@st.cache_resource
def store() -> Store:
    """One Store per app process; migrations run once, the first time a page needs the DB."""
    s = Store.from_settings(get_settings())
    s.migrate()
    return s


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_runs(limit: int = 200) -> list[dict[str, Any]]:
    return store().list_runs(limit=limit)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_counts() -> dict[str, int]:
    return store().run_counts()


def show_busy(exc: DbBusy) -> None:
    """Only a lock timeout becomes "busy, retrying"; other errors surface as themselves."""
    st.warning(t("app.busy", current_language()), icon=":material/hourglass_top:")
