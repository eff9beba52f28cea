"""Analysis of the points frame: metrics per point, deltas against a baseline held against a
noise estimate from the data, saturation, scaling efficiency and the Pareto frontier
(validity badges are in :mod:`domain.results.validity`).

Everything is a pure function of the points frame (one row per measured point and repeat;
see :mod:`domain.compare.comparability` for the identity columns) and, where the runner
kept them, the per-request samples of each point (:mod:`domain.results.requests`, keyed by
the frame's ``point_id``).  A single repeat is passed through unchanged, so tables and
exports carry the stored numbers exactly.

Design choices (each named constant below says why):

* **Percentiles over repeats.** When every repeat of a point has per-request samples, a
  latency percentile of the point is computed over the requests of all repeats pooled
  (basis 'pooled'): a p99 of 3 × 100 requests is the p99 of those 300, not the mean of three
  p99s.  Otherwise it is the mean over repeats (basis 'mean_of_repeats', approximate: a mean
  of percentiles is not a percentile).  Throughput over repeats is always their mean.
* **Noise.** A delta is a difference only when it exceeds a noise estimate computed from
  the data, never a fixed band.  Each side of a comparison brings a 95 % half-width:
  with ≥ 2 repeats, an interval across repeats ('repeats'): for a pooled latency statistic
  (every repeat has its requests) the two-level bootstrap of
  :mod:`domain.results.repeat_bootstrap` (repeats, then requests within each, so
  launch-to-launch variance is in it), otherwise the t interval of the mean across
  repeats (from a small t table); with one repeat and per-request samples, a bootstrap
  interval over the point's requests ('bootstrap', :func:`domain.results.requests.bootstrap_intervals`).  The delta
  is inside the noise when within ``sqrt(h_run² + h_base²)`` (a Welch-style combination).
  Without an estimate on both sides the verdict is 'uncertain': the delta is shown with
  :data:`UNCERTAIN_MARK` and never coloured better or worse.  A bootstrap cannot estimate
  a quantile from fewer requests than :func:`domain.results.requests.min_requests_for`
  (100 for a p99), so such a p99 is 'uncertain' too, and the point says ``low_n_p99``.
* **Interactivity** (the Pareto x axis) is ``1000 / TPOT median`` in tok/s/user: the
  decode speed a user sees while tokens stream, the definition the field's Pareto charts
  use.  ``output_throughput / achieved_concurrency`` would fold queueing and prefill into
  it and depends on a client-reported concurrency older records lack.
"""

from __future__ import annotations

import functools
import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.core.numbers import real_number
from domain.results import difference, repeat_bootstrap
from domain.results import requests as req
from domain.results.requests import RequestSamples

Direction = Literal["higher", "lower"] | None
Basis = Literal["pooled", "mean_of_repeats", "single"]

POINT = ("scenario", "concurrency")

# Former fixed noise bands.  No verdict uses them any more (a fixed band is not a noise
# estimate: issue #15); kept only because other modules still import the names.
DEFAULT_NOISE_BAND_PCT = 3.0
TAIL_NOISE_BAND_PCT = 10.0

# Shown right after a delta that has no noise estimate ("+67.0%?"): not judged.
UNCERTAIN_MARK = "?"
# A p99 from fewer requests is close to the largest of them (low_n_p99).
LOW_N_P99_REQUESTS = req.min_requests_for(99.0)

# Two-sided 95 % Student-t quantiles t(0.975, df).  Beyond 30 the table steps to the
# normal value; the largest listed df not above the actual one is used (slightly wide: safe).
_T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}
_Z_975 = 1.960


@dataclass(frozen=True)
class Metric:
    name: str  # also the i18n key compare.metric.<name>; for request metrics, a requests.STATISTICS name
    column: str  # the points frame's column
    direction: Direction  # which way is better; None: neither (shown, never coloured)
    tail: bool = False  # a p99
    # A server fact, not a measurement with sampling noise (the KV pool's size follows from
    # the flags and the GPU's memory): any change is a real change.
    exact: bool = False

    @property
    def from_requests(self) -> bool:
        """Computable from per-request samples (latency statistics and throughput)."""
        return self.name in req.STATISTICS

    @property
    def latency(self) -> bool:
        return self.name in req.LATENCY_STATISTICS

    @property
    def quantile_pct(self) -> float | None:
        return req.QUANTILES.get(self.name.rpartition("_")[2]) if self.latency else None


