"""The curve rules: where a sweep saturates (the knee, the SLA break), how efficiently it
scales, which points of it are measurement problems (a cold first point, super-linear
efficiency), its goodput under an SLA, and its interactivity / throughput-per-GPU Pareto
front with the change between two points of that front.

Input is :func:`domain.results.analysis.summarise_points` output: one row per
(run_id, scenario, concurrency) with the metric columns it names (``output_tok_s``,
``tpot_p50``, ``ttft_p99``, ...), ``gpu_count``, ``gpus_used`` where known, ``run_name``,
``source`` and ``repeats``.  Every function here is pure.

Design choices (each named constant below says why):

* **Knee.** The threshold keeps its meaning, "throughput gains less than X % per doubling
  of concurrency from here on", but it is read off a saturating curve fitted to the whole
  sweep, ``thr(c) = T·c / (cⁿ + kⁿ)^(1/n)`` (linear below ``k``, flat at ``T`` above it,
  ``n`` the sharpness of the bend), instead of off each raw step.  A raw step divides the
  log of a noisy ratio by ``log2(c2/c1)``: the default grid's 12→16 and 24→32 steps are
  0.41 doublings, so ±3 % noise on each point reads as about ±15 % per doubling there and
  moves the knee.  The fit pools all points, so one noisy point cannot move it.  Where
  the fit does not describe the sweep (fewer than :data:`MIN_FIT_POINTS` points, or a
  residual above :data:`MAX_FIT_RMS`, e.g. a flat step followed by growth), the rule falls
  back to steps of at least one doubling: each point against the first point at ≥ 2× its
  concurrency.  ``tests/test_curve.py`` measures both on 200 noisy synthetic curves.
* **Cold first point / super-linear.** One server cannot serve a request faster because
  more run beside it, so throughput grows at most linearly with concurrency: efficiency
  ≤ 1 up to noise.  See :data:`SUPER_LINEAR_EFFICIENCY` and :data:`COLD_EFFICIENCY`.
* **Goodput** is AIPerf's: a request is good when it succeeded and meets every SLA limit
  given (a limit whose value the request lacks is not met); goodput = good requests ÷ the
  benchmark's duration, in requests per second.
* **Interactivity** (the Pareto x axis) is ``1000 / TPOT`` in tok/s/user, the decode
  speed a user sees while tokens stream (the field's Pareto charts plot it against
  throughput per GPU).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from domain.core.i18n import t
from domain.results.analysis import is_missing, metric_label

PointKey = tuple[Any, Any, Any]  # (run_id, scenario, concurrency)
CURVE = ["run_id", "scenario"]

# -- saturation --------------------------------------------------------------------------------------

DEFAULT_SATURATION_GAIN_PCT = 10.0  # below +10 % throughput per doubling of concurrency
DEFAULT_THROUGHPUT_METRIC = "output_tok_s"
SATURATION_COLUMNS = ("run_id", "scenario", "concurrency", "rule", "knee_concurrency", "sla_break_concurrency",
                      "knee_method")
# Three parameters (T, k, n): a fourth point is the first that can disagree with the fit.
MIN_FIT_POINTS = 4
# RMS of the fit's residuals in natural log units (≈ relative error).  Run-to-run noise of
# a point is a few % (±3 % is the band analysis.py assumes), which leaves a residual of
# about 0.02; past 0.05 the sweep has a shape the curve cannot take (a flat step followed by
# growth, a collapse after the peak) and the knee comes from the measured steps instead.
MAX_FIT_RMS = 0.05
_N_BOUNDS = (0.5, 20.0)  # sharpness: from a very soft bend to a corner


def gain_per_doubling(c1: float, thr1: float, c2: float, thr2: float) -> float:
    """Throughput gain per doubling between two points: (thr2/thr1)^(1/log2(c2/c1)) − 1."""
    return float((thr2 / thr1) ** (1.0 / math.log2(c2 / c1)) - 1.0)


def saturation_points(summary: pd.DataFrame, *, gain_threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT,
                      throughput_metric: str = DEFAULT_THROUGHPUT_METRIC, sla_metric: str | None = None,
                      sla_threshold_ms: float | None = None, keep: Collection[PointKey] = ()) -> pd.DataFrame:
    """Per (run, scenario), columns :data:`SATURATION_COLUMNS`.

    * knee: the smallest measured concurrency from which throughput gains less than
      ``gain_threshold_pct`` per doubling at every later step, read off the fitted curve
      (``knee_method`` 'fit') or off steps of at least one doubling ('steps'); None when
      the sweep still gains that much at its end;
    * SLA break: the first concurrency whose ``sla_metric`` (a metric name such as
      'ttft_p99') exceeds ``sla_threshold_ms`` (rule off when either is None).

    ``concurrency`` is the smaller of the two and ``rule`` says which fired:
    'throughput_gain', 'latency_sla', 'both' (same point) or None (not saturated).

    A cold first point (:func:`cold_first_points`) whose key is not in ``keep`` stays out
    of the knee: its throughput is a measurement problem, not the curve's start."""
    skipped = cold_first_points(summary, throughput_metric) - {tuple(key) for key in keep}
    records = []
    for (run_id, scenario), rows in summary.groupby(CURVE, sort=False):
        rows = rows.sort_values("concurrency")
        measured = rows[[(run_id, scenario, c) not in skipped for c in rows["concurrency"]]]
        knee, method = knee_of(list(measured["concurrency"]), list(measured[throughput_metric]), gain_threshold_pct)
        sla = None
        if sla_metric is not None and sla_threshold_ms is not None:
            sla = _sla_break(list(rows["concurrency"]), list(rows[sla_metric]), sla_threshold_ms)
        records.append((run_id, scenario, *_pick_rule(knee, sla), knee, sla, method))
    return pd.DataFrame.from_records(records, columns=list(SATURATION_COLUMNS))


