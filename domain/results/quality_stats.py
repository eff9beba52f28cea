"""Intervals for the quality probe: proportions, unpaired and paired differences.

- :func:`wilson`: Wilson's score interval for one proportion (accuracy, a share of tokens).
- :func:`newcombe`: Newcombe's hybrid score interval (his method 10) for the difference of
  two independent proportions, built from the two Wilson intervals.
- :func:`paired_difference`: the difference of two accuracies on the same items, with the
  Agresti–Min adjusted Wald interval (half a count added to each cell of the 2×2 table),
  and McNemar's exact test on the discordant items.
All at 95 % by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    if n <= 0:
        return Interval(math.nan, 0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> Interval:
    """p1 − p2 for independent samples."""
    a, b = wilson(k1, n1, z), wilson(k2, n2, z)
    d = a.estimate - b.estimate
    low = d - math.sqrt((a.estimate - a.low) ** 2 + (b.high - b.estimate) ** 2)
    high = d + math.sqrt((a.high - a.estimate) ** 2 + (b.estimate - b.low) ** 2)
    return Interval(d, max(-1.0, low), min(1.0, high))


@dataclass(frozen=True)
class PairedDifference:
    """Candidate minus baseline accuracy on the same ``n`` items; ``candidate_only`` items
    right only under the candidate, ``baseline_only`` only under the baseline."""

    n: int
    candidate_only: int
    baseline_only: int
    interval: Interval
    mcnemar_p: float

    def as_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "candidate_only": self.candidate_only, "baseline_only": self.baseline_only,
                **{f"difference_{k}": v for k, v in self.interval.as_dict().items()},
                "mcnemar_p": self.mcnemar_p}


def paired_difference(candidate: list[bool], baseline: list[bool], z: float = Z95) -> PairedDifference:
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError("paired accuracy needs the same, non-empty item list on both sides")
    n = len(candidate)
    c_only = sum(1 for c, b in zip(candidate, baseline, strict=True) if c and not b)
    b_only = sum(1 for c, b in zip(candidate, baseline, strict=True) if b and not c)
    estimate = (c_only - b_only) / n
    return PairedDifference(n, c_only, b_only, _agresti_min(c_only, b_only, n, estimate, z),
                            mcnemar_exact(c_only, b_only))


def _agresti_min(c_only: int, b_only: int, n: int, estimate: float, z: float) -> Interval:
    c, b, m = c_only + 0.5, b_only + 0.5, n + 2.0
    d = (c - b) / m
    se = math.sqrt(max(0.0, (c + b) - (c - b) ** 2 / m)) / m
    return Interval(estimate, max(-1.0, d - z * se), min(1.0, d + z * se))


def mcnemar_exact(c_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the discordant items as Binomial(c+b, ½)."""
    total = c_only + b_only
    if total == 0:
        return 1.0
    tail = sum(math.comb(total, k) for k in range(min(c_only, b_only) + 1)) / 2 ** total
    return min(1.0, 2 * tail)