METRICS: tuple[Metric, ...] = (
    Metric("output_tok_s", "output_throughput", "higher"),
    Metric("total_tok_s", "total_throughput", "higher"),
    Metric("qps", "request_throughput", "higher"),
    *(Metric(f"{name}_{stat}", f"{name}_{column}_ms", "lower", tail=stat == "p99")
      for name in ("ttft", "tpot", "itl", "e2e")
      for stat, column in (("p50", "median"), ("p90", "p90"), ("p99", "p99"))),
    # Utilisation and KV usage are neither good nor bad on their own (the seed's DP-attention
    # lesson: KV saved, throughput lost) — shown side by side, not coloured.
    Metric("gpu_util_mean", "gpu_util_mean", None),
    Metric("gpu_mem_peak_gb", "gpu_mem_peak_gb", None),
    Metric("kv_usage_peak", "kv_usage_peak", None),
    # More KV capacity means more requests fit before queueing: higher is better.
    Metric("kv_capacity", "max_total_num_tokens", "higher", exact=True),
    # Energy from the run's GPUs' sampled power over the window (domain/results/energy.py).
    Metric("j_per_token", "j_per_output_token", "lower"),
    Metric("j_per_request", "j_per_request", "lower"),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}
# The statistics a comparison asks a point's requests for (its intervals' memo key): what
# the runner computes when it writes a point (db/bootstrap_memo.keep_intervals).
REQUEST_METRIC_NAMES = tuple(m.name for m in METRICS if m.from_requests)


def metric_label(name: str, lang: str) -> str:
    return t(f"compare.metric.{name}", lang)


def t_quantile_975(df: int) -> float:
    """t(0.975, df) from :data:`_T_975`; the normal quantile past the table."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two repeats")
    listed = [d for d in _T_975 if d <= df]
    return _T_975[max(listed)] if df <= 120 else _Z_975


def mean_ci(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and 95 % t half-width; the half-width is None for fewer than two values."""
    clean = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not clean:
        return math.nan, None
    mean = clean[0] if len(clean) == 1 else float(np.mean(clean))  # one value passes through exactly
    if len(clean) < 2:
        return mean, None
    std = float(np.std(clean, ddof=1))
    return mean, t_quantile_975(len(clean) - 1) * std / math.sqrt(len(clean))


def noise_rule_text(lang: str, threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT) -> str:
    """The rule behind every "≈" and "?" of a comparison, in words (caveats, page notes)."""
    return " ".join((t("stats.noise_rule", lang, resamples=req.N_RESAMPLES, mark=UNCERTAIN_MARK,
                       low_n=LOW_N_P99_REQUESTS), practical_rule_text(lang, threshold_pct)))


def practical_rule_text(lang: str, threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT) -> str:
    """The practical threshold in words, with its value and its setting (the legends)."""
    return t("stats.practical_rule", lang, pct=f"{threshold_pct:g}", mark=UNCERTAIN_MARK,
             small=t("stats.delta_small", lang, delta="+0.6%"))


def basis_text(basis: str, lang: str) -> str:
    """How a value was computed (a ``<name>_basis`` of :func:`summarise_points`), in words."""
    return t(f"stats.basis.{basis}", lang)


def noise_source_text(source: object, lang: str) -> str:
    """How a delta's noise was estimated (``noise_source`` of :func:`compare_table`), in words."""
    key = "none" if source is None or is_missing(source) else str(source).replace("+", "_")
    return t(f"stats.noise_source.{key}", lang)


def low_n_text(lang: str) -> str:
    """What ``low_n_p99`` means, in words."""
    return t("stats.low_n_p99", lang, n=LOW_N_P99_REQUESTS)


# -- per-point summary ---------------------------------------------------------------------------

SUMMARY_SUFFIXES = ("", "_ci", "_ci_source", "_basis", "_n", "_rho", "_n_eff")