def knee_of(concurrency: Sequence[float], throughput: Sequence[float],
            threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT) -> tuple[float | None, str | None]:
    """The knee of one sweep and how it was found ('fit' or 'steps'; None with < 2 points)."""
    points = sorted((float(c), float(thr)) for c, thr in zip(concurrency, throughput, strict=True)
                    if not is_missing(thr) and float(thr) > 0 and float(c) > 0)
    if len(points) < 2:
        return None, None
    cs, thrs = np.array([c for c, _ in points]), np.array([thr for _, thr in points])
    fitted = fit_saturating_curve(cs, thrs) if len(points) >= MIN_FIT_POINTS else None
    if fitted is not None:
        return _first_flat([(c, gain_per_doubling(c, t1, c2, t2)) for (c, t1), (c2, t2)
                            in itertools.pairwise(zip(cs, fitted, strict=True))], threshold_pct), "fit"
    return _first_flat(_doubling_gains(cs, thrs), threshold_pct), "steps"


def fit_saturating_curve(concurrency: np.ndarray, throughput: np.ndarray) -> np.ndarray | None:
    """The fitted curve's throughput at each concurrency, or None when it does not describe
    the sweep (residual RMS above :data:`MAX_FIT_RMS`)."""
    log_c, log_thr = np.log(concurrency), np.log(throughput)
    lower = [log_thr.min() - 5.0, log_c.min() - math.log(8.0), math.log(_N_BOUNDS[0])]
    upper = [log_thr.max() + 5.0, log_c.max() + math.log(8.0), math.log(_N_BOUNDS[1])]
    best = least_squares(lambda p: _log_curve(p, log_c) - log_thr, _grid_start(log_c, log_thr, lower, upper),
                         jac=lambda p: _log_curve_jac(p, log_c), bounds=(lower, upper))
    if math.sqrt(2.0 * best.cost / len(log_c)) > MAX_FIT_RMS:
        return None
    return np.exp(_log_curve(best.x, log_c))


# The start grid: bend positions across the bounds, sharpness from soft to a corner.
_GRID_K = 33
_GRID_N = 12


