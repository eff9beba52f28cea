"""Per-request samples of one measured point: the statistics bench_serving reports, recomputed
from the requests themselves, pooled over repeats, and bootstrap intervals over the requests.

A point's samples are one DataFrame with :data:`REQUEST_COLUMNS` (one row per request the
client sent in the measured window), written per point by the runner from the warm driver's
per-request capture (or, in the one-process-per-point fallback, from the client's
``--output-details`` record) and read back with ``Store.request_samples``; analysis code
receives them as :data:`RequestSamples`, keyed by the point's ``point_id``.

How each statistic is computed, so a recomputed number equals the client's own
(``sglang/benchmark/serving.py``, ``calculate_metrics``):

* only successful requests count (failed ones have no latency);
* percentiles are numpy's default (linear interpolation between order statistics);
* TPOT exists for requests with more than one output token;
* ITL percentiles are over all inter-token gaps of all requests pooled, so a request with
  many tokens weighs more, as in the client.

Intervals (:func:`bootstrap_intervals`): 95 % intervals that hold when consecutive requests
are correlated, as they are under a closed loop (a slow step delays every request in flight
and the next ones queue behind it).  The method is an **effective-sample-size correction**
from the measured lag-1 autocorrelation, not a block bootstrap.  Why: a block bootstrap
cuts the series into blocks of a length chosen from the data and loses the correlation
across block ends; with the 100–240 requests of a typical point at lag-1 correlation 0.6 it
leaves its intervals about as narrow as they were (tests/test_intervals.py prints both),
while the correction needs one statistic of the series and no resampling.

* The series: the point's successful requests in completion order (``start_s + e2e_ms``;
  row order when a start is unknown).  Its lag-1 autocorrelation ρ̂ is measured on normal
  scores of the ranks (a monotone transform does not change it: TTFT in ms or in log ms
  give the same), corrected for its small-sample bias and kept in [0, 0.99] (a negative
  correlation would narrow the interval: not trusted).  The bias is that of the sample
  autocorrelation r = Σ s_t s_{t−1} / Σ s_t² of a series whose mean is estimated: for an
  AR(1) of coefficient ρ, E[r] ≈ ρ − (1 + 4ρ)/n to first order in 1/n (the mean's
  estimation error and the shorter lagged sum both pull r down), so the estimate is the ρ
  that bias maps to r, ρ̂ = (n·r + 1) / (n − 4).  (The bias of a least-squares AR(1)
  coefficient, (1 + 3ρ)/n, is not r's: r divides by the whole sum of squares.  Left low,
  ρ̂ narrows the intervals exactly where n is small and ρ large.)
* The dependence is taken as geometric (AR(1) in the normal scores: lag-k correlation
  ρ̂^k).  The variance of a statistic is the i.i.d. variance times the inflation
  ``1 + 2 Σ_k (1 − k/n) c_k``, where c_k is the lag-k correlation of what the statistic
  averages: ρ̂^k for a mean, and for a quantile q the correlation of the indicators
  ``1{x ≤ x_q}``, which under a Gaussian copula is ``(Φ₂(z_q, z_q; ρ̂^k) − q²) / (q(1 − q))``
  (smaller than ρ̂^k: a quantile is less disturbed by correlation than a mean).  The
  effective sample is n / inflation; both are kept with each interval (``rho``, ``n_eff``).
* Latency quantiles of per-request values (TTFT, TPOT, E2E): the distribution-free
  order-statistic interval with the effective sample, ``[x_(q − d), x_(q + d)]`` with
  ``d = t(0.975, n_eff − 1) · sqrt(q(1 − q) / n_eff)`` (numpy's linear quantiles).  A
  percentile bootstrap of a p90 covers too rarely at the small effective samples a
  correlated point has.
* Means, ITL quantiles (gaps pooled over requests) and throughputs: ``scipy.stats.bootstrap``
  over requests (a request and all its inter-token gaps move together), 95 % percentile
  interval, then widened about the estimate by ``sqrt(inflation)`` and by the t quantile of
  the effective sample over that of n.  ITL's ρ̂ is that of each request's mean gap, a
  throughput's that of the requests' E2E.  Why 'percentile' and not 'BCa': BCa's
  acceleration comes from a jackknife, unreliable for non-smooth statistics.

The interval measures the sampling noise among the requests of one run; run-to-run
variance needs repeats.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

REQUEST_COLUMNS = ("request_idx", "success", "input_len", "output_len", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms",
                   "start_s")
RequestSamples = Mapping[int, pd.DataFrame]
# A point's bootstrap intervals already computed, by :func:`bootstrap_key`: statistic →
# [estimate, low, high, n, rho, n_eff] (JSON's shapes: db/bootstrap_memo.py keeps them beside the samples).
BootstrapMemo = MutableMapping[str, dict[str, list[float]]]

QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
# Per-request latency columns; ITL is a list per request and handled apart.
LATENCY_COLUMNS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
LATENCIES = (*LATENCY_COLUMNS, "itl")
# Throughput statistics: the token columns each counts per request (qps counts requests).
THROUGHPUT_TOKENS: dict[str, tuple[str, ...]] = {
    "output_tok_s": ("output_len",), "total_tok_s": ("input_len", "output_len"), "qps": (),
}
LATENCY_STATISTICS = tuple(f"{name}_{stat}" for name in LATENCIES for stat in (*QUANTILES, "mean"))
STATISTICS = (*LATENCY_STATISTICS, *THROUGHPUT_TOKENS)

CONFIDENCE = 0.95
# 1,000 resamples put each 2.5 % tail of the bootstrap distribution on 25 resamples: the
# interval's ends move by a few % of its width between seeds, small beside the width itself.
# Cost: about 20 ms fixed plus 60 ms per 1,000 resamples for every statistic of a point of
# 1,000 requests × 128 tokens, CPU time on the shared 2-core development machine (where a
# cumulative sum over 10^6 int32 takes 6 ms); tests/test_noise.py::
# test_a_point_of_1000_requests_bootstraps_quickly prints the figure wherever it runs.
N_RESAMPLES = 1000
# A fixed seed: the same requests give the same interval on every page load and export.
BOOTSTRAP_SEED = 20260626
# Above this many request×resample cells the resamples are drawn in batches (memory).
_CELLS_PER_BATCH = 2_000_000
# ITL gaps are bucketed by rank for the bootstrap: each resample's pooled gap counts are
# summed per bucket, and the quantile is interpolated within its bucket.
_ITL_BUCKETS = 256


@dataclass(frozen=True)
class Interval:
    """A statistic of one point and its bootstrap interval; ``n`` the requests behind it."""

    estimate: float
    low: float
    high: float
    n: int
    # The series' lag-1 autocorrelation (bias-corrected, in [0, 0.99]; NaN: too few requests)
    # and the effective sample the interval was built for (see the module's docstring).
    rho: float = math.nan
    n_eff: float = math.nan

    @property
    def half_width(self) -> float:
        """Half the interval's width: the ± a delta is held against (intervals of skewed
        statistics are not symmetric; half the width is their average reach)."""
        return (self.high - self.low) / 2.0


# -- plain statistics -----------------------------------------------------------------------------


def successful(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that completed; the client computes every latency over these only."""
    completed = _completed(requests)
    return requests if completed is None else requests[completed]