def summarise_points(frame: pd.DataFrame, metrics: Sequence[Metric] = METRICS,
                     requests: RequestSamples | None = None,
                     bootstrap_memos: MutableMapping[int, req.BootstrapMemo] | None = None) -> pd.DataFrame:
    """One row per (run, scenario, concurrency): run_id, scenario, concurrency, run_name,
    source, gpu_count (and gpus_used where the frame has it), repeats, ``low_n_p99`` (a p99
    of the point rests on fewer than :data:`LOW_N_P99_REQUESTS` requests: it is close to
    their maximum), and per metric:

    * ``<name>``: pooled over the requests of all repeats ('pooled'), the mean over repeats
      ('mean_of_repeats') or the one repeat's stored value ('single'), as ``<name>_basis`` says;
    * ``<name>_ci``: the 95 % half-width (NaN without an estimate) and ``<name>_ci_source``
      ('repeats', 'bootstrap', 'exact' or None);
    * ``<name>_n``: the requests behind the statistic, over all repeats (NaN when unknown or
      not a request metric).
    * ``<name>_rho`` / ``<name>_n_eff``: the lag-1 autocorrelation of the requests and the
      effective sample the per-request interval was built for (``requests.Interval``; NaN
      where the noise is not from the point's requests).

    ``requests`` (per-request samples by ``point_id``) is used for a point only when the
    frame has ``point_id`` and every repeat of the point has samples.  ``bootstrap_memos``
    (by ``point_id``): intervals computed before, read instead of resampling, and given the
    ones computed now (``requests.bootstrap_intervals``' ``memo``)."""
    keys = ["run_id", *POINT]
    described = ["run_name", "source", "gpu_count", *(["gpus_used"] if "gpus_used" in frame.columns else [])]
    summary = _with_sampled_points(_summary_of_records(frame, metrics, keys, described),
                                   _sampled_points(frame, metrics, keys, requests, bootstrap_memos))
    per_metric = [f"{m.name}{suffix}" for m in metrics for suffix in SUMMARY_SUFFIXES]
    return summary[[*described, "repeats", "low_n_p99", *per_metric]].reset_index()


def _sampled_points(frame: pd.DataFrame, metrics: Sequence[Metric], keys: list[str], requests: RequestSamples | None,
                    memos: MutableMapping[int, req.BootstrapMemo] | None) -> dict[int, dict[str, Any]]:
    """The summary columns of every point whose repeats all have samples, by the point's
    position in the summary (the groups of ``keys`` in sorted order, as the summary's rows)."""
    if not requests or "point_id" not in frame.columns or not frame["point_id"].isin(list(requests)).any():
        return {}
    # The columns a sampled point reads, not the whole frame: each group copies them, and
    # the frame's eighty-odd columns made grouping most of a nine-run summary's time.
    read = dict.fromkeys([*keys, "point_id", "duration_s", *(m.column for m in metrics)])
    narrow = frame[[c for c in read if c in frame.columns]]
    found = {}
    for position, (_key, rows) in enumerate(narrow.groupby(keys, sort=True, dropna=False)):
        point = _sampled_point(rows, requests, metrics, memos)
        if point is not None:
            found[position] = point.columns()
    return found


def _with_sampled_points(summary: pd.DataFrame, sampled: dict[int, dict[str, Any]]) -> pd.DataFrame:
    """The summary with the sampled points' columns in their rows, each column keeping its
    dtype.  Set column by column, once: a row at a time (``.loc[point, columns]``) copied
    the summary's index for every cell, seconds for nine runs with samples."""
    if not sampled:
        return summary
    rows = list(sampled)
    names = list(dict.fromkeys(name for columns in sampled.values() for name in columns))
    replaced = {}
    for name in names:
        values = summary[name].to_numpy(dtype=object, copy=True)
        values[rows] = [columns.get(name, values[row]) for row, columns in sampled.items()]
        replaced[name] = pd.Series(values, index=summary.index, dtype=object).astype(summary[name].dtype)
    return pd.concat([summary.drop(columns=names), pd.DataFrame(replaced, index=summary.index)], axis=1)


