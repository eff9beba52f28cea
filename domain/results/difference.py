"""Whether a difference between a run and its baseline matters to the team: the verdict of
one delta, read from the noise estimate and from a practical threshold.

A delta inside the noise is 'same' (shown "≈").  A delta beyond the noise but smaller than
the practical threshold (``BENCHDECK_PRACTICAL_THRESHOLD_PCT``, default ±2 %) is 'small':
real as far as the data can tell, too small to act on, shown with its sign in a neutral
colour.  Only a delta beyond both is 'better' or 'worse' (or 'changed' for a metric with no
direction).  Without a noise estimate on both sides the verdict is 'uncertain' and the delta
is never judged; 'n/a' when a side is missing.

Both rules live here, once: the one-delta form (:func:`classify`) and the vectorised form
the compare table uses (:func:`classify_many`) say the same thing.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_PRACTICAL_THRESHOLD_PCT = 2.0
SMALL = "small"
# The verdicts a colour and the words better / worse / changed belong to.
JUDGED = ("better", "worse", "changed")


def classify(delta_pct: float, noise_pct: float, direction: object,
             threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> str:
    """The verdict of one delta (in % of the baseline) against its noise half-width (in %)."""
    if _missing(delta_pct):
        return "n/a"
    if _missing(noise_pct):
        return "uncertain"
    if abs(delta_pct) <= noise_pct:
        return "same"
    if abs(delta_pct) < threshold_pct:
        return SMALL
    if direction not in ("higher", "lower"):  # None, or NaN after a frame round trip
        return "changed"
    return "better" if (delta_pct > 0) == (direction == "higher") else "worse"


def classify_many(delta_pct: np.ndarray, noise_pct: np.ndarray, direction: np.ndarray,
                  threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> np.ndarray:
    """:func:`classify` of each row, vectorised (a row at a time was a fifth of a nine-run
    comparison's compare table)."""
    higher, lower = direction == "higher", direction == "lower"
    with np.errstate(invalid="ignore"):  # NaN compares False; the first conditions catch it
        return np.select(
            [np.isnan(delta_pct), np.isnan(noise_pct), np.abs(delta_pct) <= noise_pct,
             np.abs(delta_pct) < threshold_pct, ~(higher | lower), (delta_pct > 0) == higher],
            ["n/a", "uncertain", "same", SMALL, "changed", "better"], "worse")


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