def _grid_start(log_c: np.ndarray, log_thr: np.ndarray, lower: list[float], upper: list[float]) -> np.ndarray:
    """The best (log T, log k, log n) on a grid of bends and sharpnesses, log T solved in
    closed form for each (the mean gap between the data and the curve without T), for one
    local fit to refine.  The loss has local minima where the bend sits between two points;
    a grid sees all of them at the cost of one vectorised evaluation, where a local fit from
    each of a few hand-picked starts cost a scipy call each (most of a nine-run
    comparison's first computation)."""
    log_k = np.linspace(lower[1], upper[1], _GRID_K)[:, None, None]
    log_n = np.linspace(lower[2], upper[2], _GRID_N)[None, :, None]
    shape = _log_curve((0.0, log_k, log_n), log_c)  # the curve with log T = 0, per cell and point
    log_t = np.clip((log_thr - shape).mean(axis=2), lower[0], upper[0])
    cost = ((shape + log_t[:, :, None] - log_thr) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(cost)), cost.shape)
    return np.array([log_t[i, j], log_k[i, 0, 0], log_n[0, j, 0]])


def _log_curve(params: Any, log_c: np.ndarray) -> np.ndarray:
    """log thr(c) = log T + log c − log(cⁿ + kⁿ)/n, with logaddexp so no power overflows.
    The parameters may be arrays that broadcast against ``log_c`` (the start grid)."""
    log_t, log_k, log_n = params
    n = np.exp(log_n)
    return log_t + log_c - np.logaddexp(n * log_c, n * log_k) / n


def _log_curve_jac(params: np.ndarray, log_c: np.ndarray) -> np.ndarray:
    """∂ :func:`_log_curve` / ∂(log T, log k, log n), in closed form (the fit's finite
    differences took most of a comparison's first computation).  With L = logaddexp(n·log c,
    n·log k) and w = kⁿ/(cⁿ + kⁿ): 1, −w, and L/n − ((1 − w)·log c + w·log k)."""
    _, log_k, log_n = params
    n = math.exp(log_n)
    total = np.logaddexp(n * log_c, n * log_k)
    w = np.exp(n * log_k - total)
    return np.column_stack([np.ones_like(log_c), -w, total / n - ((1.0 - w) * log_c + w * log_k)])


def _doubling_gains(cs: np.ndarray, thrs: np.ndarray) -> list[tuple[float, float]]:
    """(c, gain per doubling against the first point at ≥ 2c) for each point that has one."""
    gains = []
    for i, c in enumerate(cs):
        j = next((j for j in range(i + 1, len(cs)) if cs[j] >= 2.0 * c), None)
        if j is not None:
            gains.append((float(c), gain_per_doubling(c, thrs[i], cs[j], thrs[j])))
    return gains


def _first_flat(gains: Sequence[tuple[float, float]], threshold_pct: float) -> float | None:
    """The first concurrency from which every later gain is under the threshold."""
    knee = None
    for c, gain in gains:
        if gain * 100.0 < threshold_pct:
            knee = c if knee is None else knee
        else:
            knee = None  # gains resumed: the earlier flat stretch was not the knee
    return knee


def _sla_break(concurrency: list, latency: list, threshold_ms: float) -> float | None:
    return next((c for c, lat in zip(concurrency, latency, strict=True) if not is_missing(lat) and lat > threshold_ms),
                None)


def _pick_rule(knee: float | None, sla: float | None) -> tuple[float | None, str | None]:
    if knee is None and sla is None:
        return None, None
    if sla is None or (knee is not None and knee < sla):
        return knee, "throughput_gain"
    if knee is None or sla < knee:
        return sla, "latency_sla"
    return knee, "both"


def rule_text(saturation_row: pd.Series, lang: str, *, gain_threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT,
              sla_metric: str | None = None, sla_threshold_ms: float | None = None) -> str:
    """Which rule fired for a row of :func:`saturation_points`, in words, with its setting
    and, for the knee, how it was read (fitted curve or steps of one doubling)."""
    rule = saturation_row["rule"]
    if rule is None or is_missing(rule):
        return t("compare.rule.none", lang)
    if rule == "throughput_gain":
        method = saturation_row.get("knee_method")
        key = "curve.rule.knee_steps" if method == "steps" else "curve.rule.knee_fit"
        return t(key, lang, pct=f"{gain_threshold_pct:g}")
    if rule == "latency_sla":
        metric = metric_label(sla_metric, lang) if sla_metric else "?"
        return t("compare.rule.latency_sla", lang, metric=metric, ms=f"{sla_threshold_ms:g}")
    return t("compare.rule.both", lang)


# -- scaling efficiency, cold first points ----------------------------------------------------------

