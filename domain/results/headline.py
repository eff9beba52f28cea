"""The headline of a comparison, one line per compared run, in the user's words: which run
against which, the verdict, and the change under test from the older run to the newer
("#2 vs #1 (baseline): comparable; the change under test: --max-running-requests 64 → 128
(Serving settings, low to medium risk)").

The direction is the order the runs were made in (a run's id grows with time), whichever
of them is the baseline: a user who raised a flag in the second run reads "64 → 128" even
when they picked the second run as the baseline.  The line is the verdict box's, the first
line of every export and the title of the one-slide export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from domain.compare import comparability
from domain.core.i18n import t
from domain.flags.risk import risk_layers


def headline_lines(flag_diff: pd.DataFrame, checklist: pd.DataFrame, baseline_run_id: int, lang: str) -> list[str]:
    """One line per row of ``checklist`` (:func:`comparability.comparability_summary`);
    ``flag_diff`` is :func:`config_diff.config_diff` of the same runs."""
    return [headline(row, flag_diff[flag_diff["run_id"] == row["run_id"]], baseline_run_id, lang)
            for row in checklist.to_dict("records")]


def headline(summary_row: Mapping[str, Any], flags: pd.DataFrame, baseline_run_id: int, lang: str) -> str:
    run_id = int(summary_row["run_id"])
    forward = run_id > baseline_run_id  # the baseline is the older run
    older, newer = (baseline_run_id, run_id) if forward else (run_id, baseline_run_id)
    # The conditions under test are named below, in the run order; the verdict keeps the rest.
    verdict = comparability.summary_line({**summary_row, "intended": [],
                                          "values": _oriented(summary_row.get("values") or {}, forward)}, lang)
    changes = [_flag_change(row, forward, lang) for row in flags.to_dict("records")]
    changes += [_condition_change(name, summary_row, forward, lang) for name in summary_row["intended"]]
    return t("compare.headline.line", lang, newer=_run(newer, baseline_run_id, lang),
             older=_run(older, baseline_run_id, lang), verdict=verdict,
             change="; ".join(changes) or t("compare.headline.no_change", lang))


def _oriented(values: Mapping[str, tuple[str, str]], forward: bool) -> dict[str, tuple[str, str]]:
    """Each condition's (baseline, run) values as (older, newer); the points' own condition
    names its sides ("baseline only …"), so it keeps them."""
    if forward:
        return dict(values)
    return {name: (pair if name == comparability.POINTS_CONDITION else (pair[1], pair[0]))
            for name, pair in values.items()}


def _run(run_id: int, baseline_run_id: int, lang: str) -> str:
    key = "compare.headline.baseline_run" if run_id == baseline_run_id else "compare.headline.run"
    return t(key, lang, run_id=run_id)


def _flag_change(row: Mapping[str, Any], forward: bool, lang: str) -> str:
    old, new = (row["baseline_value"], row["value"]) if forward else (row["value"], row["baseline_value"])
    layer = risk_layers().layer(row["layer"]) if row["layer"] else None
    # A row between an SGLang and a vLLM run is a knob: its flag names both spellings, dashes included.
    key = "compare.headline.knob" if row.get("counterpart") else "compare.headline.flag"
    return t(key, lang, flag=row["flag"], old=old, new=new,
             layer=(layer.name.get(lang) or layer.name["en"]) if layer else t("compare.changed.unclassified", lang),
             risk=t(f"flags.risk.level.{row['risk']}", lang) if row["risk"] else "?")


def _condition_change(name: str, summary_row: Mapping[str, Any], forward: bool, lang: str) -> str:
    label = comparability.condition_label(name, lang)
    values = (summary_row.get("values") or {}).get(name)
    if values is None:
        return label
    old, new = values if forward else values[::-1]
    return t("compare.summary.field", lang, label=label, baseline=old, value=new)