def _summary_of_records(frame: pd.DataFrame, metrics: Sequence[Metric], keys: list[str],
                        described: list[str]) -> pd.DataFrame:
    """The summary from the stored statistics alone (no per-request samples), indexed by
    ``keys``: means over repeats with their t half-widths, vectorised over all points."""
    names = [m.name for m in metrics]
    numbers = frame[keys].copy()
    for metric in metrics:  # None (unknown) becomes NaN, so means skip it
        numbers[metric.name] = _numeric(frame, metric.column)
    numbers["completed"] = _numeric(frame, "completed")
    grouped = numbers.groupby(keys, sort=True, dropna=False)
    # A group of one: pandas' mean sums one value and divides by 1, so the stored number comes back exactly.
    means, counts, stds = grouped[names].mean(), grouped[names].count(), grouped[names].std(ddof=1)
    quantiles = counts.map(lambda n: t_quantile_975(n - 1) if n >= 2 else math.nan)
    halves = quantiles * stds / np.sqrt(counts)
    summary = frame.groupby(keys, sort=True, dropna=False)[described].first(skipna=False)
    summary["repeats"] = grouped.size()
    completed = grouped["completed"]
    # Requests behind a statistic: every repeat's count must be known; a mean of per-repeat
    # p99s rests on no more requests than its smallest repeat.
    n = completed.sum(min_count=1).where(completed.count() == summary["repeats"])
    has_p99 = any(m.quantile_pct == 99.0 for m in metrics)
    summary["low_n_p99"] = (completed.min() < LOW_N_P99_REQUESTS).fillna(False).astype(bool) & has_p99
    # Every column below in the summary's row order, as an array or a Series on the
    # summary's own index: a frame built from a hundred Series on other (equal) indexes
    # reindexes each against the (run, scenario, concurrency) index, which was most of this
    # function's time; the three frames are aligned once here instead.
    means, halves, n = (f.reindex(summary.index) for f in (means, halves, n))
    basis = pd.Series(np.where(summary["repeats"] == 1, "single", "mean_of_repeats"), index=summary.index)
    no_requests = np.full(len(summary), math.nan)
    columns: dict[str, np.ndarray | pd.Series] = {}
    for metric in metrics:
        ci = np.zeros(len(summary)) if metric.exact else halves[metric.name].to_numpy(dtype=float)
        source = "exact" if metric.exact else "repeats"
        columns[metric.name] = means[metric.name].to_numpy(dtype=float)
        columns[f"{metric.name}_ci"] = ci
        columns[f"{metric.name}_ci_source"] = pd.Series([None if np.isnan(v) else source for v in ci],
                                                        index=summary.index, dtype=object)
        columns[f"{metric.name}_basis"] = basis
        columns[f"{metric.name}_n"] = n.to_numpy(dtype=float) if metric.from_requests else no_requests
        columns[f"{metric.name}_rho"] = columns[f"{metric.name}_n_eff"] = no_requests  # from requests only
    # Joined once: a column set one at a time copies the frame's blocks each time (a fifth
    # of a nine-run comparison's first computation, at five columns per metric).
    return pd.concat([summary, pd.DataFrame(columns, index=summary.index)], axis=1)


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def _sampled_point(rows: pd.DataFrame, requests: RequestSamples | None, metrics: Sequence[Metric],
                   memos: MutableMapping[int, req.BootstrapMemo] | None) -> _SampledPoint | None:
    """The point from its per-request samples, or None if any repeat lacks them.

    A point measured once whose intervals are kept (``memos``) and whose record holds every
    latency statistic asked for needs nothing else of its samples: the intervals give its
    noise and its request count (their ``n``), the record its values.  It is summarised
    without reading them (``requests`` may read a point's samples only when asked for one:
    db/sample_files.py), exactly as from them (tests/test_sample_files.py)."""
    point_ids = _point_ids(rows, requests)
    if requests is None or point_ids is None:
        return None
    # The point's columns as lists, read once: a column of the frame per metric and call
    # was a fifth of a nine-run summary with samples.
    stored: dict[str, list[Any]] = rows.to_dict("list")
    if len(point_ids) == 1 and memos is not None and _records_every_latency(stored, metrics, repeats=1):
        kept = req.kept_intervals(memos.get(point_ids[0]), _duration_of(rows), _request_names(metrics))
        if kept:  # none kept: fewer than two requests, or nothing computable; the samples say which
            return _SampledPoint(rows, stored, None, metrics, memos, kept=kept)
    found = []
    for point_id in point_ids:
        samples = requests.get(point_id)
        if samples is None or req.request_count(samples) == 0:
            return None
        found.append(samples)
    return _SampledPoint(rows, stored, found, metrics, memos)


def _point_ids(rows: pd.DataFrame, requests: RequestSamples | None) -> list[int] | None:
    """The point ids of the point's repeats, or None if a repeat has none or no samples listed."""
    if requests is None or "point_id" not in rows.columns:
        return None
    ids: list[int] = []
    for point_id in rows["point_id"]:
        if is_missing(point_id) or int(point_id) not in requests:
            return None
        ids.append(int(point_id))
    return ids


def _records_every_latency(stored: dict[str, list[Any]], metrics: Sequence[Metric], repeats: int) -> bool:
    """Every repeat's record holds every latency statistic of ``metrics`` (else the missing
    ones come from the samples: :meth:`_SampledPoint.repeat_values`)."""
    return all(not any(math.isnan(v) for v in _stored_numbers(stored, metric, repeats))
               for metric in metrics if metric.latency)


def _stored_numbers(stored: dict[str, list[Any]], metric: Metric, repeats: int) -> list[float]:
    """The metric's stored value per repeat, NaN where the record has none."""
    return [_cell_number(v) for v in stored.get(metric.column, [None] * repeats)]


def _duration_of(rows: pd.DataFrame) -> float | None:
    return _cell_number(rows["duration_s"].iloc[0]) if "duration_s" in rows.columns else None


def _request_names(metrics: Sequence[Metric]) -> list[str]:
    return [m.name for m in metrics if m.from_requests]