SCALING_COLUMNS = ("run_id", "scenario", "concurrency", "throughput", "speedup", "ideal_speedup", "efficiency",
                   "cold", "super_linear", "baseline_concurrency")
# Efficiency is (thr(c)/thr(c0)) / (c/c0).  A point carries a few % of run-to-run noise, a
# ratio of two points up to about twice that: past 1.05 a point scales faster than linear
# by more than a linear curve's noise usually gives, which on one server is a measurement
# problem (a slow baseline: too little warmup, cold caches, JIT) and is badged, never
# reported silently.
SUPER_LINEAR_EFFICIENCY = 1.05
# A first point whose next point is more than 1.3× as efficient reads at least 23 % below
# the next point's linear trend: far past any noise.  It is called cold (and left out of
# the efficiency baseline) when the sweep after it is physical, i.e. its own next step is not
# that far super-linear too; otherwise the whole start of the sweep is suspect and every
# point above 1.05 carries the super-linear badge instead.
COLD_EFFICIENCY = 1.3


def cold_first_points(summary: pd.DataFrame, throughput_metric: str = DEFAULT_THROUGHPUT_METRIC) -> set[PointKey]:
    """(run_id, scenario, concurrency) of each sweep's lowest point that ran cold: the next
    point's efficiency against it is above :data:`COLD_EFFICIENCY` while the step after
    that (if measured) is not."""
    cold: set[PointKey] = set()
    for (run_id, scenario), rows in summary.groupby(CURVE, sort=False):
        points = _valid_points(rows, throughput_metric)
        if len(points) < 2 or _efficiency(points[0], points[1]) <= COLD_EFFICIENCY:
            continue
        if len(points) >= 3 and _efficiency(points[1], points[2]) > COLD_EFFICIENCY:
            continue
        cold.add((run_id, scenario, points[0][0]))
    return cold


def scaling_efficiency(summary: pd.DataFrame, throughput_metric: str = DEFAULT_THROUGHPUT_METRIC,
                       keep: Collection[PointKey] = ()) -> pd.DataFrame:
    """efficiency(c) = (thr(c)/thr(cb)) / (c/cb) per (run, scenario), columns
    :data:`SCALING_COLUMNS`; 1.0 is perfectly linear scaling.

    The baseline ``cb`` is the lowest concurrency with a throughput, unless that point is a
    cold first point (:func:`cold_first_points`) whose key is not in ``keep``: then it is
    the next point, and the cold point's own row is relative to it.  ``cold`` marks the
    cold point (kept or not); ``super_linear`` marks any other point above
    :data:`SUPER_LINEAR_EFFICIENCY`."""
    cold = cold_first_points(summary, throughput_metric)
    kept = {tuple(key) for key in keep}
    records = []
    for (run_id, scenario), rows in summary.groupby(CURVE, sort=False):
        points = _valid_points(rows, throughput_metric)
        base = points[0] if points else (math.nan, math.nan)
        if points and (run_id, scenario, base[0]) in cold and (run_id, scenario, base[0]) not in kept:
            base = points[1]
        ordered = rows.sort_values("concurrency")
        for c, thr in zip(ordered["concurrency"], ordered[throughput_metric], strict=True):
            is_cold = (run_id, scenario, c) in cold
            speedup = thr / base[1] if base[1] and not is_missing(thr) else math.nan
            efficiency = speedup / (c / base[0]) if not is_missing(speedup) else math.nan
            records.append((run_id, scenario, c, thr, speedup, c / base[0], efficiency, is_cold,
                            bool(not is_cold and efficiency > SUPER_LINEAR_EFFICIENCY), base[0]))
    return pd.DataFrame.from_records(records, columns=list(SCALING_COLUMNS))


def _valid_points(rows: pd.DataFrame, throughput_metric: str) -> list[tuple[Any, float]]:
    """(concurrency, throughput) of the points with a positive throughput, lowest first."""
    ordered = rows.sort_values("concurrency")
    return [(c, float(thr)) for c, thr in zip(ordered["concurrency"], ordered[throughput_metric], strict=True)
            if not is_missing(thr) and float(thr) > 0]


def _efficiency(low: tuple[Any, float], high: tuple[Any, float]) -> float:
    return (high[1] / low[1]) / (high[0] / low[0])


