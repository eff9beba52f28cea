"""Validity badges for artifacts of the measuring method itself: a point can be measured
correctly and still not measure the steady load its label names.

Four badges, each a statistic of the point with the numbers behind it in its detail
(labels ``compare.badge.<name>``, one-sentence explanations ``badge.explain.<name>``;
they join :mod:`domain.results.validity`'s table, so the compare page and every export show
them as they show the others):

``ramp_in_window``
    The first requests' TTFT far above the rest.  With per-request samples (the runner's,
    or an import's ``--output-details`` arrays), in the order the client issued them
    (``start_s``; row order, which is the client's issue order, where unknown): the
    median TTFT of the first wave (the first ``concurrency`` requests, all sent at once;
    at least :data:`RAMP_MIN_WAVE`) against the settled median (that of the second half of
    the requests).  It fires at :data:`RAMP_FACTOR` times or more and
    :data:`RAMP_MIN_EXCESS_MS` above it (:func:`ramp_fires`); the detail gives the ratio
    and the share of the point's requests affected (those of the first half above the
    factor times the settled median).
    Without samples (a record of aggregates only) a ramp inside the point cannot be seen,
    but one that covers a whole point can: under a closed loop on a warm server TTFT does
    not fall as the concurrency rises (more requests share every prefill and decode step),
    so a median TTFT that far above that of the same run's next concurrency (same scenario
    and repeat) was slowed by something that ended before the next point, such as a
    server still warming up.  Its share is the bound the record's quantiles give: at
    least half of the point's requests, its median being above the next point's by that
    much.
``steady_state_not_reached``
    Throughput still trending over the point.  Under the closed loop the point's throughput
    is concurrency × output tokens / E2E latency (Little's law), so its trend is that of
    each request's time per output token (E2E / output length) in issue order, leaving out
    the first wave (its start-up burst is the ramp's) and the last (``concurrency``
    requests each: they finish while the load drains, fewer in flight, so faster): a
    straight line is fitted through them, and the throughput at the first and at the last
    of them read off it.  The badge fires when they differ by more than :data:`STEADY_TOLERANCE`
    and by more than :data:`STEADY_Z` times the noise of that change: the slope's standard
    error from the fit's residuals, inflated by (1 + ρ)/(1 − ρ) for their lag-1
    autocorrelation ρ (``requests.lag1_autocorrelation``), as consecutive requests of a
    closed loop are correlated (the residuals are taken about the line, so the trend itself
    does not pass for correlation).  Needs per-request samples; unknown otherwise.
``request_count_sensitive``
    Two request counts at one concurrency for one configuration, whose median TTFT differs
    beyond the points' intervals (``|Δ| > hypot(half-width A, half-width B)``, the rule of
    :mod:`domain.results.analysis`).  A plan resolves one request count per concurrency
    (``num_prompts``), so the two counts come from two compared runs: the baseline and each
    run whose comparability matrix matches it on every condition but the request count and
    the points measured (:func:`same_config_runs`).
``lengths_shrunk``
    Range ratio below 1: bench_serving draws each length uniformly from
    [ratio × L, L], so the realised mean lengths are well under the nominal ``input_len`` /
    ``output_len`` the scenario is labelled with.  Realised means come from the server's own
    counts (``server_prompt_tokens`` / ``server_generation_tokens``, runner/telemetry.py)
    per completed request, else from the client record's totals (``total_input_tokens`` /
    ``total_output_tokens``: the lengths it drew); the badge fires when either mean is
    under :data:`SHRUNK_RATIO` of nominal.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from domain.results.analysis import POINT, is_missing
from domain.results.requests import RequestSamples, lag1_autocorrelation
from domain.results.validity import BADGE_COLUMNS, LENGTH_DATASETS

METHOD_BADGES = ("ramp_in_window", "steady_state_not_reached", "request_count_sensitive", "lengths_shrunk")
# The per-request columns these badges read (no inter-token gaps: a page reads only these).
TIMELINE_COLUMNS = ("request_idx", "success", "ttft_ms", "e2e_ms", "start_s", "output_len")

RAMP_FACTOR = 3.0  # first wave's median TTFT ≥ 3 × the settled median: "several-fold"
# ... and at least this much above it in absolute terms: a smaller excess is within what a busy
# client host adds when it sends a whole wave at once, and inflates no tail figure that matters.
RAMP_MIN_EXCESS_MS = 100.0
RAMP_MIN_REQUESTS = 8  # fewer: a settled median of a handful of requests says little
# The first wave is at least this many requests: one slow request at c=1 is too often chance
# (a lognormal TTFT of sigma 0.4 is 3 × its median once in 300 requests); four in a row are not.
RAMP_MIN_WAVE = 4
STEADY_TOLERANCE = 0.10  # fitted throughput at the last request more than 10 % off that at the first
STEADY_Z = 4.0  # as validity.SPREAD_Z: two-sided p ~ 6e-5 under the normal approximation
STEADY_MIN_REQUESTS = 16
SHRUNK_RATIO = 0.90  # realised mean length under 90 % of the nominal one


# -- ramp in the measured window ----------------------------------------------------------------


@dataclass(frozen=True)
class Ramp:
    """The first wave's median TTFT over the settled median, and the requests affected."""

    first_ms: float
    settled_ms: float
    wave: int
    affected: int
    n: int

    @property
    def ratio(self) -> float:
        return self.first_ms / self.settled_ms if self.settled_ms > 0 else math.inf

    @property
    def fires(self) -> bool:
        return ramp_fires(self.first_ms, self.settled_ms)

    def detail(self) -> str:
        return (f"first {self.wave} requests' median TTFT {self.ratio:.1f}× the settled median "
                f"({self.first_ms:.0f} vs {self.settled_ms:.0f} ms); {self.affected}/{self.n} requests "
                f"({100 * self.affected / self.n:.0f} %) above {RAMP_FACTOR:g}×")