class _SampledPoint:
    """The summary columns of one point whose every repeat has per-request samples:
    ``samples``, or, for a point measured once, its ``kept`` intervals alone
    (:func:`_sampled_point` says when)."""

    def __init__(self, rows: pd.DataFrame, stored: dict[str, list[Any]], samples: list[pd.DataFrame] | None,
                 metrics: Sequence[Metric], memos: MutableMapping[int, req.BootstrapMemo] | None = None,
                 kept: dict[str, req.Interval] | None = None) -> None:
        self.rows, self.stored, self.metrics, self.memos = rows, stored, metrics, memos  # stored: rows as lists
        self.samples: list[pd.DataFrame] = samples or []
        self.repeats = len(rows)
        self.pooled = (req.request_statistics(req.pooled(self.samples))
                       if self.repeats > 1 and any(m.latency for m in metrics) else None)
        if kept:
            self.intervals = kept
            self.counts = [float(next(iter(kept.values())).n)]
        else:
            self.intervals = self._bootstrap() if self.repeats == 1 else {}
            self.counts = [float(req.request_count(s)) for s in self.samples]
        self.across_repeats = self._two_level() if self.pooled is not None else {}

    @functools.cached_property
    def per_repeat(self) -> list[dict[str, float]]:
        """Every latency statistic of each repeat from its samples (only asked for when the
        record lacks one)."""
        return [req.request_statistics(s) for s in self.samples]

    def _bootstrap(self) -> dict[str, req.Interval]:
        memo = None if self.memos is None else self.memos.setdefault(int(self.rows["point_id"].iloc[0]), {})
        return req.bootstrap_intervals(self.samples[0], _duration_of(self.rows), names=_request_names(self.metrics),
                                       memo=memo)

    def _two_level(self) -> dict[str, req.Interval]:
        """The pooled latency statistics' intervals across repeats (repeats, then requests)."""
        point_ids = [int(i) for i in self.rows["point_id"]]
        memo = None if self.memos is None else self.memos.setdefault(point_ids[0], {})
        names = [m.name for m in self.metrics if m.latency]
        return repeat_bootstrap.pooled_intervals(self.samples, point_ids, names, memo)

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {"low_n_p99": self.low_n_p99()}
        for metric in self.metrics:
            value, basis = self.value(metric)
            ci, source = self.noise(metric)
            out.update({metric.name: value, f"{metric.name}_ci": ci, f"{metric.name}_ci_source": source,
                        f"{metric.name}_basis": basis,
                        f"{metric.name}_n": float(sum(self.counts)) if metric.from_requests else math.nan})
            interval = self.intervals.get(metric.name) if source == "bootstrap" else None
            out.update({f"{metric.name}_rho": math.nan if interval is None else interval.rho,
                        f"{metric.name}_n_eff": math.nan if interval is None else interval.n_eff})
        return out

    def repeat_values(self, metric: Metric) -> list[float]:
        """The metric per repeat: the stored column, else (a client that did not report it)
        the same statistic from the repeat's samples."""
        stored = _stored_numbers(self.stored, metric, self.repeats)
        if not metric.latency or not any(math.isnan(v) for v in stored):
            return stored
        return [s[metric.name] if math.isnan(v) else v for v, s in zip(stored, self.per_repeat, strict=True)]

    def value(self, metric: Metric) -> tuple[float, Basis]:
        values = self.repeat_values(metric)
        if self.repeats == 1:
            return values[0], "single"  # the stored number, exactly
        if self.pooled is not None and metric.latency:
            return self.pooled[metric.name], "pooled"
        return mean_ci(values)[0], "mean_of_repeats"

    def noise(self, metric: Metric) -> tuple[float, str | None]:
        if metric.exact:
            return 0.0, "exact"
        if metric.name in self.across_repeats:
            return self.across_repeats[metric.name].half_width, "repeats"
        if self.repeats > 1:
            half = mean_ci(self.repeat_values(metric))[1]
            return (math.nan, None) if half is None else (half, "repeats")
        interval = self.intervals.get(metric.name)
        return (math.nan, None) if interval is None else (interval.half_width, "bootstrap")

    def low_n_p99(self) -> bool:
        """A p99 here rests on fewer than 100 requests (all repeats' requests count: pooled)."""
        has_p99 = any(m.quantile_pct == 99.0 for m in self.metrics)
        return has_p99 and sum(self.counts) < LOW_N_P99_REQUESTS


def _cell_number(value: Any) -> float:
    """A frame cell as a float; NaN where it holds no number (None, pd.NA, other text)."""
    number = real_number(value, text=True)
    return math.nan if number is None else number