def scaling_rule_text(lang: str) -> str:
    """How efficiency, its baseline and its two badges are decided, in one paragraph."""
    return t("curve.rule.scaling", lang, cold=f"{COLD_EFFICIENCY:g}",
             super_pct=f"{SUPER_LINEAR_EFFICIENCY * 100:g}")


# -- goodput ------------------------------------------------------------------------------------------

GOODPUT_COLUMNS = ("run_id", "scenario", "concurrency", "goodput_rps", "good_requests", "requests", "good_fraction",
                   "repeats_with_samples", "reason")


def good_requests(requests: pd.DataFrame, ttft_ms: float | None, tpot_ms: float | None) -> pd.Series:
    """Per request: succeeded and met every limit given (AIPerf's ``good_request_count``:
    a value at or under its limit passes; a request lacking the value fails that limit)."""
    if ttft_ms is None and tpot_ms is None:
        raise ValueError("goodput needs at least one SLA limit (TTFT or TPOT)")
    good = requests["success"].fillna(False).astype(bool)
    for column, limit in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if limit is not None:
            good &= pd.to_numeric(requests[column], errors="coerce").le(limit)  # NaN compares False
    return good


def goodput(requests: pd.DataFrame, duration_s: float, ttft_ms: float | None, tpot_ms: float | None) -> float:
    """Good requests per second of the benchmark's duration (AIPerf's ``goodput``), from
    per-request samples (columns of ``domain.results.requests.REQUEST_COLUMNS``)."""
    if not duration_s or duration_s <= 0 or is_missing(duration_s):
        raise ValueError(f"goodput needs a positive benchmark duration, got {duration_s!r}")
    return float(good_requests(requests, ttft_ms, tpot_ms).sum()) / float(duration_s)


def goodput_table(summary: pd.DataFrame, samples_by_point: Mapping[PointKey, Sequence[tuple[pd.DataFrame, float]]],
                  *, ttft_ms: float | None, tpot_ms: float | None) -> pd.DataFrame:
    """Goodput per point of ``summary``, columns :data:`GOODPUT_COLUMNS`.

    ``samples_by_point`` maps (run_id, scenario, concurrency) to one (requests, duration_s)
    pair per repeat that kept per-request samples; repeats are pooled (all good requests ÷
    all durations).  A point without samples gets NaN and ``reason`` 'no_samples' (text:
    :func:`goodput_reason_text`)."""
    records: list[tuple[Any, ...]] = []
    for key in zip(summary["run_id"], summary["scenario"], summary["concurrency"], strict=True):
        repeats = [(frame, duration) for frame, duration in samples_by_point.get(key, ())
                   if not is_missing(duration) and duration > 0]
        if not repeats:
            records.append((*key, math.nan, math.nan, math.nan, math.nan, 0, "no_samples"))
            continue
        good = sum(int(good_requests(frame, ttft_ms, tpot_ms).sum()) for frame, _ in repeats)
        total = sum(len(frame) for frame, _ in repeats)
        duration = sum(float(d) for _, d in repeats)
        records.append((*key, good / duration, good, total, good / total if total else math.nan, len(repeats), None))
    return pd.DataFrame.from_records(records, columns=list(GOODPUT_COLUMNS))


def goodput_rule_text(lang: str, ttft_ms: float | None, tpot_ms: float | None) -> str:
    """The SLA goodput was counted under, in words (for table footers and slide notes)."""
    limits = [t(f"curve.goodput.limit_{name}", lang, ms=f"{limit:g}")
              for name, limit in (("ttft", ttft_ms), ("tpot", tpot_ms)) if limit is not None]
    return t("curve.goodput.rule", lang, limits=t("curve.and", lang).join(limits))


def goodput_reason_text(reason: str, lang: str) -> str:
    return t(f"curve.goodput.reason.{reason}", lang)


# -- Pareto --------------------------------------------------------------------------------------

PARETO_COLUMNS = ("run_id", "run_name", "source", "scenario", "concurrency", "interactivity", "throughput_per_gpu",
                  "on_frontier", "pareto_mark", "j_per_token")
PARETO_MARKS = ("front", "dominated", "ambiguous")
TPOT_STATISTICS = ("tpot_p50", "tpot_p90", "tpot_p99")  # the selector's choices, where the summary has them