def ramp_fires(slow_ms: float, settled_ms: float) -> bool:
    """Several-fold (:data:`RAMP_FACTOR`) and by :data:`RAMP_MIN_EXCESS_MS` or more."""
    return slow_ms >= RAMP_FACTOR * settled_ms and slow_ms - settled_ms >= RAMP_MIN_EXCESS_MS


@dataclass(frozen=True)
class Issued:
    """A point's successful requests in the order the client sent them: by ``start_s``
    where every one is known, else as stored (the client's issue order)."""

    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    output_len: np.ndarray

    @classmethod
    def of(cls, requests: pd.DataFrame) -> Issued:
        columns = {name: _floats(requests, name) for name in ("ttft_ms", "e2e_ms", "output_len", "start_s")}
        ok = np.isfinite(columns["ttft_ms"])
        if "success" in requests.columns:
            ok &= requests["success"].fillna(False).to_numpy(dtype=bool)
        starts = columns["start_s"][ok]
        order = np.argsort(starts, kind="stable") if np.isfinite(starts).all() else np.arange(int(ok.sum()))
        return cls(*(columns[name][ok][order] for name in ("ttft_ms", "e2e_ms", "output_len")))


def _floats(requests: pd.DataFrame, column: str) -> np.ndarray:
    """The column as floats in stored order (request_idx order), NaN where absent."""
    if column not in requests.columns:
        return np.full(len(requests), np.nan)
    return pd.to_numeric(requests[column], errors="coerce").to_numpy(dtype=float)