# -- deltas against the baseline -----------------------------------------------------------------

COMPARE_COLUMNS = (
    "scenario", "concurrency", "metric", "direction", "run_id", "run_name", "source", "repeats",
    "value", "ci", "baseline_value", "baseline_repeats", "delta_pct", "noise_pct", "noise_source", "verdict",
    "basis", "n", "baseline_basis", "baseline_n", "low_n", "delta_low_pct", "delta_high_pct", "rho", "n_eff",
)
VERDICTS = ("baseline", "better", "worse", "same", "small", "changed", "cannot_tell", "uncertain", "n/a")


def compare_table(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int] | None = None,
                  metrics: Sequence[Metric] = METRICS, requests: RequestSamples | None = None,
                  summary: pd.DataFrame | None = None,
                  practical_threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT) -> pd.DataFrame:
    """Long table, one row per (point, metric, run), columns :data:`COMPARE_COLUMNS`, ordered
    by scenario, concurrency, metric (as in ``metrics``) and run (baseline first).

    ``verdict`` (one of :data:`VERDICTS`): 'baseline' (the baseline's own row), else read
    from the difference's 95 % interval ``delta_low_pct`` … ``delta_high_pct`` with
    ``practical_threshold_pct`` by :mod:`domain.results.difference`: 'better' / 'worse' (the
    interval misses zero and |Δ| ≥ the threshold, by the metric's direction), 'same' (the
    interval spans zero within ±threshold: shown "≈"), 'cannot_tell' (it spans zero and
    reaches past ±threshold), 'small' (it misses zero, |Δ| under the threshold: never
    coloured), 'changed' (as better/worse for a metric with no direction), 'uncertain' (no
    noise estimate on one side or both: never judged), 'n/a' (a side is missing).
    ``noise_pct``: the root sum of squares of both half-widths, in % of the baseline.
    ``noise_source``: 'repeats' or 'bootstrap' (both sides the same kind),
    'repeats+bootstrap' (one of each), 'exact' (a server fact), None (no estimate).
    ``basis``/``n`` (and the baseline's) say how each value was computed and from how many
    requests; ``low_n``: a quantile from fewer requests than a bootstrap needs, on either side;
    ``rho``/``n_eff``: the run's lag-1 autocorrelation and effective sample behind its interval.
    The baseline's rows are included so a wide table can show its values.
    ``summary``: :func:`summarise_points` of exactly these runs, metrics and requests, when
    the caller has it already (the comparison does: summarising is a third of its work)."""
    wanted = list(dict.fromkeys(run_ids if run_ids is not None else frame["run_id"]))
    if baseline_run_id not in wanted:
        wanted.insert(0, baseline_run_id)
    if summary is None:
        summary = summarise_points(frame[frame["run_id"].isin(wanted)], metrics, requests)
    long = _metric_rows(summary, metrics)
    base = long[long["run_id"] == baseline_run_id][
        [*POINT, "metric", "value", "ci", "ci_source", "repeats", "basis", "n"]].rename(
        columns={"value": "baseline_value", "ci": "baseline_ci", "ci_source": "baseline_ci_source",
                 "repeats": "baseline_repeats", "basis": "baseline_basis", "n": "baseline_n"})
    table = long.merge(base, on=[*POINT, "metric"], how="left")
    table["baseline_repeats"] = table["baseline_repeats"].fillna(0).astype(int)
    _add_deltas(table, baseline_run_id, practical_threshold_pct)
    table["low_n"] = _low_n(table)
    metric_order = {m.name: i for i, m in enumerate(metrics)}
    run_order = {run_id: i for i, run_id in enumerate(wanted)}
    order = pd.DataFrame({"s": table["scenario"].astype(str), "c": table["concurrency"],
                          "m": table["metric"].map(metric_order), "r": table["run_id"].map(run_order)})
    ordered = table.loc[order.sort_values(["s", "c", "m", "r"], kind="stable").index]
    return ordered[list(COMPARE_COLUMNS)].reset_index(drop=True)


_LONG_NAMES = ("value", "ci", "ci_source", "basis", "n", "rho", "n_eff")


