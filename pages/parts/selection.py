"""The run selection shared by the compare and checklist pages.

It lives in the URL (``?baseline=1&runs=2,3&intended=output_len``) so a comparison can be
shared as a link; the widgets read it on the way in and write it back on every change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from db.rows import PickerRunRow
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.results.comparability import CONDITIONS, condition_label
from domain.results.comparison import Comparison, comparison_with_settings
from domain.results.frames import points_frame
from pages.parts.common import QUERY_TTL_S, db_guard, source_label, store

MAX_RUNS = 8
UNKNOWN = "?"  # the model of an imported run that does not name it


@dataclass
class Selection:
    baseline: int | None
    others: list[int] = field(default_factory=list)
    intended: list[str] = field(default_factory=list)
    allow_mixed: bool = False


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_picker() -> list[PickerRunRow]:
    return store().runs_for_picker()


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def cached_points(run_ids: tuple[int, ...]) -> pd.DataFrame:
    return points_frame(p.as_dict() for p in store().points_for_comparison(list(run_ids)))


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").split(",") if x.strip().isdigit()]


def _filters(runs: list[PickerRunRow], lang: str) -> list[PickerRunRow]:
    with st.expander(t("select.filters", lang)):
        c1, c2, c3, c4 = st.columns(4)
        # An imported run may not name its model: it is filtered as unknown, never a crash.
        models = c1.multiselect(t("col.model", lang), sorted({r.model or UNKNOWN for r in runs}))
        gpus = c2.multiselect(t("col.gpu", lang), sorted({f"{r.gpu_count}×{r.gpu_type}" for r in runs}))
        sources = c3.multiselect(t("col.source", lang), ["measured", "emulated", "imported"],
                                 format_func=lambda s: source_label(s, lang))
        statuses = c4.multiselect(t("col.status", lang), ["succeeded", "failed", "cancelled"],
                                  format_func=lambda s: t(f"status.{s}", lang))
        tag = c1.text_input(t("select.tag", lang))
        since = c2.date_input(t("select.since", lang), value=None)
    return [r for r in runs
            if (not models or (r.model or UNKNOWN) in models)
            and (not gpus or f"{r.gpu_count}×{r.gpu_type}" in gpus)
            and (not sources or r.source in sources)
            and (not statuses or r.status in statuses)
            and (not tag or tag in (r.tags or ""))
            and (since is None or r.submitted_at.date() >= since)]


def pick(lang: str) -> Selection | None:
    """Widgets for baseline, other runs and intended differences, kept in the URL."""
    with db_guard(lang) as guard:
        runs = cached_picker()
    if guard.failed:
        return None
    if not runs:
        st.info(t("select.no_runs", lang), icon=":material/inbox:")
        return None
    params = st.query_params
    shown = _filters(runs, lang)
    label = {r.id: f"#{r.id} {r.name} · {source_label(r.source, lang)} · {r.model} · "
                      f"{r.gpu_count}×{r.gpu_type}" for r in runs}
    ids = [r.id for r in shown]
    wanted_base = _ints(params.get("baseline"))
    base_options = ids + [i for i in wanted_base if i not in ids and i in label]
    c1, c2 = st.columns([1, 2])
    baseline = c1.selectbox(t("select.baseline", lang), base_options, format_func=lambda i: label[i],
                            index=base_options.index(wanted_base[0]) if wanted_base and wanted_base[0] in base_options
                            else 0)
    wanted_others = [i for i in _ints(params.get("runs")) if i in label and i != baseline]
    other_options = [i for i in dict.fromkeys(ids + wanted_others) if i != baseline]
    others = c2.multiselect(t("select.others", lang, n=MAX_RUNS), other_options, default=wanted_others,
                            placeholder=t("select.pick", lang),
                            format_func=lambda i: label[i], max_selections=MAX_RUNS)
    intended = st.multiselect(t("select.intended", lang), [c.name for c in CONDITIONS],
                              default=[c for c in params.get_all("intended") if c in {x.name for x in CONDITIONS}],
                              format_func=lambda n: condition_label(n, lang), help=t("select.intended_help", lang),
                              placeholder=t("select.none", lang))
    sources = {r.source for r in runs if r.id in [baseline, *others]}
    mixed = "emulated" in sources and len(sources) > 1
    allow_mixed = st.toggle(t("select.allow_mixed", lang), value=params.get("mixed") == "1") if mixed else False
    st.query_params.update({"baseline": str(baseline), "runs": ",".join(map(str, others)),
                            "intended": intended, "mixed": "1" if allow_mixed else "0", "lang": lang})
    if baseline is None:
        return None
    return Selection(int(baseline), [int(o) for o in others], list(intended), allow_mixed)


def comparison(selection: Selection, lang: str) -> Comparison | None:
    """The analysis of the selected runs, or None with the reason shown."""
    if not selection.others:
        st.info(t("select.pick_others", lang), icon=":material/compare_arrows:")
    with db_guard(lang) as guard:
        frame = cached_points((selection.baseline, *selection.others))  # type: ignore[arg-type]
    if guard.failed:
        return None
    if frame.empty:
        st.warning(t("select.no_points", lang))
        return None
    sources = set(frame["source"])
    if "emulated" in sources and len(sources) > 1 and not selection.allow_mixed:
        st.error(t("select.mixed_refused", lang), icon=":material/science:")
        return None
    missing = [r for r in (selection.baseline, *selection.others) if r not in set(frame["run_id"])]
    if missing:
        st.warning(t("select.runs_without_points", lang, runs=", ".join(f"#{r}" for r in missing)))
    assert selection.baseline is not None  # noqa: S101 - pick() always sets it
    return comparison_with_settings(frame, selection.baseline, selection.others, lang, get_settings(),
                                    intended_to_differ=frozenset(selection.intended))
