"""What every page shares: the language switch, language-proof choices, the DB guard and
cached DB reads."""

from __future__ import annotations

from typing import Any

import streamlit as st
from streamlit import runtime

from db import DbBusy, DbHolderNotAnswering, Store
from db.connection import KEEP_IDLE_S, keep_open
from db.host_schemas import register_stored_schemas
from db.rows import RunnerRow, RunProgressRow
from domain.core.access import PermissionDenied
from domain.core.i18n import LANGUAGES, t
from domain.core.markdown import STREAMLIT_REWRITES, md_code
from domain.core.settings import get_settings

LANG_KEY = "lang"
LANG_WIDGET_KEY = "lang_switch"
# Short TTL: pages poll live state.  An uncached read costs a locked access (an open and a
# close, ~25 ms, unless the connection is kept: see store()).
QUERY_TTL_S = 2
HOST_SCHEMAS_TTL_S = 30  # a runner registers its schema once at start-up


def language_of_link(from_url: str | None) -> str:
    """The language a link's ``?lang=`` asks for, else the setting."""
    return from_url if from_url in LANGUAGES else get_settings().language


def current_language() -> str:
    """The session's language: a ``?lang=`` in the URL (shared links), else the setting."""
    if LANG_KEY not in st.session_state:
        st.session_state[LANG_KEY] = language_of_link(st.query_params.get("lang"))
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


def _adopt_choice(widget_key: str, key: str) -> None:
    st.session_state[key] = st.session_state[widget_key]


def localised_choice(
    widget: Any, label: str, options: list[Any] | tuple[Any, ...], key: str, lang: str, **kwargs: Any
) -> Any:
    """A radio or selectbox whose option labels follow the language.  Streamlit keeps such
    a widget's value as its label text, so after a language switch the old label matches
    nothing and the widget falls back to its first option (a PD plan would silently turn
    aggregated).  The widget gets a key per language; the value itself lives under ``key``."""
    widget_key = f"{key}@{lang}"
    if st.session_state.get(widget_key) != st.session_state[key]:
        st.session_state[widget_key] = st.session_state[key]
    return widget(label, options, key=widget_key, on_change=_adopt_choice, args=(widget_key, key), **kwargs)


def show_denied(exc: PermissionDenied, lang: str) -> None:
    """db/ refused a write for this role: say so (a stale page may still show the button)."""
    st.error(t("auth.denied", lang, detail=str(exc)), icon=":material/lock:")


@st.cache_resource
def store() -> Store:
    """One Store per app process; migrations run once, the first time a page needs the DB.
    The app server is long-lived and a page makes several accesses in a row, so it keeps
    its DB connection between them (db/connection.py ``keep_open``: given up at once when
    the runner waits).  Not under AppTest (no Streamlit runtime), whose pytest process
    hands DB files to other processes and raw ``duckdb`` right after an access."""
    if runtime.exists():
        keep_open(KEEP_IDLE_S)
    s = Store.from_settings(get_settings())
    s.migrate()
    return s


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_runs(limit: int = 200) -> list[RunProgressRow]:
    return store().list_runs(limit=limit)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_counts() -> dict[str, int]:
    return store().run_counts()


def show_busy(exc: DbBusy) -> None:
    """Only a lock timeout becomes "busy, retrying"; other errors surface as themselves.
    A runner that holds the file but answers nothing (stopped, frozen) is named: waiting
    will not help until it is back."""
    key = "app.busy_holder" if isinstance(exc, DbHolderNotAnswering) else "app.busy"
    st.warning(t(key, current_language()), icon=":material/hourglass_top:")


class db_guard:  # lower case like contextlib.suppress: read as ``with db_guard(lang) as guard:``
    """Around a DB read or write: a refused write (PermissionDenied) and a held lock
    (DbBusy) show their usual message instead of an exception.  ``failed`` says whether
    one did, for callers that must then return or stop; other errors pass through."""

    def __init__(self, lang: str) -> None:
        self.lang = lang
        self.failed = False

    def __enter__(self) -> db_guard:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, trace: object) -> bool:
        if isinstance(exc, PermissionDenied):
            show_denied(exc, self.lang)
        elif isinstance(exc, DbBusy):
            show_busy(exc)
        else:
            return False
        self.failed = True
        return True


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_runners() -> list[RunnerRow]:
    return store().list_runners()


@st.cache_data(ttl=HOST_SCHEMAS_TTL_S, show_spinner=False)
def cached_host_schemas() -> list[str]:
    """Register the flag schemas the runner hosts dumped (db/host_schemas.py) in this app
    process, once a TTL: the registry outlives the cache, the read is the costly part."""
    return register_stored_schemas(store())


def clear_run_caches() -> None:
    """After a write, the next read must see it (do not wait for the TTL)."""
    cached_runs.clear()
    cached_counts.clear()
    cached_runners.clear()


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def source_label(source: str, lang: str) -> str:
    """Emulated and imported data are labelled wherever they appear (plain text: the
    browser may have no emoji font)."""
    return t(f"source.{source}", lang).upper() if source != "measured" else t(f"source.{source}", lang)


def opened_expander(label: str, key: str, *, expanded: bool = False) -> Any | None:
    """An expander whose content is drawn only while it is open: the expander itself when
    open, else None (Streamlit's stateful expander: opening or closing it reruns).  For
    details behind a click (a plan's YAML, a command line, a log): a closed expander's
    content is still sent and drawn, and one ``st.code`` or ``st.json`` in it makes a fresh
    tab load and run the code highlighter's 1.6 MB of script before the page settles."""
    box = st.expander(label, expanded=expanded, key=key, on_change="rerun")
    return box if box.open else None


def command_line(command: str) -> None:
    """A command to read and copy, exactly as it is: a Markdown code span (``md_code``), not
    ``st.code``, whose 1.6 MB highlighter a fresh tab loads and runs before it shows the
    page's other widgets (the build page's inputs came 1.1 s later with it, in Chromium
    here).  Text that Streamlit's Markdown would alter (``STREAMLIT_REWRITES``) goes to
    ``st.code``, which shows it as it is."""
    if STREAMLIT_REWRITES in command:
        st.code(command, language="bash", wrap_lines=True)
    else:
        st.markdown(md_code(command))