def _metric_rows(summary: pd.DataFrame, metrics: Sequence[Metric]) -> pd.DataFrame:
    """The summary's points once per metric, metric after metric: the point's columns, the
    metric's five (:data:`SUMMARY_SUFFIXES`, named :data:`_LONG_NAMES`), its name, direction
    and quantile.  Built column by column: a frame per metric, renamed and concatenated,
    was a third of a nine-run comparison's compare table."""
    size = len(summary)
    long = summary[["run_id", "run_name", "source", *POINT, "repeats"]].take(
        np.tile(np.arange(size), len(metrics))).reset_index(drop=True)
    for suffix, name in zip(SUMMARY_SUFFIXES, _LONG_NAMES, strict=True):
        long[name] = pd.concat([summary[f"{m.name}{suffix}"] for m in metrics], ignore_index=True)
    long["metric"] = pd.Series(np.repeat([m.name for m in metrics], size), dtype="str")
    # As a frame per metric concatenated typed them: text and numbers, or objects where a
    # metric has no direction or quantile (None).
    directions, quantiles = [m.direction for m in metrics], [m.quantile_pct for m in metrics]
    long["direction"] = pd.Series(np.repeat(np.array(directions, dtype=object), size),
                                  dtype=object if None in directions else "str")
    long["quantile"] = pd.Series(np.repeat(np.array(quantiles, dtype=object), size),
                                 dtype=object if None in quantiles else float)
    return long


def _low_n(table: pd.DataFrame) -> np.ndarray:
    """Per row: a quantile from fewer requests than a bootstrap needs
    (:func:`requests.min_requests_for`), on either side; False without a count."""
    quantile = pd.to_numeric(table["quantile"], errors="coerce").to_numpy(dtype=float)
    needed = np.full(len(table), np.nan)
    for q in set(quantile[~np.isnan(quantile)]):
        needed[quantile == q] = req.min_requests_for(float(q))
    with np.errstate(invalid="ignore"):  # NaN compares False: no count, no quantile
        return ((table["n"].to_numpy(dtype=float) < needed)
                | (table["baseline_n"].to_numpy(dtype=float) < needed))