def _completed(requests: pd.DataFrame) -> pd.Series | None:
    """Which requests completed (None: every one, the samples having no ``success``)."""
    return requests["success"].fillna(False).astype(bool) if "success" in requests.columns else None


def pooled(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The requests of several repeats of one point as one sample."""
    return pd.concat(list(frames), ignore_index=True) if frames else pd.DataFrame(columns=list(REQUEST_COLUMNS))


def itl_values(requests: pd.DataFrame) -> np.ndarray:
    """Every inter-token gap (ms) of the given requests, pooled (pass :func:`successful` ones)."""
    lists = [np.asarray(v, dtype=float) for v in requests["itl_ms"] if _is_list(v)]
    values = np.concatenate(lists) if lists else np.empty(0)
    return values[np.isfinite(values)]


def latency_values(requests: pd.DataFrame, name: str) -> np.ndarray:
    """The finite values of one latency ('ttft', 'tpot', 'e2e' or 'itl') over the given
    requests (pass :func:`successful` ones)."""
    if name == "itl":
        return itl_values(requests)
    values = pd.to_numeric(requests[LATENCY_COLUMNS[name]], errors="coerce").to_numpy(dtype=float)
    return values[np.isfinite(values)]


def request_statistics(requests: pd.DataFrame) -> dict[str, float]:
    """Every statistic of :data:`LATENCY_STATISTICS` (``ttft_p50`` … ``itl_mean``, in ms) over
    the given requests, NaN where there is no value; ``n`` the successful requests."""
    done = successful(requests)
    out: dict[str, float] = {"n": float(len(done))}
    for name in LATENCIES:
        values = latency_values(done, name)
        for stat, q in QUANTILES.items():
            out[f"{name}_{stat}"] = float(np.percentile(values, q)) if values.size else math.nan
        out[f"{name}_mean"] = float(np.mean(values)) if values.size else math.nan
    return out


def request_count(requests: pd.DataFrame) -> int:
    """How many requests completed (:func:`successful`'s rows), counted without copying them."""
    completed = _completed(requests)
    return len(requests) if completed is None else int(completed.sum())


def span_s(requests: pd.DataFrame) -> float:
    """First start to last end (s) of the successful requests; NaN when a start is unknown."""
    done = successful(requests)
    start = pd.to_numeric(done["start_s"], errors="coerce").to_numpy(dtype=float)
    end = start + pd.to_numeric(done["e2e_ms"], errors="coerce").to_numpy(dtype=float) / 1000.0
    if not start.size or not np.isfinite(end).all():
        return math.nan
    return float(end.max() - start.min())


def min_requests_for(quantile_pct: float) -> int:
    """Requests a bootstrap needs before it says anything about a quantile: at least one
    request beyond it (100 for a p99).  With fewer, every resample's p99 is one of the top
    sample values, so the interval cannot reach past the sample's own maximum."""
    return math.ceil(100.0 / (100.0 - quantile_pct) - 1e-9)


# -- bootstrap ------------------------------------------------------------------------------------


# Raised whenever the bootstrap would give another interval for the same requests (its
# resampling, its statistics' rules): intervals kept under an older version are not read.
BOOTSTRAP_VERSION = 3


def bootstrap_key(duration_s: float | None, names: Sequence[str], n_resamples: int = N_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> str:
    """What a point's intervals depend on besides its requests: the method's version, the
    versions of numpy and scipy that resample, the confidence, the resamples and their seed,
    the duration and the statistics asked for."""
    duration = None if duration_s is None else repr(float(duration_s))
    return json.dumps([BOOTSTRAP_VERSION, *_resampler_versions(), CONFIDENCE, n_resamples, seed, duration,
                       list(names)])


@functools.cache
def _resampler_versions() -> tuple[str, str]:
    # Read from the installed distributions: importing scipy.stats here would cost 1 s.
    return importlib.metadata.version("numpy"), importlib.metadata.version("scipy")


def bootstrap_intervals(requests: pd.DataFrame, duration_s: float | None = None, *,
                        names: Sequence[str] = STATISTICS, n_resamples: int = N_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED, memo: BootstrapMemo | None = None) -> dict[str, Interval]:
    """95 % percentile-bootstrap intervals of the named statistics over the successful
    requests of one point, all from the same resamples (one ``scipy.stats.bootstrap`` call).

    Latency statistics (``ttft_p50`` …) are in ms.  Throughput statistics (``output_tok_s``,
    ``total_tok_s``, ``qps``) need the point's measured duration (``duration_s``, else the
    span of the requests from ``start_s`` and ``e2e_ms``); without one they are left out.
    A throughput is resampled through Little's law: the client holds the achieved
    concurrency L = Σe2e / duration, and the rate at that concurrency is L · Σtokens / Σe2e,
    so a resample's throughput is L · Σtokens* / Σe2e* (equal to the recorded
    tokens / duration on the original requests).  The spread then comes from how long the
    requests took, not only from how many tokens they carried: with fixed lengths
    (``--ignore-eos``, range ratio 1) a token count alone would never vary.

    A statistic without values, or a quantile from fewer requests than
    :func:`min_requests_for` asks, is left out; fewer than two requests give nothing.

    ``memo``: the point's intervals computed before (under :func:`bootstrap_key`), read
    instead of resampling, and given the ones computed now.  The requests of a point never
    change once written, and the seed is fixed, so a kept interval is the one this call
    would compute (tests/test_bootstrap_memo.py)."""
    kept = kept_intervals(memo, duration_s, names, n_resamples, seed)
    if kept is not None:
        return kept
    intervals = _bootstrap_intervals(requests, duration_s, names=names, n_resamples=n_resamples, seed=seed)
    if memo is not None:
        memo[bootstrap_key(duration_s, names, n_resamples, seed)] = {
            name: [i.estimate, i.low, i.high, i.n, i.rho, i.n_eff] for name, i in intervals.items()}
    return intervals


def kept_intervals(memo: BootstrapMemo | None, duration_s: float | None, names: Sequence[str],
                   n_resamples: int = N_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Interval] | None:
    """The intervals :func:`bootstrap_intervals` would return with these arguments, as
    ``memo`` keeps them, or None when it keeps none for them.  Each interval's ``n`` is the
    point's successful requests (:func:`request_count`), the same for every statistic."""
    entry = None if memo is None else memo.get(bootstrap_key(duration_s, names, n_resamples, seed))
    if entry is None:
        return None
    return {name: Interval(float(v[0]), float(v[1]), float(v[2]), int(v[3]), *(float(x) for x in v[4:6]))
            for name, v in entry.items()}


def _bootstrap_intervals(requests: pd.DataFrame, duration_s: float | None, *, names: Sequence[str],
                         n_resamples: int, seed: int) -> dict[str, Interval]:
    sample = _Sample(in_completion_order(successful(requests)), duration_s)
    wanted = [name for name in names if sample.computable(name)]
    if sample.n < 2 or not wanted:
        return {}
    out = {name: sample.quantile_interval(name) for name in wanted if sample.order_statistic(name)}
    resampled = [name for name in wanted if name not in out]
    for name, interval in _iid_bootstrap(sample, resampled, n_resamples, seed).items():
        out[name] = sample.widened(name, interval.estimate, interval.low, interval.high)
    return {name: out[name] for name in wanted}


def iid_bootstrap(requests: pd.DataFrame, duration_s: float | None = None, *, names: Sequence[str] = STATISTICS,
                  n_resamples: int = N_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Interval]:
    """The percentile bootstrap over requests as if each were independent (no correction for
    correlation): what :func:`bootstrap_intervals` widens, and the yardstick it is held
    against (bench/interval_coverage.py)."""
    sample = _Sample(successful(requests), duration_s)
    wanted = [name for name in names if sample.computable(name)]
    return _iid_bootstrap(sample, wanted, n_resamples, seed) if sample.n >= 2 else {}


def _iid_bootstrap(sample: _Sample, names: Sequence[str], n_resamples: int, seed: int) -> dict[str, Interval]:
    """One ``scipy.stats.bootstrap`` call for every named statistic, from the same resamples."""
    if not names:
        return {}

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        return sample.evaluate(names, _counts(np.atleast_2d(np.asarray(idx, dtype=np.intp)), sample.n))

    # Imported here, not at the top: scipy.stats costs ~0.9 s to import, and the runner
    # daemon and the CLI load this module for its sample handling, never for a bootstrap.
    from scipy import stats

    result = stats.bootstrap((np.arange(sample.n),), statistic, n_resamples=n_resamples, confidence_level=CONFIDENCE,
                             method="percentile", vectorized=True, batch=max(1, _CELLS_PER_BATCH // sample.n),
                             rng=np.random.default_rng(seed))
    estimates = sample.estimates(names)
    low, high = np.atleast_1d(result.confidence_interval.low), np.atleast_1d(result.confidence_interval.high)
    return {name: Interval(estimates[i], float(low[i]), float(high[i]), sample.n) for i, name in enumerate(names)}


def in_completion_order(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests in the order they completed (``start_s + e2e_ms``), the series whose
    correlation the intervals respect; as given when a completion time is unknown."""
    if "start_s" not in requests.columns or "e2e_ms" not in requests.columns:
        return requests
    start = pd.to_numeric(requests["start_s"], errors="coerce").to_numpy(dtype=float)
    end = start + pd.to_numeric(requests["e2e_ms"], errors="coerce").to_numpy(dtype=float) / 1000.0
    if not np.isfinite(end).all():
        return requests
    return requests.iloc[np.argsort(end, kind="stable")]


def lag1_autocorrelation(series: np.ndarray) -> float:
    """The lag-1 autocorrelation of a series (finite values, in order), measured on the
    normal scores of its ranks, bias-corrected and kept in [0, 0.99]; NaN under 3 values."""
    values = series[np.isfinite(series)]
    n = values.size
    if n < 3:
        return math.nan
    from scipy import special, stats

    scores = special.ndtri((stats.rankdata(values) - 0.5) / n)
    scores = scores - scores.mean()
    denominator = float(scores @ scores)
    raw = float(scores[1:] @ scores[:-1]) / denominator if denominator > 0 else 0.0
    corrected = (n * raw + 1.0) / (n - 4.0) if n > 4 else raw + (1.0 + 4.0 * raw) / n
    return min(_MAX_RHO, max(0.0, corrected))


# Above this the inflation grows without bound; a series this correlated says little anyway.
_MAX_RHO = 0.99
# Gauss–Legendre nodes for the indicator correlation's integral (smooth on [0, ρ]).
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)


def variance_inflation(rho: float, n: int, quantile_pct: float | None = None) -> float:
    """How much a correlated series' variance of a mean (``quantile_pct`` None) or of a
    quantile exceeds an independent one's (see the module's docstring); 1 without ρ."""
    if math.isnan(rho) or rho <= 0.0 or n < 2:
        return 1.0
    lags = np.arange(1, n, dtype=float)
    correlations = rho ** lags
    kept = correlations > 1e-6
    lags, correlations = lags[kept], correlations[kept]
    if quantile_pct is not None:
        correlations = _indicator_correlation(quantile_pct / 100.0, correlations)
    return max(1.0, 1.0 + 2.0 * float(np.sum((1.0 - lags / n) * correlations)))


def _indicator_correlation(q: float, r: np.ndarray) -> np.ndarray:
    """corr(1{X ≤ x_q}, 1{Y ≤ y_q}) for a Gaussian copula of correlation r, by Plackett's
    identity: Φ₂(z, z; r) − q² = ∫₀^r exp(−z² / (1 + s)) / (2π sqrt(1 − s²)) ds."""
    from scipy import special

    z = float(special.ndtri(q))
    s = (_NODES[None, :] + 1.0) / 2.0 * r[:, None]
    density = np.exp(-z * z / (1.0 + s)) / (2.0 * np.pi * np.sqrt(1.0 - s * s))
    return (density @ _WEIGHTS) * r / 2.0 / (q * (1.0 - q))


def _t975(df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2.0, max(df, 1.0)))


def _index_type(counts: np.ndarray) -> type[np.signedinteger[Any]]:
    """int32 while every row laid end to end (see :func:`_ranks`) stays below 2**31."""
    rows, n = counts.shape
    return np.int32 if rows * (n + 1) < 2**31 else np.int64


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """How often each request appears in each resample: (resamples × requests)."""
    rows = idx.shape[0]
    flat = (idx + (np.arange(rows) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(np.int32)


class _Sample:
    """The successful requests of one point, arranged so every statistic of a resample can
    be computed from its request counts (resamples × requests) with array operations."""

    def __init__(self, done: pd.DataFrame, duration_s: float | None) -> None:
        self.n = len(done)
        self.columns = {name: pd.to_numeric(done[column], errors="coerce").to_numpy(dtype=float)
                        for name, column in LATENCY_COLUMNS.items()}
        self.ordered = {name: _Ordered(values) for name, values in self.columns.items()}
        self.itl = _Gaps(done["itl_ms"].tolist() if "itl_ms" in done.columns else [])
        duration = duration_s if duration_s is not None and not _bad(duration_s) and duration_s > 0 else span_s(done)
        # Little's law's concurrency, held fixed across resamples (see bootstrap_intervals).
        e2e_total = float(np.nansum(self.columns["e2e"]))
        self.concurrency = e2e_total / duration if not _bad(duration) and duration > 0 else math.nan
        self.tokens = {name: _token_counts(done, columns) for name, columns in THROUGHPUT_TOKENS.items()}

    def series(self, name: str) -> np.ndarray:
        """The per-request series (completion order) whose correlation a statistic inherits."""
        latency = "e2e" if name in THROUGHPUT_TOKENS else name.rpartition("_")[0]
        if latency == "itl":
            with np.errstate(invalid="ignore", divide="ignore"):
                return self.itl.sums / self.itl.lengths
        return self.columns[latency]

    def rho(self, name: str) -> float:
        return lag1_autocorrelation(self.series(name))

    def order_statistic(self, name: str) -> bool:
        """A quantile of a per-request latency: its interval is read off the order statistics."""
        latency, _, stat = name.rpartition("_")
        return name not in THROUGHPUT_TOKENS and stat in QUANTILES and latency in self.ordered

    def quantile_interval(self, name: str) -> Interval:
        """The order-statistic interval of a quantile with the effective sample."""
        latency, _, stat = name.rpartition("_")
        values, q = self.ordered[latency].values, QUANTILES[stat] / 100.0
        rho = self.rho(name)
        n_eff = values.size / variance_inflation(rho, values.size, QUANTILES[stat])
        reach = _t975(n_eff - 1.0) * math.sqrt(q * (1.0 - q) / n_eff)
        low, estimate, high = np.quantile(values, [max(0.0, q - reach), q, min(1.0, q + reach)])
        return Interval(float(estimate), float(low), float(high), self.n, rho, n_eff)

    def widened(self, name: str, estimate: float, low: float, high: float) -> Interval:
        """A bootstrap interval widened for the correlation of the statistic's series."""
        rho = self.rho(name)
        stat = name.rpartition("_")[2]
        quantile = QUANTILES[stat] if name not in THROUGHPUT_TOKENS and stat in QUANTILES else None
        inflation = variance_inflation(rho, self.n, quantile)
        n_eff = self.n / inflation
        factor = math.sqrt(inflation) * _t975(n_eff - 1.0) / _t975(self.n - 1.0)
        return Interval(estimate, estimate - (estimate - low) * factor, estimate + (high - estimate) * factor,
                        self.n, rho, n_eff)

    def computable(self, name: str) -> bool:
        if name in THROUGHPUT_TOKENS:
            finite = np.isfinite(self.columns["e2e"]).all() and np.isfinite(self.tokens[name]).all()
            return not _bad(self.concurrency) and bool(finite)
        latency, stat = name.rsplit("_", 1)
        count = self.itl.requests_with_gaps if latency == "itl" else self.ordered[latency].values.size
        return count >= (min_requests_for(QUANTILES[stat]) if stat in QUANTILES else 2)

    def estimates(self, names: Sequence[str]) -> list[float]:
        return [float(v) for v in self.evaluate(names, np.ones((1, self.n), dtype=np.int32))[:, 0]]

    def evaluate(self, names: Sequence[str], counts: np.ndarray) -> np.ndarray:
        """Each statistic for each resample: (statistics × resamples).  Each latency's
        quantiles come from one pass over its cumulative counts."""
        weights = counts.astype(float)
        wanted: dict[str, list[float]] = {}
        for name in names:
            latency, _, stat = name.rpartition("_")
            if stat in QUANTILES and name not in THROUGHPUT_TOKENS:
                wanted.setdefault(latency, []).append(QUANTILES[stat])
        quantiles = {latency: dict(zip(qs, self._source(latency).quantiles(counts, qs), strict=True))
                     for latency, qs in wanted.items()}
        rows = []
        for name in names:
            if name in THROUGHPUT_TOKENS:
                rows.append(self.concurrency * (weights @ self.tokens[name]) / (weights @ self.columns["e2e"]))
                continue
            latency, _, stat = name.rpartition("_")
            rows.append(self._source(latency).mean(weights) if stat == "mean" else quantiles[latency][QUANTILES[stat]])
        return np.stack(rows)

    def _source(self, latency: str) -> _Ordered | _Gaps:
        return self.itl if latency == "itl" else self.ordered[latency]


# The resampling view of a point's requests, for resamplings built elsewhere
# (domain/results/repeat_bootstrap.py: repeats, then requests within each).
ResampledPoint = _Sample


class _Ordered:
    """One per-request latency, sorted: a resample's numpy-linear percentile is read from the
    cumulative counts of the sorted values, without materialising the resample."""

    def __init__(self, values: np.ndarray) -> None:
        finite = np.isfinite(values)
        self.present = finite.astype(float)
        self.filled = np.where(finite, values, 0.0)
        self.index = np.flatnonzero(finite)[np.argsort(values[finite], kind="stable")]  # ascending by value
        self.values = values[self.index]

    def mean(self, weights: np.ndarray) -> np.ndarray:
        return (weights @ self.filled) / (weights @ self.present)

    def quantiles(self, counts: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
        cumulative = np.cumsum(counts[:, self.index], axis=1, dtype=_index_type(counts))
        return [self.values[lower] + fraction * (self.values[upper] - self.values[lower])
                for lower, upper, fraction in _ranks(cumulative, qs)]


def _ranks(cumulative: np.ndarray, qs: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each quantile (numpy's linear rule on each row's repeated sample): the columns
    holding the order statistics below and above it and the fraction between them.  The
    column holding 0-based rank k is the first whose cumulative count exceeds k; rows are
    laid end to end, each shifted above the previous one's total, so one binary search
    answers every row and rank."""
    rows, columns = cumulative.shape
    totals: np.ndarray = cumulative[:, -1].astype(np.int64)
    stride = int(totals.max()) + 1
    dtype = np.int32 if rows * stride < 2**31 else np.int64  # int32: half the memory traffic
    shift: np.ndarray = np.arange(rows, dtype=np.int64) * stride
    laid: np.ndarray = cumulative.astype(dtype, copy=False)
    offsets: np.ndarray = shift.astype(dtype)[:, None]
    flat = (laid + offsets).ravel()
    out = []
    for q in qs:
        position = q / 100.0 * (totals - 1.0)
        below: np.ndarray = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, totals - 1)
        targets: np.ndarray = np.concatenate([below + shift, above + shift]).astype(dtype)
        found = np.searchsorted(flat, targets, side="right") - np.tile(np.arange(rows) * columns, 2)
        out.append((found[:rows], found[rows:], position - below))
    return out


class _Gaps:
    """The inter-token gaps of each request, bucketed by rank of the pooled gaps: a
    resample's pooled gaps are (request counts) @ (gaps per request per bucket); a quantile
    falls in one bucket and is read off the original gaps of that bucket at the same
    relative position (exact when buckets hold single values, close otherwise)."""

    def __init__(self, itl_lists: list[Any]) -> None:
        arrays = [np.asarray(v, dtype=float) if _is_list(v) else np.empty(0) for v in itl_lists]
        requests = len(arrays)
        owner = np.repeat(np.arange(requests), [a.size for a in arrays])
        gaps = np.concatenate(arrays) if arrays else np.empty(0)
        finite = np.isfinite(gaps)
        gaps, owner = gaps[finite], owner[finite]
        self.lengths = np.bincount(owner, minlength=requests).astype(float)
        self.sums = np.bincount(owner, weights=gaps, minlength=requests)
        self.requests_with_gaps = int((self.lengths > 0).sum())
        order = np.argsort(gaps)
        self.sorted, owner = gaps[order], owner[order]
        buckets = min(_ITL_BUCKETS, max(1, self.sorted.size))
        bucket = (np.arange(self.sorted.size) * buckets) // max(1, self.sorted.size)
        cells = np.bincount(owner * buckets + bucket, minlength=requests * buckets)
        # float32 counts are exact up to 2**24 gaps per resample and halve the matrix product's cost.
        exact32 = self.sorted.size < 2**24
        self.per_bucket = cells.reshape(requests, buckets).astype(np.float32 if exact32 else float)
        self.starts = np.searchsorted(bucket, np.arange(buckets))
        self.sizes = np.bincount(bucket, minlength=buckets)

    def mean(self, weights: np.ndarray) -> np.ndarray:
        return (weights @ self.sums) / (weights @ self.lengths)

    def quantiles(self, counts: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
        pooled = counts.astype(self.per_bucket.dtype) @ self.per_bucket  # resamples × buckets
        cumulative = np.cumsum(np.rint(pooled).astype(np.int64), axis=1)  # gaps: may pass 2**31 in all
        out = []
        for (lower, upper, fraction), q in zip(_ranks(cumulative, qs), qs, strict=True):
            position = q / 100.0 * (cumulative[:, -1] - 1.0)
            below = np.floor(position)
            low = self._value_at(cumulative, lower, below)
            high = self._value_at(cumulative, upper, np.minimum(below + 1.0, cumulative[:, -1] - 1.0))
            out.append(low + fraction * (high - low))
        return out

    def _value_at(self, cumulative: np.ndarray, bucket: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """The gap of 0-based rank ``rank`` in a resample, inside its ``bucket``."""
        rows = np.arange(cumulative.shape[0])
        before = np.where(bucket > 0, cumulative[rows, np.maximum(bucket - 1, 0)], 0.0)
        fraction = (rank - before + 0.5) / (cumulative[rows, bucket] - before)  # where it sits in its bucket
        position = self.starts[bucket] + np.clip(fraction * self.sizes[bucket] - 0.5, 0.0, self.sizes[bucket] - 1.0)
        return np.interp(position, np.arange(self.sorted.size), self.sorted)


def _token_counts(done: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    if not columns:
        return np.ones(len(done))
    return sum((pd.to_numeric(done[c], errors="coerce").to_numpy(dtype=float) for c in columns),
               start=np.zeros(len(done)))


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def _bad(value: float | None) -> bool:
    return value is None or math.isnan(value)
