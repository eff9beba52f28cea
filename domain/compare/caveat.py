"""The caveat footer every export of a comparison carries, in the UI language: the
comparability key, one verdict line per compared run naming each difference with both
values (:func:`comparability.verdict_lines`), the number of repeats, the noise rule, and
whether any data is emulated or imported.  Also :func:`changed_lines`: what changed (the
server flags that differ, with each flag's layer and risk, and the conditions under test),
for the first lines of every export.

It lives beside the comparison rather than with the exports because
:func:`domain.compare.comparison.build_comparison` computes it once for the page, the
tables (:mod:`domain.render.tables`) and the deck (:mod:`domain.render.deck`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd

from domain.compare import comparability
from domain.core.i18n import t
from domain.flags.risk import risk_layers
from domain.results import analysis, difference


def caveat_lines(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                 intended_to_differ: Collection[str] = frozenset(), checklist: pd.DataFrame | None = None,
                 practical_threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT) -> list[str]:
    """The footer every export carries, in the UI language.  ``checklist`` (the output of
    :func:`comparability.comparability_summary`) saves recomputing it when at hand."""
    summary = checklist
    if summary is None:
        matrix = comparability.comparability_matrix(frame, baseline_run_id, run_ids, intended_to_differ)
        summary = comparability.comparability_summary(matrix)
    lines = [t("compare.caveat.key", lang, run_id=baseline_run_id,
               key=comparability.key_summary(frame, baseline_run_id, lang))]
    lines += comparability.verdict_lines(summary, baseline_run_id, lang)
    lines.append(t("compare.caveat.repeats", lang, repeats=_repeats_text(frame, [baseline_run_id, *run_ids])) + " · "
                 + t("compare.caveat.noise", lang, noise=analysis.noise_rule_text(lang, practical_threshold_pct)))
    lines.append(_sources_text(frame, [baseline_run_id, *run_ids], lang))
    return lines


def changed_lines(flag_diff: pd.DataFrame, checklist: pd.DataFrame, baseline_run_id: int, lang: str) -> list[str]:
    """Per compared run: each server flag that differs ("#2: --max-running-requests: 64 → 128
    (layer: …, risk: …)"), or a line saying none does, then the conditions marked as under
    test with both values.  ``flag_diff`` is :func:`config_diff.config_diff`, ``checklist``
    :func:`comparability.comparability_summary`."""
    lines: list[str] = []
    for row in checklist.to_dict("records"):
        flags = flag_diff[flag_diff["run_id"] == row["run_id"]]
        lines += [_flag_line(flag, lang) for flag in flags.to_dict("records")] or [
            t("compare.changed.none", lang, run_id=row["run_id"], baseline=baseline_run_id)]
        if row["intended"]:
            fields = "; ".join(_intended_text(name, row["values"].get(name), lang) for name in row["intended"])
            lines.append(t("compare.changed.under_test", lang, run_id=row["run_id"], fields=fields))
    return lines


def _flag_line(diff_row: Mapping[str, Any], lang: str) -> str:
    layer = risk_layers().layer(diff_row["layer"]) if diff_row["layer"] else None
    # A row between an SGLang and a vLLM run is a knob: its flag names both spellings, dashes included.
    key = "compare.changed.flag" if not diff_row.get("counterpart") else "compare.changed.knob"
    return t(key, lang, run_id=diff_row["run_id"], flag=diff_row["flag"],
             baseline=diff_row["baseline_value"], value=diff_row["value"],
             layer=(layer.name.get(lang) or layer.name["en"]) if layer else t("compare.changed.unclassified", lang),
             risk=t(f"flags.risk.level.{diff_row['risk']}", lang) if diff_row["risk"] else "?")


def _intended_text(name: str, values: tuple[str, str] | None, lang: str) -> str:
    label = comparability.condition_label(name, lang)
    if values is None:
        return label
    return t("compare.summary.field", lang, label=label, baseline=values[0], value=values[1])


def _repeats_text(frame: pd.DataFrame, run_ids: Sequence[int]) -> str:
    rows = frame[frame["run_id"].isin(run_ids)]
    counts = rows.groupby(["run_id", *analysis.POINT]).size()
    low, high = int(counts.min()), int(counts.max())
    return str(low) if low == high else f"{low}–{high}"


def _sources_text(frame: pd.DataFrame, run_ids: Sequence[int], lang: str) -> str:
    sources = set(frame.loc[frame["run_id"].isin(run_ids), "source"])
    notes = [t(f"compare.caveat.{s}", lang) for s in ("emulated", "imported") if s in sources]
    return " · ".join(notes) or t("compare.caveat.measured_only", lang)
