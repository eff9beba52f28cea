"""The caveat footer every export of a comparison carries, in the UI language: the
comparability key, the fields that differ, the number of repeats, the noise rule, and
whether any data is emulated or imported.

It lives beside the comparison rather than with the exports because
:func:`domain.results.comparison.build_comparison` computes it once for the page, the
tables (:mod:`domain.slides.tables`) and the deck (:mod:`domain.slides.deck`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pandas as pd

from domain.core.i18n import t
from domain.results import analysis, comparability


def caveat_lines(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                 intended_to_differ: Collection[str] = frozenset(), checklist: pd.DataFrame | None = None) -> list[str]:
    """The footer every export carries, in the UI language.  ``checklist`` (the output of
    :func:`comparability.comparability_summary`) saves recomputing it when at hand."""
    summary = checklist
    if summary is None:
        matrix = comparability.comparability_matrix(frame, baseline_run_id, run_ids, intended_to_differ)
        summary = comparability.comparability_summary(matrix)
    lines = [t("compare.caveat.key", lang, run_id=baseline_run_id,
               key=comparability.key_summary(frame, baseline_run_id, lang))]
    lines += _differences(summary, lang) or [t("compare.caveat.all_match", lang)]
    lines.append(t("compare.caveat.repeats", lang, repeats=_repeats_text(frame, [baseline_run_id, *run_ids])) + " · "
                 + t("compare.caveat.noise", lang, noise=_noise_text(lang)))
    lines.append(_sources_text(frame, [baseline_run_id, *run_ids], lang))
    return lines


def _differences(summary: pd.DataFrame, lang: str) -> list[str]:
    lines = []
    for _, row in summary.iterrows():
        if row["verdict"] != "comparable" or row["intended"]:
            fields = comparability.summary_line(row, lang)
            if row["intended"]:
                intended = ", ".join(comparability.condition_label(c, lang) for c in row["intended"])
                fields += f" · {t('compare.verdict.changed', lang)}: {intended}"
            lines.append(t("compare.caveat.differs", lang, run_id=row["run_id"], fields=fields))
    return lines


def _repeats_text(frame: pd.DataFrame, run_ids: Sequence[int]) -> str:
    rows = frame[frame["run_id"].isin(run_ids)]
    counts = rows.groupby(["run_id", *analysis.POINT]).size()
    low, high = int(counts.min()), int(counts.max())
    return str(low) if low == high else f"{low}–{high}"


def _noise_text(lang: str) -> str:
    return t("compare.noise.default", lang, band=f"{analysis.DEFAULT_NOISE_BAND_PCT:g}",
             tail=f"{analysis.TAIL_NOISE_BAND_PCT:g}") + " / " + t("compare.noise.repeats", lang, n="≥2")


def _sources_text(frame: pd.DataFrame, run_ids: Sequence[int], lang: str) -> str:
    sources = set(frame.loc[frame["run_id"].isin(run_ids), "source"])
    notes = [t(f"compare.caveat.{s}", lang) for s in ("emulated", "imported") if s in sources]
    return " · ".join(notes) or t("compare.caveat.measured_only", lang)
