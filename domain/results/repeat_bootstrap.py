"""The 95 % interval of a point measured in several repeats, from the requests of every
repeat: a two-level bootstrap (repeats, then requests within each).

A repeat is a separate measurement of the point, often of a fresh server launch
(``fresh_launch_per_repeat``): its requests share whatever that launch was (placement,
warm caches, the state of the host), so two launches differ by more than their requests'
noise.  The point's latency statistics are computed over the requests of all repeats
pooled (:mod:`domain.results.analysis`), and an interval over those pooled requests as if
they were one sample would hold only the requests' noise: a launch-to-launch offset would
be inside the value and outside the interval.  The t interval of the mean of per-repeat
values holds the launch noise but reads a pooled quantile as a mean of per-repeat ones and,
with two or three repeats, is several times wider than the data warrant (t(0.975, 1) is
12.7).

**Why two levels.**  Each resample draws as many repeats as were measured, with
replacement, and then, within each drawn repeat, its requests: the spread of the resampled
pooled statistic then holds both the launch-to-launch spread (which repeats come in, and
how often) and each launch's own sampling noise (which of its requests come in), as the
pooled value itself does.

* Within a repeat, requests are drawn as the effective sample of that repeat
  (:func:`domain.results.requests.variance_inflation` of its lag-1 autocorrelation in
  completion order): ``round(n / inflation)`` draws of its ``n`` requests, so a
  resampled repeat varies as much as a correlated repeat does (the per-point intervals'
  own correction; an i.i.d. draw of all ``n`` would hold a correlated repeat's noise too
  narrowly).  A latency's quantiles share one resampling, drawn as its median's
  effective sample (the smallest of them): a third of the work, and a tail quantile's
  interval errs wide.
* The interval is the 2.5 and 97.5 percentiles of the resampled pooled statistics
  (1,000 resamples, the per-point seed), around the pooled value.
* What it over- and under-counts: the resampled repeats' spread already holds each
  repeat's own noise once, and the draws within them add it again, so with no launch
  offset the interval is wider than a one-sample interval over the pooled requests, by at
  most ``sqrt(2)`` (about ``sqrt((2R − 1)/R)`` for R repeats); and R repeats show the
  launch spread as R values do, (R − 1)/R of its variance.  Both are how a two-level
  resampling of few groups behaves; the first errs on the side of not calling a
  difference, and neither can be removed without a model of how launches differ.

Latency statistics only (``requests.LATENCY_STATISTICS``); a throughput of a point with
repeats stays the mean over repeats with its t interval.  Cost: one resampling per
latency over all the repeats' requests, once per point: :func:`pooled_intervals` keeps
the result in the first repeat's bootstrap memo, which the pages and the CLI export keep
beside its samples (db/bootstrap_memo.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from domain.results import requests as req

# Over this many request × resample cells the within-repeat draws are made in batches (memory).
_CELLS_PER_BATCH = 4_000_000


def two_level_intervals(repeats: Sequence[pd.DataFrame], names: Sequence[str], *,
                        n_resamples: int = req.N_RESAMPLES, seed: int = req.BOOTSTRAP_SEED) -> dict[str, req.Interval]:
    """95 % two-level bootstrap intervals (see the module's docstring) of the named latency
    statistics of the point whose repeats' requests are ``repeats``; a statistic it cannot
    compute over the pooled requests is left out, and nothing under two repeats of two
    successful requests each.  ``n`` of each interval: the pooled successful requests."""
    parts = [req.in_completion_order(req.successful(r)) for r in repeats]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    if len(parts) < 2 or (sizes < 2).any():
        return {}
    pooled = req.ResampledPoint(pd.concat(parts, ignore_index=True), None)
    wanted = [name for name in names if name in req.LATENCY_STATISTICS and pooled.computable(name)]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(parts), size=(n_resamples, len(parts)))
    out = {}
    for drawn_as, group in _resampled_together(wanted).items():
        draws = effective_draws(pooled.series(drawn_as), sizes, drawn_as)
        values = pooled.evaluate(group, _two_level_counts(rng, picks, sizes, draws))
        estimates = pooled.estimates(group)
        for i, name in enumerate(group):
            low, high = np.nanpercentile(values[i], [50.0 * (1.0 - req.CONFIDENCE), 50.0 * (1.0 + req.CONFIDENCE)])
            out[name] = req.Interval(estimates[i], float(low), float(high), int(sizes.sum()))
    return {name: out[name] for name in wanted}


def _resampled_together(names: Sequence[str]) -> dict[str, list[str]]:
    """The statistics that share one resampling, by the statistic whose effective sample
    sets its within-repeat draws: a latency's quantiles share its median's (the quantile a
    correlation disturbs most: ``requests.variance_inflation``), so its p90 and p99 are
    drawn a little more noisily than their own effective samples would say (wider, never
    narrower); a mean is drawn apart, as its own."""
    groups: dict[str, list[str]] = {}
    for name in names:
        latency, _, stat = name.rpartition("_")
        groups.setdefault(name if stat == "mean" else f"{latency}_p50", []).append(name)
    return groups


def effective_draws(series: np.ndarray, sizes: np.ndarray, name: str) -> np.ndarray:
    """Per repeat (``series`` is the repeats' per-request series laid end to end, ``sizes``
    their lengths): how many requests a resample draws from it, its effective sample for
    the statistic ``name``, at least one."""
    quantile = req.QUANTILES.get(name.rpartition("_")[2])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    draws = []
    for start, end in itertools.pairwise(bounds.tolist()):
        n = int(end - start)
        inflation = req.variance_inflation(req.lag1_autocorrelation(series[start:end]), n, quantile)
        draws.append(max(1, round(n / inflation)))
    return np.array(draws, dtype=np.int64)


def _two_level_counts(rng: np.random.Generator, picks: np.ndarray, sizes: np.ndarray,
                      draws: np.ndarray) -> np.ndarray:
    """How often each pooled request appears in each resample (resamples × requests): in
    resample b, for each of its drawn repeats ``picks[b]``, ``draws`` of that repeat's
    requests, uniformly with replacement."""
    rows, slots = picks.shape
    total = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    blocks = []
    step = max(1, _CELLS_PER_BATCH // max(1, slots * int(draws.max())))
    for first in range(0, rows, step):
        chosen = picks[first:first + step]
        flat = np.concatenate([_drawn(rng, offsets[repeat], sizes[repeat], draws[repeat], total)
                               for repeat in chosen.T])
        blocks.append(np.bincount(flat, minlength=len(chosen) * total).reshape(len(chosen), total))
    return np.concatenate(blocks).astype(np.int32)


def _drawn(rng: np.random.Generator, offset: np.ndarray, size: np.ndarray, draws: np.ndarray,
           total: int) -> np.ndarray:
    """One drawn repeat per row: ``draws[i]`` requests of the repeat at ``offset[i]`` of
    ``size[i]`` requests, as flat positions in a (rows × ``total``) count matrix."""
    rows, most = draws.size, int(draws.max())
    index = offset[:, None] + (rng.random((rows, most)) * size[:, None]).astype(np.int64)
    used = np.arange(most)[None, :] < draws[:, None]
    return (index + (np.arange(rows) * total)[:, None])[used]


def pooled_intervals(repeats: Sequence[pd.DataFrame], point_ids: Sequence[int], names: Sequence[str],
                     memo: req.BootstrapMemo | None = None) -> dict[str, req.Interval]:
    """:func:`two_level_intervals` of the point whose repeats are ``point_ids`` (their
    requests ``repeats``), read from ``memo`` (the first repeat's: db/bootstrap_memo.py
    keeps it beside that repeat's samples) when computed before, and kept there when not.
    The key names every repeat: a point that gains or loses a repeat is resampled again."""
    key = json.dumps(["two_level", [int(i) for i in point_ids], req.bootstrap_key(None, names)])
    entry = None if memo is None else memo.get(key)
    if entry is not None:
        return {name: req.Interval(float(v[0]), float(v[1]), float(v[2]), int(v[3])) for name, v in entry.items()}
    intervals = two_level_intervals(repeats, names)
    if memo is not None:
        memo[key] = {name: [i.estimate, i.low, i.high, i.n, i.rho, i.n_eff] for name, i in intervals.items()}
    return intervals
