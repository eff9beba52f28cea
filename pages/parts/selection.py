"""The run selection shared by the compare and checklist pages.

It lives in the URL (``?baseline=1&runs=2,3&intended=output_len&intended=flag:kv-cache-dtype``)
so a comparison can be shared as a link; the widgets read it on the way in and write it
back on every change.  The analysis is cached per selection and per content of the points
(the frame itself is part of the key), so a rerun that changes nothing recomputes nothing
and a new point is never hidden behind a stale result.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pandas as pd
import streamlit as st

from db import DbBusy
from db.bootstrap_memo import keep_memos
from db.quality_inputs import with_quality
from db.rows import PickerChoiceRow, PickerRunRow
from db.sample_files import SampleFiles
from db.store import PickerFilters
from domain.compare import comparability
from domain.compare.comparability import condition_label
from domain.compare.comparison import Comparison, align_scenarios, comparison_with_settings
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.results.frames import points_frame
from domain.results.requests import BootstrapMemo
from pages.parts.common import QUERY_TTL_S, db_guard, language_of_link, source_label, store

_LOG = logging.getLogger(__name__)
MAX_RUNS = 8
# Runs the baseline and compared-runs lists offer: the newest that match the filters (in
# SQL, over every finished run).  A list of thousands is slow to draw and useless to scroll;
# the filters find older runs, and the runs a link names are offered however old they are.
PICKER_SHOWN = 200
UNKNOWN = "?"  # the model of an imported run that does not name it


@dataclass
class Selection:
    baseline: int | None
    others: list[int] = field(default_factory=list)
    intended: list[str] = field(default_factory=list)
    allow_mixed: bool = False


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_choices() -> list[PickerChoiceRow]:
    return store().picker_choices(UNKNOWN)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_picker(filters: PickerFilters) -> tuple[list[PickerRunRow], int]:
    return store().runs_for_picker(filters, PICKER_SHOWN)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_picker_by_id(run_ids: tuple[int, ...]) -> list[PickerRunRow]:
    return store().picker_runs_by_id(list(run_ids))


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_points(run_ids: tuple[int, ...]) -> pd.DataFrame:
    return points_frame(p.as_dict() for p in store().points_for_comparison(list(run_ids)))


# A point's samples never change once written, so no TTL; a few selections' worth are kept.
# A resource, not data: each point's samples are read when first asked for and then shared
# by every session, never copied (a cached dict of nine runs' samples was pickled whole:
# 0.8 s of the compare page's first visit); nothing changes a samples frame.
@st.cache_resource(show_spinner=False, max_entries=8)
def _request_samples(point_ids: tuple[int, ...]) -> SampleFiles:
    """Per-request samples by point id (``Store.sample_files``: the Parquet file the runner
    wrote per point, read when asked for; imported points and points measured before
    samples were kept have none, and are simply absent).  The one place the pages read
    samples."""
    return store().sample_files(list(point_ids))


def keep_new_intervals(samples: SampleFiles, memos: Mapping[int, BootstrapMemo]) -> None:
    """Keep beside the samples the intervals computed from them (a memo grows only for
    samples read; ``write_memo`` writes a file only for intervals it does not hold yet).
    Best effort (db/bootstrap_memo.py): the comparison is built already, and nothing here
    may lose it."""
    try:
        keep_memos(samples.read(), memos)
    except Exception:  # kept the next time; the page shows what it computed
        _LOG.warning("bootstrap intervals not kept beside the samples", exc_info=True)


def request_samples(frame: pd.DataFrame) -> SampleFiles:
    """The samples of every point of ``frame`` that has them (``point_id`` column), each read
    when first asked for: ``get`` (None for a point without, or whose file is gone)."""
    if "point_id" not in frame.columns:
        return SampleFiles({})
    return _request_samples(tuple(sorted({int(p) for p in frame["point_id"].dropna()})))


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").split(",") if x.strip().isdigit()]


FILTER_KEYS = ("select.filter.models", "select.filter.gpus", "select.filter.sources", "select.filter.statuses",
               "select.filter.tag", "select.filter.since")


def _filters(choices: list[PickerChoiceRow], lang: str) -> PickerFilters:
    """The picker's filters, in a popover whose label counts the ones in use.  Not in an
    expander: a closed expander's widgets are drawn all the same (six of them cost a fresh
    tab about 0.18 s of the browser's time, in Chromium here), while a popover draws its
    content when opened; the widgets still run on every rerun,
    so a filter keeps its value while the popover is closed."""
    in_use = sum(bool(st.session_state.get(key)) for key in FILTER_KEYS)
    label = t("select.filters", lang) + (f" · {t('select.filters_in_use', lang, n=in_use)}" if in_use else "")
    models_key, gpus_key, sources_key, statuses_key, tag_key, since_key = FILTER_KEYS
    with st.popover(label, icon=":material/filter_list:"):
        left, right = st.columns(2)
        # An imported run may not name its model: it is filtered as unknown, never a crash.
        models = left.multiselect(t("col.model", lang), sorted({c.model for c in choices}), key=models_key)
        gpus = right.multiselect(t("col.gpu", lang), sorted({c.gpu for c in choices}), key=gpus_key)
        sources = left.multiselect(t("col.source", lang), ["measured", "emulated", "imported"],
                                   format_func=lambda s: source_label(s, lang), key=sources_key)
        statuses = right.multiselect(t("col.status", lang), ["succeeded", "failed", "cancelled"],
                                     format_func=lambda s: t(f"status.{s}", lang), key=statuses_key)
        tag = left.text_input(t("select.tag", lang), key=tag_key)
        since = right.date_input(t("select.since", lang), value=None, key=since_key)
    return PickerFilters(models=tuple(models), gpus=tuple(gpus), sources=tuple(sources), statuses=tuple(statuses),
                         tag=tag, since=since, unknown=UNKNOWN)


def pick(lang: str) -> Selection | None:
    """Widgets for baseline, other runs and intended differences, kept in the URL."""
    with db_guard(lang) as guard:
        choices = cached_choices()
    if guard.failed:
        return None
    if not choices:
        st.info(t("select.no_runs", lang), icon=":material/inbox:")
        return None
    filters = _filters(choices, lang)
    with db_guard(lang) as guard:
        shown, matching = cached_picker(filters)
    if guard.failed:
        return None
    if matching > PICKER_SHOWN:
        st.caption(t("select.limited", lang, shown=PICKER_SHOWN, total=f"{matching:,}"))
    params = st.query_params
    wanted_base = _ints(params.get("baseline"))
    runs = shown + _linked_runs(shown, [*wanted_base[:1], *_ints(params.get("runs"))], lang)
    label = {r.id: f"#{r.id} {r.name} · {source_label(r.source, lang)} · {r.model} · "
                      f"{r.gpu_count}×{r.gpu_type}" for r in runs}
    # The compared runs' chips share one row: the id, name and source only (the full
    # label, model and GPUs included, stays in the baseline's list; a model or GPU that
    # differs from the baseline's is named in the verdict).
    short = {r.id: f"#{r.id} {r.name} · {source_label(r.source, lang)}" for r in runs}
    ids = [r.id for r in shown]
    base_options = ids + [i for i in wanted_base if i not in ids and i in label]
    c1, c2 = st.columns([1, 2])
    # Runs named without a baseline (a run page's "add to the compared runs"): the user picks
    # the baseline; otherwise the newest run stands in until they do.
    asked = wanted_base and wanted_base[0] in base_options
    baseline = c1.selectbox(t("select.baseline", lang), base_options, format_func=lambda i: label[i],
                            index=base_options.index(wanted_base[0]) if asked
                            else None if _ints(params.get("runs")) else 0,
                            placeholder=t("select.pick_baseline", lang))
    wanted_others = [i for i in _ints(params.get("runs")) if i in label and i != baseline]
    other_options = [i for i in dict.fromkeys(ids + wanted_others) if i != baseline]
    others = c2.multiselect(t("select.others", lang, n=MAX_RUNS), other_options, default=wanted_others,
                            placeholder=t("select.pick", lang),
                            format_func=lambda i: short[i], max_selections=MAX_RUNS)
    wanted_intended = [c for c in params.get_all("intended") if comparability.is_condition_name(c)]
    intended = st.multiselect(t("select.intended", lang), _intended_options(baseline, others, wanted_intended),
                              default=wanted_intended,
                              format_func=lambda n: condition_label(n, lang), help=t("select.intended_help", lang),
                              placeholder=t("select.none", lang))
    sources = {r.source for r in runs if r.id in [baseline, *others]}
    mixed = "emulated" in sources and len(sources) > 1
    allow_mixed = st.toggle(t("select.allow_mixed", lang), value=params.get("mixed") == "1") if mixed else False
    st.query_params.update({"baseline": "" if baseline is None else str(baseline), "runs": ",".join(map(str, others)),
                            "intended": intended, "mixed": "1" if allow_mixed else "0", "lang": lang})
    if baseline is None:
        st.info(t("select.pick_baseline", lang), icon=":material/arrow_upward:")
        return None
    return Selection(int(baseline), [int(o) for o in others], list(intended), allow_mixed)


def _linked_runs(runs: list[PickerRunRow], wanted: list[int], lang: str) -> list[PickerRunRow]:
    """The runs a link names that the listed ones do not hold (older, or filtered out)."""
    known = {r.id for r in runs}
    missing = tuple(i for i in dict.fromkeys(wanted) if i not in known)
    if not missing:
        return []
    with db_guard(lang) as guard:
        found = cached_picker_by_id(missing)
    return [] if guard.failed else found


def _intended_options(baseline: int | None, others: list[int], wanted: list[str]) -> list[str]:
    """The conditions a user can mark as under test for these runs (the fixed ones, then the
    flag conditions of the high-risk flags they set), plus any well-formed one the URL asks
    for that the runs do not offer (kept, so a shared link keeps its meaning)."""
    choices: list[str] = []
    if baseline is not None:
        try:
            frame = cached_points((int(baseline), *others))
        except DbBusy:  # comparison() below says so; the fixed conditions serve meanwhile
            frame = pd.DataFrame()
        if not frame.empty:
            choices = intended_choices_of(frame, int(baseline), others)
    if not choices:
        choices = list(comparability.CONDITION_NAMES)
    return [*choices, *(w for w in dict.fromkeys(wanted) if w not in choices and comparability.is_condition_name(w))]


def comparison(selection: Selection, lang: str, *, keep_cold: bool = False) -> Comparison | None:
    """The analysis of the selected runs, or None with the reason shown.  ``keep_cold``:
    every cold first point stays in the efficiency baseline and the knee (by default they
    are left out and badged)."""
    if not selection.others:
        st.info(t("select.pick_others", lang), icon=":material/compare_arrows:")
    with db_guard(lang) as guard:
        frame = cached_points((selection.baseline, *selection.others))  # type: ignore[arg-type]
    if guard.failed:
        return None
    if frame.empty:
        st.warning(t("select.no_points", lang))
        return None
    if refuses_mix(frame, selection.allow_mixed):
        st.error(t("select.mixed_refused", lang), icon=":material/science:")
        return None
    missing = [r for r in (selection.baseline, *selection.others) if r not in set(frame["run_id"])]
    if missing:
        st.warning(t("select.runs_without_points", lang, runs=", ".join(f"#{r}" for r in missing)))
    assert selection.baseline is not None  # noqa: S101 - pick() always sets it
    built = _cached_comparison(frame, selection.baseline, tuple(selection.others), lang, tuple(selection.intended),
                               keep_cold)
    with db_guard(lang):  # the quality rows are read fresh: a probe lands after a run's last point
        with_quality(store(), built)
    return built


def warm_comparison(query: Mapping[str, list[str]]) -> tuple[Comparison, str] | None:
    """What :func:`pick` and :func:`comparison` compute first for a fresh session opened on
    a link with this query (``baseline``, ``runs``, ``intended``, ``lang``, ``mixed``), with
    the same keys: called by the server when it sends the page's HTML
    (scripts/page_warmup.py), so the page's first run finds it cached.  A link the page
    would read differently (a run it does not list, too many runs) only costs the work.
    Returns the comparison and its language, or None where the page would show none."""
    baseline = _ints(",".join(query.get("baseline", [])))[:1]
    others = [i for i in dict.fromkeys(_ints(",".join(query.get("runs", [])))) if i not in baseline]
    if not baseline or not others or len(others) > MAX_RUNS:
        return None
    lang = language_of_link(next(iter(query.get("lang", [])), None))
    intended = tuple(c for c in query.get("intended", []) if comparability.is_condition_name(c))
    # The picker's lists first: the page reads them before the points, a fresh session with
    # no filter set (``_filters`` of empty widgets), and they take a fraction of the analysis.
    cached_choices()
    cached_picker(PickerFilters(unknown=UNKNOWN))
    frame = cached_points((baseline[0], *others))
    if frame.empty or refuses_mix(frame, allow_mixed=query.get("mixed") == ["1"]):
        return None
    intended_choices_of(frame, baseline[0], others)
    return _cached_comparison(frame, baseline[0], tuple(others), lang, intended, False), lang


def refuses_mix(frame: pd.DataFrame, allow_mixed: bool) -> bool:
    """Emulated points beside measured or imported ones, not allowed by the user: refused."""
    sources = set(frame["source"])
    return "emulated" in sources and len(sources) > 1 and not allow_mixed


def _frame_digest(frame: pd.DataFrame) -> bytes:
    """The frame's content as a short key for the cache: a digest of the pickles of its
    labels and of each column's values, with each column's dtype (a categorical's
    categories included), so frames that differ never share a key (a point that landed is
    a new key); the same points read twice give one key
    (tests/test_pages_selection_digest.py), so a rerun finds its comparison.  About 3.5 ms
    for nine runs' points, where hashing every column as text took 50-65 ms here
    (Streamlit's own DataFrame hash fails on the dict columns and pickles with a warning
    in the log on every rerun).  Column by column, not the frame's own pickle: that follows
    its blocks, which pandas lays out differently for equal frames (rows taken from a frame
    reorder them in place; the server's warm-up and the page then found two keys for one
    comparison)."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(pickle.dumps((list(frame.columns), frame.index, frame.attrs), protocol=pickle.HIGHEST_PROTOCOL))
    for _name, column in frame.items():
        digest.update(pickle.dumps(column.to_numpy(), protocol=pickle.HIGHEST_PROTOCOL))
        digest.update(repr(column.dtype).encode())  # repr: a categorical's categories and order too
    return digest.digest()