def ramp_of(requests: pd.DataFrame | Issued, concurrency: int) -> Ramp | None:
    """The point's ramp statistic, or None with too few requests to tell."""
    ttft = (requests if isinstance(requests, Issued) else Issued.of(requests)).ttft_ms
    n, wave = len(ttft), max(int(concurrency), RAMP_MIN_WAVE)
    if n < max(RAMP_MIN_REQUESTS, 2 * wave):
        return None
    settled = float(np.median(ttft[n // 2:]))
    affected = int((ttft[: n // 2] > RAMP_FACTOR * settled).sum())
    return Ramp(float(np.median(ttft[:wave])), settled, wave, affected, n)


def _cross_point_ramps(frame: pd.DataFrame) -> dict[tuple[Any, ...], str]:
    """Per point key (run, scenario, concurrency, repeat): the detail where its median TTFT
    is :data:`RAMP_FACTOR` times that of the next concurrency of its run and scenario."""
    if "ttft_median_ms" not in frame.columns:
        return {}
    found = {}
    narrow = frame[["run_id", "scenario", "concurrency", "repeat_idx", "ttft_median_ms"]].copy()
    narrow["repeat_idx"] = narrow["repeat_idx"].fillna(0)
    for _, curve in narrow.groupby(["run_id", "scenario", "repeat_idx"], sort=False):
        rows = curve.sort_values("concurrency").to_dict("records")
        for row, nxt in itertools.pairwise(rows):
            here, there = row["ttft_median_ms"], nxt["ttft_median_ms"]
            if is_missing(here) or is_missing(there) or there <= 0 or not ramp_fires(here, there):
                continue
            found[_key(row)] = (f"median TTFT {here / there:.1f}× that at c={nxt['concurrency']:g} "
                                f"({here:.0f} vs {there:.0f} ms): at least 50 % of the requests")
    return found


# -- steady state ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """Output tok/s at the point's first and last request, read off a straight line fitted
    through the requests' time per token in issue order, and the noise of their ratio."""

    first_tok_s: float
    last_tok_s: float
    noise: float  # standard error of the relative change

    @property
    def change(self) -> float:
        return self.last_tok_s / self.first_tok_s - 1.0

    @property
    def fires(self) -> bool:
        return abs(self.change) > max(STEADY_TOLERANCE, STEADY_Z * self.noise)

    def detail(self) -> str:
        return (f"output {self.first_tok_s:.0f} → {self.last_tok_s:.0f} tok/s across the requests between the "
                f"first and the last wave ({100 * self.change:+.0f} %, noise ±{100 * self.noise:.0f} %)")


def trend_of(requests: pd.DataFrame | Issued, concurrency: int) -> Trend | None:
    """The fitted throughput trend, or None with fewer than :data:`STEADY_MIN_REQUESTS`
    timed requests between the first and the last wave (or a fit that leaves the positive
    range)."""
    issued = requests if isinstance(requests, Issued) else Issued.of(requests)
    c = max(concurrency, 1)
    loaded = slice(c, max(len(issued.e2e_ms) - c, c))  # not the first wave (a ramp) nor the last (the drain)
    e2e_ms, output_len = issued.e2e_ms[loaded], issued.output_len[loaded]
    timed = np.isfinite(output_len) & np.isfinite(e2e_ms) & (e2e_ms > 0) & (output_len > 0)
    per_token = e2e_ms[timed] / 1e3 / output_len[timed]  # seconds per output token
    return _line_trend(per_token, c) if len(per_token) >= STEADY_MIN_REQUESTS else None


def _line_trend(per_token: np.ndarray, concurrency: int) -> Trend | None:
    """The throughput at the ends of a straight line through the time per token, and the
    noise of its relative change (the slope's standard error, AR(1)-inflated)."""
    n = len(per_token)
    index = np.arange(n, dtype=float)
    slope, intercept = np.polyfit(index, per_token, 1)
    first, last = float(intercept), float(intercept + slope * (n - 1))
    if first <= 0 or last <= 0:
        return None
    residuals = per_token - (intercept + slope * index)
    rho = lag1_autocorrelation(residuals)
    inflation = 1.0 if math.isnan(rho) else (1.0 + rho) / (1.0 - rho)
    variance = float(residuals @ residuals) / (n - 2) / float(((index - index.mean()) ** 2).sum()) * inflation
    return Trend(concurrency / first, concurrency / last, math.sqrt(variance) * (n - 1) / float(per_token.mean()))


# -- lengths shrunk by range ratio ---------------------------------------------------------------------


def _num(row: Mapping[str, Any], column: str) -> float | None:
    value = row.get(column)
    return None if value is None or is_missing(value) else float(value)


def realised_means(row: Mapping[str, Any]) -> tuple[float, float, str] | None:
    """(mean input, mean output, whose count) per completed request, or None unknown."""
    completed = _num(row, "completed")
    if not completed:
        return None
    for source, prompt, generated in (("server", "server_prompt_tokens", "server_generation_tokens"),
                                      ("client", "total_input_tokens", "total_output_tokens")):
        p, g = _num(row, prompt), _num(row, generated)
        if p is not None and g is not None:
            return p / completed, g / completed, source
    return None


def lengths_shrunk(row: Mapping[str, Any]) -> str | None:
    ratio = _num(row, "random_range_ratio")
    means = realised_means(row)
    dataset = row.get("dataset")
    if ratio is None or ratio >= 1.0 or means is None or (not is_missing(dataset) and dataset not in LENGTH_DATASETS):
        return None  # a dataset with its own lengths is not drawn by the ratio (validity's rule)
    parts = [f"{name} {mean:.0f}/{nominal:g} ({100 * mean / nominal:.0f} %)"
             for name, mean, nominal in (("input", means[0], _num(row, "input_len")),
                                         ("output", means[1], _num(row, "output_len")))
             if nominal and mean < SHRUNK_RATIO * nominal]
    return f"mean {', '.join(parts)} at range ratio {ratio:g} ({means[2]} counts)" if parts else None


# -- request-count sensitivity ----------------------------------------------------------------------


def count_sensitivity(summary: pd.DataFrame, counts: Mapping[Any, float], same_config: Sequence[set[Any]]) -> (
        Iterator[tuple[tuple[Any, ...], str]]):
    """Per point of ``summary`` (run, scenario, concurrency): a detail where a point of the
    same configuration (``same_config``: sets of run ids), scenario and concurrency but
    another request count (``counts``: by (run, scenario, concurrency)) has a median TTFT
    beyond both intervals."""
    needed = {"ttft_p50", "ttft_p50_ci"}
    if not needed <= set(summary.columns):
        return
    rows = summary[["run_id", *POINT, "ttft_p50", "ttft_p50_ci"]].to_dict("records")
    for a in rows:
        for b in rows:
            detail = _differs_by_count(a, b, counts, same_config)
            if detail is not None:
                yield (a["run_id"], a["scenario"], a["concurrency"]), detail


def _differs_by_count(a: Mapping[str, Any], b: Mapping[str, Any], counts: Mapping[Any, float],
                      same_config: Sequence[set[Any]]) -> str | None:
    key_a, key_b = ((r["run_id"], r["scenario"], r["concurrency"]) for r in (a, b))
    n_a, n_b = counts.get(key_a), counts.get(key_b)
    if key_a == key_b or (a["scenario"], a["concurrency"]) != (b["scenario"], b["concurrency"]) or \
            n_a is None or n_b is None or n_a == n_b or \
            not any(a["run_id"] in group and b["run_id"] in group for group in same_config):
        return None
    values = [a["ttft_p50"], b["ttft_p50"], a["ttft_p50_ci"], b["ttft_p50_ci"]]
    if any(is_missing(v) for v in values) or abs(values[0] - values[1]) <= math.hypot(values[2], values[3]):
        return None
    return (f"median TTFT {values[0]:.0f} ms at {n_a:g} requests vs {values[1]:.0f} ms at {n_b:g} "
            f"(#{b['run_id']}), beyond the intervals (±{values[2]:.0f}, ±{values[3]:.0f} ms)")


# -- the table ------------------------------------------------------------------------------------


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    repeat = row.get("repeat_idx")
    return row["run_id"], row["scenario"], row["concurrency"], 0 if repeat is None or is_missing(repeat) else repeat


def _timeline(timelines: RequestSamples | None, row: Mapping[str, Any]) -> pd.DataFrame | None:
    point_id = row.get("point_id")
    if not timelines or point_id is None or is_missing(point_id):
        return None
    return timelines.get(int(point_id))


def point_method_badges(row: Mapping[str, Any], timeline: pd.DataFrame | None,
                        cross_ramp: str | None) -> Iterator[tuple[str, str]]:
    """The badges one point (one repeat) earns from its own record and samples."""
    issued = Issued.of(timeline) if timeline is not None else None
    ramp = ramp_of(issued, int(row["concurrency"])) if issued is not None else None
    if ramp is not None and ramp.fires:
        yield "ramp_in_window", ramp.detail()
    elif cross_ramp is not None:
        yield "ramp_in_window", cross_ramp
    trend = trend_of(issued, int(row["concurrency"])) if issued is not None else None
    if trend is not None and trend.fires:
        yield "steady_state_not_reached", trend.detail()
    shrunk = lengths_shrunk(row)
    if shrunk is not None:
        yield "lengths_shrunk", shrunk


def method_badges(frame: pd.DataFrame, timelines: RequestSamples | None = None, *,
                  summary: pd.DataFrame | None = None,
                  same_config: Sequence[set[Any]] = ()) -> pd.DataFrame:
    """Long table, one row per (point, badge) fired; columns :data:`BADGE_COLUMNS`, as
    :func:`domain.results.validity.validity_badges`.  ``timelines``: per-request samples by
    ``point_id`` (only :data:`TIMELINE_COLUMNS` are read); ``summary`` and ``same_config``
    for the request-count badge (see the module's docstring)."""
    cross = _cross_point_ramps(frame)
    records = [(row["run_id"], row["scenario"], row["concurrency"], row.get("repeat_idx"), badge, detail)
               for row in frame.to_dict("records")
               for badge, detail in point_method_badges(row, _timeline(timelines, row), cross.get(_key(row)))]
    if summary is not None:
        records += [(*key, None, "request_count_sensitive", detail)
                    for key, detail in count_sensitivity(summary, request_counts(frame), same_config)]
    return pd.DataFrame.from_records(records, columns=list(BADGE_COLUMNS))


def request_counts(frame: pd.DataFrame) -> dict[tuple[Any, ...], float]:
    """Per (run, scenario, concurrency): the requests each repeat asked for (``requested``),
    where every repeat asked for the same number."""
    if "requested" not in frame.columns:
        return {}
    counts = frame.groupby(["run_id", *POINT], sort=False)["requested"].agg(lambda s: set(s.dropna()))
    return {key: float(next(iter(found))) for key, found in counts.items() if len(found) == 1}


# Conditions that may differ between two runs whose points still count as one configuration
# for the request-count badge: the request count itself and which points each run has.
COUNT_CONDITIONS = frozenset({"num_prompts", "points"})


def same_config_runs(matrix: pd.DataFrame, baseline_run_id: int) -> list[set[Any]]:
    """The baseline with every run whose comparability matrix (domain/compare/comparability.py)
    matches it on every condition but :data:`COUNT_CONDITIONS`; one group, or none.  A
    condition that neither run's record states (both values missing) is not held against
    them; one that only one states, or that differs, is."""
    if matrix.empty:
        return []
    other = matrix[~matrix["condition"].isin(COUNT_CONDITIONS)]
    unknown_apart = (other["state"] == "unknown") & (other["baseline_value"] != other["value"])
    apart = set(other.loc[other["state"].isin(["differ", "intended"]) | unknown_apart, "run_id"])
    group = {baseline_run_id, *(set(matrix["run_id"]) - apart)}
    return [group] if len(group) > 1 else []
