"""The tuner's quality constraint (issue 42): with ``quality: same`` in a study, a trial
whose quality probe is not "same within the floor" as its reference run's
(domain/results/quality.py) is infeasible, however fast it is."""

from __future__ import annotations

from dataclasses import replace

from domain.results.quality import QualityResult
from domain.tune.score import TrialScore

QUALITY_MISS = 1.0  # how far an infeasible-by-quality trial misses (the SLA's misses are fractions too)


def with_quality(score: TrialScore, result: QualityResult | None) -> TrialScore:
    """``score`` unchanged when ``result`` is None (the trial is its own reference) or
    "same"; otherwise infeasible, the verdict among its violations."""
    if result is None or result.verdict == "same":
        return score
    violation = f"quality {result.verdict.replace('_', ' ')} vs run #{result.baseline_run_id}: {result.reason}"
    return replace(score, feasible=False, violations=(*score.violations, violation),
                   miss=max(score.miss, QUALITY_MISS))