# A resource, not data: every rerun and session gets the same instance (read only: nothing
# assigns into a comparison once built), so nothing is unpickled per rerun and what a page
# derives from it is kept with it (:func:`derived`).
@st.cache_resource(show_spinner=False, max_entries=16, hash_funcs={pd.DataFrame: _frame_digest})
def _cached_comparison(frame: pd.DataFrame, baseline: int, others: tuple[int, ...], lang: str,
                       intended: tuple[str, ...], keep_cold: bool) -> Comparison:
    """The comparison, keyed by the points themselves (so a new point is a new key) and the
    selection; the settings are read from the environment once per process."""
    # Keeping every point key keeps exactly the cold ones: for any other point a kept key is
    # a no-op (curve.scaling_efficiency / saturation_points only consult it for cold points).
    # Keys under the scenario names the comparison uses (aligned to the baseline's).
    keep: list[tuple[object, object, object]] = []
    if keep_cold:  # aligned only then: a tenth of the comparison's own time, for no key
        aligned = align_scenarios(frame, baseline)
        keep = list(zip(aligned["run_id"], aligned["scenario"], aligned["concurrency"], strict=True))
    samples = request_samples(frame)
    # The intervals kept beside the samples (db/bootstrap_memo.py): a point measured once
    # is resampled once, not on every comparison and process, and its samples are then
    # not even read (db/sample_files.py).
    memos = samples.memos()
    built = comparison_with_settings(frame, baseline, list(others), lang, get_settings(),
                                     intended_to_differ=frozenset(intended), requests=samples, keep_cold=keep,
                                     bootstrap_memos=memos, timelines=samples.timelines())
    keep_new_intervals(samples, memos)
    return built