def _add_deltas(table: pd.DataFrame, baseline_run_id: int,
                threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT) -> None:
    """Fills delta_pct, delta_low_pct, delta_high_pct, noise_pct, noise_source and verdict,
    vectorised: the rules of :func:`delta_pct`, :func:`noise_band_pct`,
    :func:`domain.results.difference.difference_interval` and :func:`verdict`, which say them
    for one row (a row at a time was a fifth of a nine-run comparison's compare table)."""
    value, base = table["value"].to_numpy(dtype=float), table["baseline_value"].to_numpy(dtype=float)
    ci, base_ci = table["ci"].to_numpy(dtype=float), table["baseline_ci"].to_numpy(dtype=float)
    is_baseline = (table["run_id"] == baseline_run_id).to_numpy()
    usable = ~np.isnan(base) & (base != 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as Python's floats: inf, no warning
        delta = np.where(usable & ~np.isnan(value), (value - base) / np.abs(base) * 100.0, np.nan)
    has_noise = usable & ~np.isnan(ci) & ~np.isnan(base_ci) & ~is_baseline
    noise = np.full(len(table), np.nan)
    # math.hypot per row, not np.hypot: the one-row rule's own arithmetic, to the last bit.
    noise[has_noise] = [math.hypot(a, b) / abs(v) * 100.0 for a, b, v in
                        zip(ci[has_noise].tolist(), base_ci[has_noise].tolist(), base[has_noise].tolist(), strict=True)]
    sources = np.full(len(table), None, dtype=object)
    ci_source = table["ci_source"].to_numpy(dtype=object)
    same_source = ci_source == table["baseline_ci_source"].to_numpy(dtype=object)
    sources[has_noise] = np.where(same_source[has_noise], ci_source[has_noise], "repeats+bootstrap")
    _, low, high = difference.difference_intervals(value, np.where(has_noise, ci, np.nan), base, base_ci)
    judged = difference.classify_intervals(delta, low, high, table["direction"].to_numpy(dtype=object),
                                           threshold_pct)
    verdicts = np.where(is_baseline, "baseline", np.where(np.isnan(base), "n/a", judged))
    table["delta_pct"] = np.where(is_baseline, np.nan, delta)
    table["delta_low_pct"] = np.where(is_baseline, np.nan, low)
    table["delta_high_pct"] = np.where(is_baseline, np.nan, high)
    table["noise_pct"] = noise
    table["noise_source"] = sources.tolist()
    table["verdict"] = verdicts.tolist()


def delta_pct(value: float, baseline: float) -> float:
    """(value − baseline) / |baseline| in %; NaN when either is missing or the baseline is 0."""
    if is_missing(value) or is_missing(baseline) or baseline == 0:
        return math.nan
    return (value - baseline) / abs(baseline) * 100.0


def noise_band_pct(baseline: float, ci: float, baseline_ci: float, ci_source: object = "repeats",
                   baseline_ci_source: object = "repeats") -> tuple[float, str | None]:
    """The half-width (in % of the baseline) within which a delta is noise, and its source
    (see :func:`compare_table`); (NaN, None) when either side has no estimate."""
    if is_missing(ci) or is_missing(baseline_ci) or is_missing(baseline) or baseline == 0:
        return math.nan, None
    # Only repeats and bootstrap can meet: 'exact' belongs to a metric, on both sides at once.
    source = str(ci_source) if ci_source == baseline_ci_source else "repeats+bootstrap"
    return math.hypot(ci, baseline_ci) / abs(baseline) * 100.0, source


def verdict(delta: float, noise: float, direction: object,
            threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT,
            interval: tuple[float, float] | None = None) -> str:
    """One delta's verdict: from the difference's 95 % ``interval`` (low %, high %) when
    given (:func:`domain.results.difference.classify_interval`), else from ``delta ± noise``
    (:func:`domain.results.difference.classify`); no noise estimate: 'uncertain'."""
    delta_, noise_ = (float(v) if not is_missing(v) else math.nan for v in (delta, noise))
    if interval is None or math.isnan(noise_):
        return difference.classify(delta_, noise_, direction, threshold_pct)
    low, high = (float(v) if not is_missing(v) else math.nan for v in interval)
    return difference.classify_interval(delta_, low, high, direction, threshold_pct)


def delta_text(delta: float, verdict_: str, lang: str = "en", low: object = None, high: object = None) -> str:
    """How a delta is shown: "≈" (same within the practical threshold), "+0.6% small" (real,
    inside the threshold), "+12.3%" (better, worse or changed), "+12.3%?" (cannot tell, or
    no noise estimate: not judged), "" when there is none; the difference's 95 % interval
    after it when ``low`` and ``high`` are given ("+12.3% [+8.1, +16.6]%")."""
    if verdict_ in ("n/a", "baseline") or is_missing(delta):
        return ""
    text = "≈" if verdict_ == "same" else f"{delta:+.1f}%"
    if verdict_ == difference.SMALL:
        text = t("stats.delta_small", lang, delta=text)
    elif verdict_ in ("uncertain", difference.CANNOT_TELL):
        text += UNCERTAIN_MARK
    low_, high_ = real_number(low, finite=True), real_number(high, finite=True)
    interval = "" if low_ is None or high_ is None else difference.interval_text(low_, high_)
    return f"{text} {interval}" if interval else text


def is_missing(value: object) -> bool:
    """None, NaN or pd.NA: a number the frame does not have."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def run_label(run_id: object, run_name: object, source: object, lang: str) -> str:
    """A run as legends and column headers name it; emulated/imported runs say so."""
    label = f"{run_name} (#{run_id})"
    if source in ("emulated", "imported"):
        label += t(f"compare.suffix.{source}", lang)
    return label


def wide_table(compare: pd.DataFrame, lang: str, metrics: Sequence[str] | None = None,
               with_delta: bool = True) -> pd.DataFrame:
    """The compare table laid out for reading: index (scenario, concurrency), one column
    group per run (its label) with each metric's value and, for non-baseline runs, its
    delta text ("≈" inside the noise, "?" after a delta with no noise estimate: see
    :func:`delta_text`).  Values stay unrounded numbers."""
    wanted = metrics or list(dict.fromkeys(compare["metric"]))
    rows = compare[compare["metric"].isin(wanted)].copy()
    rows["run"] = [run_label(r, n, s, lang) for r, n, s in zip(rows["run_id"], rows["run_name"], rows["source"],
                                                               strict=True)]
    run_order = list(dict.fromkeys(rows["run"]))
    columns: dict[tuple[str, str], pd.Series] = {}
    for run in run_order:
        of_run = rows[rows["run"] == run].set_index([*POINT, "metric"])
        for name in wanted:
            values = of_run.xs(name, level="metric") if name in of_run.index.get_level_values("metric") else None
            if values is None:
                continue
            columns[(run, metric_label(name, lang))] = values["value"]
            if with_delta and (values["verdict"] != "baseline").any():
                columns[(run, t("compare.delta_of", lang, metric=metric_label(name, lang)))] = pd.Series(
                    [delta_text(d, v, lang, lo, hi) for d, v, lo, hi in zip(
                        values["delta_pct"], values["verdict"], values["delta_low_pct"], values["delta_high_pct"],
                        strict=True)],
                    index=values.index)
    table = pd.DataFrame(columns)
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    table.index.names = [t("compare.col.scenario", lang), t("compare.col.concurrency", lang)]
    return table
