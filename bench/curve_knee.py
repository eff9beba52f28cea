"""How often the knee rule finds a known knee on noisy sweeps.

Each synthetic sweep is a throughput curve sampled on the plan's default concurrency grid
(``domain.plan.run_plan.DEFAULT_CONCURRENCY``: 1, 2, 4, 8, 12, 16, 24, 32), each point
multiplied by its own noise factor, uniform in ±3 % (the run-to-run spread
``domain/results/analysis.py`` assumes for throughput).  Four families of curves, in turn,
so the fitted curve (``domain.results.curve``) is scored on shapes other than its own:

- ``bend``: ``T·c / (cⁿ + kⁿ)^(1/n)`` with a slow drift ``(1 + d·log2 c)``, n in 1…8,
  d in ±2 % per doubling (the fit's own family, drift aside);
- ``corner``: linear up to k, then a straight ``(1 + s·log2(c/k))``, s in −3…+5 %;
- ``decline``: a bend that falls 3–10 % per doubling past a peak at k2;
- ``two_regimes``: linear up to k1, then +15…40 % per doubling up to k2, then flat.

The **true knee** of a sweep is what the unchanged threshold rule says on the curve
without noise: the smallest grid concurrency after which every grid step gains less than
the threshold (10 %) per doubling, ``(thr2/thr1)^(1/log2(c2/c1)) − 1``; "none" when the
last step still gains that much.  A rule **hits** when its knee is within one grid step of
the true knee, "none" counting as the position after the last grid point.

``python -m bench curve_knee`` prints the hit rate of ``curve.knee_of`` and of the raw
per-step rule on the same noisy sweeps (200 sweeps per seed, seeds 0–4; ``--quick``: one seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from domain.plan.run_plan import DEFAULT_CONCURRENCY
from domain.results.curve import DEFAULT_SATURATION_GAIN_PCT, gain_per_doubling, knee_of

GRID = np.array(DEFAULT_CONCURRENCY, dtype=float)
NOISE = 0.03
Curve = Callable[[np.ndarray], np.ndarray]


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def bend(rng: np.random.Generator) -> Curve:
    n, k, d = _log_uniform(rng, 1.0, 8.0), _log_uniform(rng, 0.7, 40.0), rng.uniform(-0.02, 0.02)
    return lambda c: 1000.0 * c / (c**n + k**n) ** (1.0 / n) * (1.0 + d * np.log2(c))


def corner(rng: np.random.Generator) -> Curve:
    k, s = _log_uniform(rng, 0.7, 40.0), rng.uniform(-0.03, 0.05)
    return lambda c: 1000.0 * np.minimum(c, k) * (1.0 + s * np.log2(np.maximum(c / k, 1.0)))


def decline(rng: np.random.Generator) -> Curve:
    rise, peak, fall = bend(rng), _log_uniform(rng, 2.0, 40.0), rng.uniform(0.03, 0.10)
    return lambda c: rise(c) * (1.0 - fall * np.log2(np.maximum(c / peak, 1.0)))


def two_regimes(rng: np.random.Generator) -> Curve:
    k1 = _log_uniform(rng, 0.7, 8.0)
    k2, gain = k1 * _log_uniform(rng, 2.0, 8.0), rng.uniform(0.15, 0.40)
    return lambda c: 1000.0 * np.minimum(c, k1) * (np.clip(c, k1, k2) / k1) ** math.log2(1.0 + gain)


FAMILIES = (bend, corner, decline, two_regimes)


def step_knee(cs: np.ndarray, thr: np.ndarray, threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT) -> float | None:
    """The raw per-step rule: the first grid step after which every step gains under the threshold."""
    knee = None
    for i in range(len(cs) - 1):
        if gain_per_doubling(cs[i], thr[i], cs[i + 1], thr[i + 1]) * 100.0 < threshold_pct:
            knee = float(cs[i]) if knee is None else knee
        else:
            knee = None
    return knee


def position(knee: float | None) -> int:
    """Index of a knee on the grid; "none" is the position after the last point."""
    return len(GRID) if knee is None else int(np.flatnonzero(GRID == knee)[0])


def hit_rates(curves: int = 200, seed: int = 0) -> dict[str, float]:
    """Share of ``curves`` noisy sweeps (families in turn) whose knee each rule finds within one step."""
    rng = np.random.default_rng(seed)
    hits = {"knee_of": 0, "raw_steps": 0}
    for i in range(curves):
        clean = FAMILIES[i % len(FAMILIES)](rng)(GRID)
        truth = position(step_knee(GRID, clean))
        noisy = clean * (1.0 + rng.uniform(-NOISE, NOISE, len(GRID)))
        hits["knee_of"] += abs(position(knee_of(list(GRID), list(noisy))[0]) - truth) <= 1
        hits["raw_steps"] += abs(position(step_knee(GRID, noisy)) - truth) <= 1
    return {rule: count / curves for rule, count in hits.items()}


def run(quick: bool = False) -> None:
    for seed in range(1 if quick else 5):
        rates = hit_rates(200, seed)
        print(f"seed {seed}: 200 sweeps, ±{NOISE:.0%} noise, grid {DEFAULT_CONCURRENCY}: "
              f"knee within one step: curve.knee_of {rates['knee_of']:.1%}, raw per-step rule {rates['raw_steps']:.1%}",
              flush=True)