def pareto_points(summary: pd.DataFrame, tpot_metric: str = "tpot_p50") -> pd.DataFrame:
    """Throughput per GPU (output tok/s ÷ ``gpus_used``, the GPUs the topology uses, else
    ÷ gpu_count) against interactivity (1000 / ``tpot_metric``, tok/s/user; the median by
    default), with ``on_frontier`` marking the points no other point of the same scenario
    beats on both axes.  Points lacking either value are kept, never on the frontier.

    ``pareto_mark`` (:data:`PARETO_MARKS`, None without both values) reads the points' 95 %
    intervals (``output_tok_s_ci`` and the TPOT statistic's, as the summary has them; none
    counts as a point): 'dominated' when another point of the scenario beats it on both
    axes even at the ends of both intervals, 'front' when no other point could beat it on
    both anywhere within them, 'ambiguous' otherwise (the intervals overlap the front).
    ``j_per_token``: the point's joules per output token (:mod:`domain.results.energy`; NaN
    without power data), the view's third quantity: labelled beside each point, not ranked."""
    table = summary[["run_id", "run_name", "source", "scenario", "concurrency"]].copy()
    tpot = pd.to_numeric(summary[tpot_metric], errors="coerce")
    gpus = _gpus(summary)
    table["interactivity"] = 1000.0 / tpot.where(tpot > 0)
    table["throughput_per_gpu"] = pd.to_numeric(summary["output_tok_s"], errors="coerce") / gpus.where(gpus > 0)
    table["on_frontier"] = False
    for _, rows in table.groupby("scenario", sort=False):
        table.loc[_frontier_index(rows), "on_frontier"] = True
    table["pareto_mark"] = _pareto_marks(table, summary, tpot, tpot_metric, gpus)
    # The third axis: the point's energy per output token (NaN without power data), shown, not ranked.
    table["j_per_token"] = _numeric_column(summary, "j_per_token")
    return table[list(PARETO_COLUMNS)]


def _numeric_column(summary: pd.DataFrame, column: str) -> pd.Series:
    if column not in summary.columns:
        return pd.Series(np.nan, index=summary.index)
    return pd.to_numeric(summary[column], errors="coerce")


def _pareto_marks(table: pd.DataFrame, summary: pd.DataFrame, tpot: pd.Series, tpot_metric: str,
                  gpus: pd.Series) -> list[str | None]:
    """Each point's :data:`PARETO_MARKS` from the ends of its intervals on both axes."""
    tpot_ci = _half_width(summary, tpot_metric)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_low = (1000.0 / (tpot + tpot_ci)).to_numpy(dtype=float)
        slower = (tpot - tpot_ci).to_numpy(dtype=float)
        x_high = np.where(slower > 0, 1000.0 / slower, np.inf)
    y = table["throughput_per_gpu"].to_numpy(dtype=float)
    y_ci = (_half_width(summary, "output_tok_s") / gpus.where(gpus > 0)).fillna(0.0).to_numpy(dtype=float)
    x = table["interactivity"].to_numpy(dtype=float)
    bounds = np.stack([x, y, x_low, x_high, y - y_ci, y + y_ci], axis=1)
    marks: list[str | None] = [None] * len(table)
    for _, rows in table.groupby("scenario", sort=False):
        positions = [table.index.get_loc(i) for i in rows.index]
        valid = [p for p in positions if np.isfinite(bounds[p, :2]).all()]
        for p in valid:
            marks[p] = _mark(bounds[p], bounds[[q for q in valid if q != p]])
    return marks


def _mark(point: np.ndarray, others: np.ndarray) -> str:
    """'dominated', 'front' or 'ambiguous' for one point (x, y, x_low, x_high, y_low, y_high)
    against the others of its scenario."""
    _, _, x_low, x_high, y_low, y_high = point
    ox_low, ox_high, oy_low, oy_high = others[:, 2], others[:, 3], others[:, 4], others[:, 5]
    surely = (ox_low >= x_high) & (oy_low >= y_high) & ((ox_low > x_high) | (oy_low > y_high))
    if surely.any():
        return "dominated"
    maybe = (ox_high >= x_low) & (oy_high >= y_low) & ((ox_high > x_low) | (oy_high > y_low))
    return "ambiguous" if maybe.any() else "front"