def intended_choices_of(frame: pd.DataFrame, baseline: int, others: list[int]) -> list[str]:
    """The intended-difference choices of the runs that have points in ``frame`` (none when
    the baseline has none), as the picker offers them and the server's warm-up reads them."""
    present = set(frame["run_id"])
    if baseline not in present:
        return []
    return cached_intended_choices(frame, baseline, tuple(o for o in others if o in present))


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs={pd.DataFrame: _frame_digest})
def cached_intended_choices(frame: pd.DataFrame, baseline: int, others: tuple[int, ...]) -> list[str]:
    """:func:`comparability.intended_choices`, keyed by the points as the comparison is (a
    pandas pass per run: a tenth of a cold compare page's own time at nine runs)."""
    return comparability.intended_choices(frame, baseline, list(others))


# What pages derived from each comparison instance, by key; dropped with the instance.
_derived: dict[int, dict[Hashable, Any]] = {}
_derived_guard = threading.Lock()
# The keys being built, by (comparison id, key): set when the value is stored or the build ends.
_building: dict[tuple[int, Hashable], threading.Event] = {}
_BUILD_WAIT_S = 30.0  # far above any build (a second at nine runs); past it, a caller builds its own
T = TypeVar("T")


def derived(c: Comparison, key: Hashable, build: Callable[[], T]) -> T:
    """``build()`` once per comparison and ``key`` (charts, headers: seconds of Altair and
    pandas work at nine runs), then the same object on every rerun and in every session.
    Correct because a comparison never changes: a new point makes a new comparison
    (:func:`_cached_comparison` is keyed by the points), which starts with nothing derived.
    A caller that finds the key being built (the server's warm-up of a linked page, or
    another session) waits for it rather than building it a second time beside it."""
    with _derived_guard:
        memo = _derived.get(id(c))
        if memo is None:
            memo = _derived[id(c)] = {}
            weakref.finalize(c, _derived.pop, id(c), None)  # the id may be reused after c is gone
        if key in memo:
            return cast(T, memo[key])
        building = _building.get((id(c), key))
        mine = building is None
        if building is None:
            building = _building[(id(c), key)] = threading.Event()
    if not mine:
        building.wait(_BUILD_WAIT_S)
        with _derived_guard:
            if key in memo:
                return cast(T, memo[key])
        # The builder failed or was stopped (a rerun interrupts a script): build it here.
    try:
        value = build()  # outside the guard: other keys are built and read meanwhile
        with _derived_guard:
            return cast(T, memo.setdefault(key, value))
    finally:
        if mine:
            with _derived_guard:
                _building.pop((id(c), key), None)
            building.set()
