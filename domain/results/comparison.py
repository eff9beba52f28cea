"""One comparison: a baseline and runs in one language, with every frame the compare page,
``runner export`` and the exports (:mod:`domain.slides.tables`, :mod:`domain.slides.deck`)
read from it.  Numbers and text only; the charts are built from it in :mod:`domain.slides`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import pandas as pd

from domain.core.settings import Settings
from domain.results import analysis, comparability, validity
from domain.results.caveat import caveat_lines


@dataclass
class Comparison:
    """A baseline and runs compared in one language, with every derived frame."""

    frame: pd.DataFrame
    baseline_run_id: int
    run_ids: list[int]
    lang: str
    intended_to_differ: frozenset[str]
    summary: pd.DataFrame  # analysis.summarise_points
    compare: pd.DataFrame  # analysis.compare_table (long)
    saturation: pd.DataFrame
    scaling: pd.DataFrame
    pareto: pd.DataFrame
    badges: pd.DataFrame  # validity.validity_badges
    matrix: pd.DataFrame  # comparability.comparability_matrix
    checklist: pd.DataFrame  # comparability.comparability_summary
    caveat: list[str] = field(default_factory=list)


def build_comparison(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str, *,
                     intended_to_differ: Collection[str] = frozenset(),
                     gain_threshold_pct: float = analysis.DEFAULT_SATURATION_GAIN_PCT,
                     sla_metric: str | None = None, sla_threshold_ms: float | None = None) -> Comparison:
    others = [r for r in dict.fromkeys(run_ids) if r != baseline_run_id]
    selected = frame[frame["run_id"].isin([baseline_run_id, *others])]
    summary = analysis.summarise_points(selected)
    matrix = comparability.comparability_matrix(selected, baseline_run_id, others, intended_to_differ)
    checklist = comparability.comparability_summary(matrix)
    return Comparison(
        frame=selected, baseline_run_id=baseline_run_id, run_ids=others, lang=lang,
        intended_to_differ=frozenset(intended_to_differ), summary=summary,
        compare=analysis.compare_table(selected, baseline_run_id, [baseline_run_id, *others]),
        saturation=analysis.saturation_points(summary, gain_threshold_pct=gain_threshold_pct, sla_metric=sla_metric,
                                              sla_threshold_ms=sla_threshold_ms),
        scaling=analysis.scaling_efficiency(summary), pareto=analysis.pareto_points(summary),
        badges=validity.validity_badges(selected), matrix=matrix,
        checklist=checklist,
        caveat=caveat_lines(selected, baseline_run_id, others, lang, intended_to_differ, checklist),
    )


def comparison_with_settings(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                             settings: Settings, *, intended_to_differ: Collection[str] = frozenset()) -> Comparison:
    """build_comparison with the saturation rule and p99 SLA taken from the settings, as
    both the compare page and ``runner export`` use it."""
    return build_comparison(frame, baseline_run_id, run_ids, lang, intended_to_differ=intended_to_differ,
                            gain_threshold_pct=settings.saturation_gain_pct,
                            sla_metric=settings.sla_metric if settings.sla_ms else None,
                            sla_threshold_ms=settings.sla_ms)