def _half_width(summary: pd.DataFrame, metric: str) -> pd.Series:
    """A metric's 95 % half-width per row; 0 where the summary has none (taken as a point)."""
    column = f"{metric}_ci"
    if column not in summary.columns:
        return pd.Series(0.0, index=summary.index)
    return pd.to_numeric(summary[column], errors="coerce").fillna(0.0)


def _gpus(summary: pd.DataFrame) -> pd.Series:
    """gpus_used where known, else gpu_count, per row."""
    counted = pd.to_numeric(summary["gpu_count"], errors="coerce")
    if "gpus_used" not in summary.columns:
        return counted
    return pd.to_numeric(summary["gpus_used"], errors="coerce").fillna(counted)


def _frontier_index(rows: pd.DataFrame) -> list:
    """Indices of points not dominated (≥ on both axes and > on one) by any other point."""
    valid = rows.dropna(subset=["interactivity", "throughput_per_gpu"])
    xs, ys = valid["interactivity"].to_numpy(), valid["throughput_per_gpu"].to_numpy()
    frontier = []
    for index, x, y in zip(valid.index, xs, ys, strict=True):
        dominated = ((xs >= x) & (ys >= y) & ((xs > x) | (ys > y))).any()
        if not dominated:
            frontier.append(index)
    return frontier


def pareto_change(pareto: pd.DataFrame, a: PointKey, b: PointKey) -> dict[str, Any]:
    """From point ``a`` to point ``b`` of :func:`pareto_points` output: the % change in
    tok/s/user (``interactivity_change_pct``) and tok/s/GPU (``throughput_per_gpu_change_pct``).

    Both must be on the frontier of one scenario; otherwise ``problem`` says why
    ('missing', 'not_on_frontier' or 'different_scenarios'), ``points`` names the
    offending keys and the changes are NaN.  Text: :func:`pareto_change_text`."""
    rows = {key: _pareto_row(pareto, key) for key in (a, b)}
    change: dict[str, Any] = {"a": a, "b": b, "problem": None, "points": [],
                              "interactivity_change_pct": math.nan, "throughput_per_gpu_change_pct": math.nan}
    for side, key in (("a", a), ("b", b)):
        row = rows[key]
        change[f"interactivity_{side}"] = row["interactivity"] if row is not None else math.nan
        change[f"throughput_per_gpu_{side}"] = row["throughput_per_gpu"] if row is not None else math.nan
    missing = [key for key, row in rows.items() if row is None]
    off = [key for key, row in rows.items() if row is not None and not bool(row["on_frontier"])]
    if missing or off:
        change.update(problem="missing" if missing else "not_on_frontier", points=missing or off)
    elif a[1] != b[1]:
        change.update(problem="different_scenarios", points=[a, b])
    else:
        for axis in ("interactivity", "throughput_per_gpu"):
            change[f"{axis}_change_pct"] = (change[f"{axis}_b"] / change[f"{axis}_a"] - 1.0) * 100.0
    return change


def _pareto_row(pareto: pd.DataFrame, key: PointKey) -> pd.Series | None:
    run_id, scenario, concurrency = key
    match = pareto[(pareto["run_id"] == run_id) & (pareto["scenario"] == scenario)
                   & (pareto["concurrency"] == concurrency)]
    return None if match.empty else match.iloc[0]


def pareto_change_text(change: Mapping[str, Any], lang: str, labels: Mapping[PointKey, str] | None = None) -> str:
    """One sentence for :func:`pareto_change`'s result; ``labels`` names the points (else
    "run #id, scenario, c=…")."""
    def name(key: PointKey) -> str:
        return (labels or {}).get(key) or t("curve.pareto.point", lang, run_id=key[0], scenario=key[1],
                                             concurrency=key[2])

    if change["problem"] is not None:
        return t(f"curve.pareto.problem.{change['problem']}", lang,
                 points=t("curve.and", lang).join(name(k) for k in change["points"]))
    return t("curve.pareto.change", lang, a=name(change["a"]), b=name(change["b"]),
             user=f"{change['interactivity_change_pct']:+.1f}", gpu=f"{change['throughput_per_gpu_change_pct']:+.1f}")
