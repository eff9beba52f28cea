"""Whether a difference between a run and its baseline matters to the team: the verdict of
one delta, read from the 95 % interval of the difference and from a practical threshold.

**The interval of a difference** (:func:`difference_interval`, :func:`difference_intervals`).
The two sides are independent measurements (different launches, different requests), so
the variance of the log of their ratio is the sum of each side's.  Each side's 95 %
half-width is turned into a log-scale one (relative to its value: the first-order log of
``1 ± h/v``), the two are added in quadrature, and the interval of ``log(run / baseline)``
is turned back into percent: the interval a joint resampling of two independent sides gives
when each statistic is close to log-normal, computed from the intervals each side keeps
beside its samples (db/bootstrap_memo.py) without resampling again.  A side that is not
positive falls back to the linear rule ``Δ ± hypot(h_run, h_base) / |base|``.

**The verdict** (:func:`classify_interval`, :func:`classify_intervals`), threshold x =
``BENCHDECK_PRACTICAL_THRESHOLD_PCT`` (default ±2 %), the interval [low, high] in %:

* 'same' (shown "≈"): the interval spans zero and lies within ±x (same within ±x %);
* 'cannot_tell' (shown with "?"): the interval spans zero and reaches past ±x: the data
  cannot say whether the runs differ by more than the team cares about;
* 'small': the interval misses zero but |Δ| < x: real as far as the data can tell, too small
  to act on, shown with its sign in a neutral colour;
* 'better' / 'worse' (or 'changed' for a metric with no direction): the interval misses
  zero and |Δ| ≥ x;
* 'uncertain': no interval (no noise estimate on a side): never judged; 'n/a': no delta.

Two measurements of one process are called different only when the interval misses zero,
about one time in twenty for a 95 % interval (tests/test_difference.py checks it through
the compare table on correlated synthetic points).  :func:`classify` / :func:`classify_many`
are the same rule for a symmetric interval ``Δ ± noise`` (a delta and its noise half-width).
"""

from __future__ import annotations

import math

import numpy as np

# A difference within ±2 % is below what a team acts on when tuning a server (a flag that
# buys under 2 % is rarely worth its risk); a setting, because teams differ.
DEFAULT_PRACTICAL_THRESHOLD_PCT = 2.0
SMALL = "small"
CANNOT_TELL = "cannot_tell"
# The verdicts a colour and the words better / worse / changed belong to.
JUDGED = ("better", "worse", "changed")


def classify(delta_pct: float, noise_pct: float, direction: object,
             threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> str:
    """The verdict of one delta (in % of the baseline) against its noise half-width (in %):
    :func:`classify_interval` of the interval ``delta ± noise``."""
    return str(classify_many(np.array([delta_pct], dtype=float), np.array([noise_pct], dtype=float),
                             np.array([direction], dtype=object), threshold_pct)[0])


def classify_many(delta_pct: np.ndarray, noise_pct: np.ndarray, direction: np.ndarray,
                  threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> np.ndarray:
    """:func:`classify` of each row, vectorised."""
    return classify_intervals(delta_pct, delta_pct - noise_pct, delta_pct + noise_pct, direction, threshold_pct)


def classify_interval(delta_pct: float, low_pct: float, high_pct: float, direction: object,
                      threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> str:
    """The verdict of one delta whose 95 % interval is [low_pct, high_pct] % (see the
    module's docstring); ``direction``: 'higher', 'lower' or anything else (no direction)."""
    return str(classify_intervals(np.array([delta_pct], dtype=float), np.array([low_pct], dtype=float),
                                  np.array([high_pct], dtype=float), np.array([direction], dtype=object),
                                  threshold_pct)[0])


def classify_intervals(delta_pct: np.ndarray, low_pct: np.ndarray, high_pct: np.ndarray, direction: np.ndarray,
                       threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT) -> np.ndarray:
    """:func:`classify_interval` of each row, vectorised (a row at a time was a fifth of a
    nine-run comparison's compare table)."""
    if not threshold_pct >= 0:
        raise ValueError(f"the practical threshold must be a number ≥ 0, got {threshold_pct!r}")
    higher, lower = direction == "higher", direction == "lower"
    with np.errstate(invalid="ignore"):  # NaN compares False; the first conditions catch it
        spans_zero = (low_pct <= 0) & (high_pct >= 0)
        within = (low_pct >= -threshold_pct) & (high_pct <= threshold_pct)
        return np.select(
            [np.isnan(delta_pct), np.isnan(low_pct) | np.isnan(high_pct), spans_zero & within, spans_zero,
             np.abs(delta_pct) < threshold_pct, ~(higher | lower), (delta_pct > 0) == higher],
            ["n/a", "uncertain", "same", CANNOT_TELL, SMALL, "changed", "better"], "worse")


def practical_threshold_pct(settings: object | None = None) -> float:
    """The band: ``settings.practical_threshold_pct`` when given
    (``BENCHDECK_PRACTICAL_THRESHOLD_PCT``), else the default."""
    value = getattr(settings, "practical_threshold_pct", None)
    return DEFAULT_PRACTICAL_THRESHOLD_PCT if value is None else float(value)


def difference_interval(value: float, half_width: float, baseline: float,
                        baseline_half_width: float) -> tuple[float, float, float]:
    """(Δ %, low %, high %) of ``value`` against ``baseline``, each with its 95 % half-width
    (see the module's docstring); NaN where a value or half-width is missing or the baseline 0."""
    delta, low, high = difference_intervals(*(np.array([v], dtype=float)
                                              for v in (value, half_width, baseline, baseline_half_width)))
    return float(delta[0]), float(low[0]), float(high[0])


def difference_intervals(value: np.ndarray, half_width: np.ndarray, baseline: np.ndarray,
                         baseline_half_width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`difference_interval` over arrays of equal length."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        usable = np.isfinite(baseline) & (baseline != 0) & np.isfinite(value)
        delta = np.where(usable, (value - baseline) / np.abs(baseline) * 100.0, np.nan)
        positive = usable & (value > 0) & (baseline > 0)
        log_half = np.hypot(half_width / value, baseline_half_width / baseline)
        ratio = value / baseline
        linear_half = np.hypot(half_width, baseline_half_width) / np.abs(baseline) * 100.0
        low = np.where(positive, (ratio * np.exp(-log_half) - 1.0) * 100.0, delta - linear_half)
        high = np.where(positive, (ratio * np.exp(log_half) - 1.0) * 100.0, delta + linear_half)
    missing = ~usable | ~np.isfinite(low) | ~np.isfinite(high)
    return delta, np.where(missing, np.nan, low), np.where(missing, np.nan, high)


def interval_text(low_pct: float, high_pct: float) -> str:
    """A difference's interval as shown beside it: "[-3.1, +5.2]%", "" without one."""
    if _missing(low_pct) or _missing(high_pct):
        return ""
    return f"[{low_pct:+.1f}, {high_pct:+.1f}]%"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
