"""Analysis of the points frame: metrics per point, deltas against a baseline with a noise
band, saturation, scaling efficiency and the Pareto frontier (validity badges are in
:mod:`domain.results.validity`).

Everything is a pure function of the points frame (one row per measured point and repeat;
see :mod:`domain.results.comparability` for the identity columns).  Repeats of a point are
averaged; a single repeat is passed through unchanged, so tables and exports carry the
stored numbers exactly.

Design choices (each named constant below says why):

* **Noise.** When both the run and the baseline have ≥ 2 repeats of a point, a delta is
  inside the noise ("≈") when it is within the combined 95 % t-confidence half-widths of
  the two means, ``sqrt(h_run² + h_base²)`` (a Welch-style interval, each side with its own
  t quantile, from a small table: no SciPy).  Otherwise a default band applies:
  :data:`DEFAULT_NOISE_BAND_PCT` for throughput, means and medians,
  :data:`TAIL_NOISE_BAND_PCT` for p99 latencies.
* **Interactivity** (the Pareto x axis) is ``1000 / TPOT median`` in tok/s/user: the
  decode speed a user sees while tokens stream, the definition the field's Pareto charts
  use.  ``output_throughput / achieved_concurrency`` would fold queueing and prefill into
  it and depends on a client-reported concurrency older records lack.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from domain.core.i18n import t

Direction = Literal["higher", "lower"] | None

POINT = ("scenario", "concurrency")

# Run-to-run spread of bench_serving on a warm server with a fixed seed and prompt set is
# typically 1–3 % for throughput and for mean/median latencies; ±3 % keeps such changes
# from reading as wins.  A p99 over a few hundred requests hangs on a handful of them and
# moves far more between identical runs, hence a wider band for the tails.
DEFAULT_NOISE_BAND_PCT = 3.0
TAIL_NOISE_BAND_PCT = 10.0

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
    name: str  # also the i18n key compare.metric.<name>
    column: str  # the points frame's column
    direction: Direction  # which way is better; None: neither (shown, never coloured)
    tail: bool = False  # a p99: noisier, wider default band


METRICS: tuple[Metric, ...] = (
    Metric("output_tok_s", "output_throughput", "higher"),
    Metric("total_tok_s", "total_throughput", "higher"),
    Metric("qps", "request_throughput", "higher"),
    Metric("ttft_p50", "ttft_median_ms", "lower"),
    Metric("ttft_p99", "ttft_p99_ms", "lower", tail=True),
    Metric("tpot_p50", "tpot_median_ms", "lower"),
    Metric("tpot_p99", "tpot_p99_ms", "lower", tail=True),
    Metric("itl_p50", "itl_median_ms", "lower"),
    Metric("itl_p99", "itl_p99_ms", "lower", tail=True),
    Metric("e2e_p50", "e2e_median_ms", "lower"),
    Metric("e2e_p99", "e2e_p99_ms", "lower", tail=True),
    # Utilisation and KV usage are neither good nor bad on their own (the seed's DP-attention
    # lesson: KV saved, throughput lost) — shown side by side, not coloured.
    Metric("gpu_util_mean", "gpu_util_mean", None),
    Metric("gpu_mem_peak_gb", "gpu_mem_peak_gb", None),
    Metric("kv_usage_peak", "kv_usage_peak", None),
    # More KV capacity means more requests fit before queueing: higher is better.
    Metric("kv_capacity", "max_total_num_tokens", "higher"),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}


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


# -- per-point summary ---------------------------------------------------------------------------


def summarise_points(frame: pd.DataFrame, metrics: Sequence[Metric] = METRICS) -> pd.DataFrame:
    """One row per (run, scenario, concurrency): run_id, scenario, concurrency, run_name,
    source, gpu_count (and gpus_used where the frame has it), repeats, and per metric
    ``<name>`` (mean over repeats) and ``<name>_ci`` (95 % half-width, NaN for fewer than two values)."""
    keys = ["run_id", *POINT]
    names = [m.name for m in metrics]
    numbers = frame[keys].copy()
    for metric in metrics:  # None (unknown) becomes NaN, so means skip it
        column = frame[metric.column] if metric.column in frame.columns else pd.Series(np.nan, index=frame.index)
        numbers[metric.name] = pd.to_numeric(column, errors="coerce").astype(float)
    grouped = numbers.groupby(keys, sort=True, dropna=False)
    # A group of one: pandas' mean sums one value and divides by 1, so the stored number comes back exactly.
    means, counts, stds = grouped[names].mean(), grouped[names].count(), grouped[names].std(ddof=1)
    quantiles = counts.map(lambda n: t_quantile_975(n - 1) if n >= 2 else math.nan)
    halves = (quantiles * stds / np.sqrt(counts)).add_suffix("_ci")
    described = ["run_name", "source", "gpu_count", *(["gpus_used"] if "gpus_used" in frame.columns else [])]
    info = frame.groupby(keys, sort=True, dropna=False)[described].first(skipna=False)
    info["repeats"] = grouped.size()
    interleaved = [c for name in names for c in (name, f"{name}_ci")]
    return pd.concat([info, means, halves], axis=1)[[*described, "repeats", *interleaved]].reset_index()


# -- deltas against the baseline -----------------------------------------------------------------

COMPARE_COLUMNS = (
    "scenario", "concurrency", "metric", "direction", "run_id", "run_name", "source", "repeats",
    "value", "ci", "baseline_value", "baseline_repeats", "delta_pct", "noise_pct", "noise_source", "verdict",
)


def compare_table(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int] | None = None,
                  metrics: Sequence[Metric] = METRICS) -> pd.DataFrame:
    """Long table, one row per (point, metric, run), columns :data:`COMPARE_COLUMNS`, ordered
    by scenario, concurrency, metric (as in ``metrics``) and run (baseline first).

    ``verdict``: 'baseline' (the baseline's own row), 'better' / 'worse' (outside the noise,
    by the metric's direction), 'same' (inside the noise: shown "≈"), 'changed' (outside the
    noise for a metric with no direction), 'n/a' (a side is missing).  The baseline's rows
    are included so a wide table can show its values."""
    wanted = list(dict.fromkeys(run_ids if run_ids is not None else frame["run_id"]))
    if baseline_run_id not in wanted:
        wanted.insert(0, baseline_run_id)
    summary = summarise_points(frame[frame["run_id"].isin(wanted)], metrics)
    long = pd.concat([_metric_rows(summary, m) for m in metrics], ignore_index=True)
    base = long[long["run_id"] == baseline_run_id][[*POINT, "metric", "value", "ci", "repeats"]].rename(
        columns={"value": "baseline_value", "ci": "baseline_ci", "repeats": "baseline_repeats"})
    table = long.merge(base, on=[*POINT, "metric"], how="left")
    table["baseline_repeats"] = table["baseline_repeats"].fillna(0).astype(int)
    _add_deltas(table, baseline_run_id)
    metric_order = {m.name: i for i, m in enumerate(metrics)}
    run_order = {run_id: i for i, run_id in enumerate(wanted)}
    order = pd.DataFrame({"s": table["scenario"].astype(str), "c": table["concurrency"],
                          "m": table["metric"].map(metric_order), "r": table["run_id"].map(run_order)})
    ordered = table.loc[order.sort_values(["s", "c", "m", "r"], kind="stable").index]
    return ordered[list(COMPARE_COLUMNS)].reset_index(drop=True)


def _metric_rows(summary: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    rows = summary[["run_id", "run_name", "source", *POINT, "repeats", metric.name, f"{metric.name}_ci"]]
    rows = rows.rename(columns={metric.name: "value", f"{metric.name}_ci": "ci"})
    return rows.assign(metric=metric.name, direction=metric.direction, tail=metric.tail)


def _add_deltas(table: pd.DataFrame, baseline_run_id: int) -> None:
    """Fills delta_pct, noise_pct, noise_source and verdict with the scalar rules below."""
    rows = zip(table["run_id"], table["value"], table["ci"], table["baseline_value"], table["baseline_ci"],
               table["direction"], table["tail"], strict=True)
    filled = [_delta_of(run_id == baseline_run_id, *rest) for run_id, *rest in rows]
    columns = ("delta_pct", "noise_pct", "noise_source", "verdict")
    for i, column in enumerate(columns):
        table[column] = [row[i] for row in filled]


def _delta_of(is_baseline: bool, value: float, ci: float, base: float, base_ci: float, direction: object,
              tail: object) -> tuple[float, float, str | None, str]:
    if is_baseline:
        return math.nan, math.nan, None, "baseline"
    if is_missing(base):
        return math.nan, math.nan, None, "n/a"
    delta = delta_pct(value, base)
    noise, source = noise_band_pct(base, ci, base_ci, tail=bool(tail))
    return delta, noise, source, verdict(delta, noise, direction)


def delta_pct(value: float, baseline: float) -> float:
    """(value − baseline) / |baseline| in %; NaN when either is missing or the baseline is 0."""
    if is_missing(value) or is_missing(baseline) or baseline == 0:
        return math.nan
    return (value - baseline) / abs(baseline) * 100.0


def noise_band_pct(baseline: float, ci: float, baseline_ci: float, *, tail: bool) -> tuple[float, str]:
    """The half-width (in % of the baseline) within which a delta is noise, and its source:
    'repeats' when both sides have a confidence interval, else 'default' (wider for a p99)."""
    if not is_missing(ci) and not is_missing(baseline_ci) and not is_missing(baseline) and baseline != 0:
        return math.hypot(ci, baseline_ci) / abs(baseline) * 100.0, "repeats"
    return (TAIL_NOISE_BAND_PCT if tail else DEFAULT_NOISE_BAND_PCT), "default"


def verdict(delta: float, noise: float, direction: object) -> str:
    if is_missing(delta):
        return "n/a"
    if abs(delta) <= noise:
        return "same"
    if direction not in ("higher", "lower"):  # None, or NaN after a frame round trip
        return "changed"
    return "better" if (delta > 0) == (direction == "higher") else "worse"


def delta_text(delta: float, verdict_: str) -> str:
    """How a delta is shown: "≈" inside the noise, "+12.3%" outside, "" when there is none."""
    if verdict_ == "same":
        return "≈"
    if verdict_ in ("n/a", "baseline") or is_missing(delta):
        return ""
    return f"{delta:+.1f}%"


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
    delta text ("≈" inside the noise).  Values stay unrounded numbers."""
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
                    [delta_text(d, v) for d, v in zip(values["delta_pct"], values["verdict"], strict=True)],
                    index=values.index)
    table = pd.DataFrame(columns)
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    table.index.names = [t("compare.col.scenario", lang), t("compare.col.concurrency", lang)]
    return table


# -- saturation and scaling ------------------------------------------------------------------------

DEFAULT_SATURATION_GAIN_PCT = 10.0  # below +10 % throughput per doubling of concurrency
DEFAULT_THROUGHPUT_METRIC = "output_tok_s"
SATURATION_COLUMNS = ("run_id", "scenario", "concurrency", "rule", "knee_concurrency", "sla_break_concurrency")


def gain_per_doubling(c1: float, thr1: float, c2: float, thr2: float) -> float:
    """Throughput gain per doubling between two points: (thr2/thr1)^(1/log2(c2/c1)) − 1."""
    return float((thr2 / thr1) ** (1.0 / math.log2(c2 / c1)) - 1.0)


def saturation_points(summary: pd.DataFrame, *, gain_threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT,
                      throughput_metric: str = DEFAULT_THROUGHPUT_METRIC, sla_metric: str | None = None,
                      sla_threshold_ms: float | None = None) -> pd.DataFrame:
    """Per (run, scenario), from :func:`summarise_points` output (columns :data:`SATURATION_COLUMNS`).

    * knee: the smallest concurrency after which every step's gain per doubling is below
      ``gain_threshold_pct`` (None when the last step still gains that much);
    * SLA break: the first concurrency whose ``sla_metric`` (a metric name such as
      'ttft_p99') exceeds ``sla_threshold_ms`` (rule off when either is None).

    ``concurrency`` is the smaller of the two and ``rule`` says which fired:
    'throughput_gain', 'latency_sla', 'both' (same point) or None (not saturated)."""
    records = []
    for (run_id, scenario), rows in summary.groupby(["run_id", "scenario"], sort=False):
        rows = rows.sort_values("concurrency")
        knee = _knee(list(rows["concurrency"]), list(rows[throughput_metric]), gain_threshold_pct)
        sla = None
        if sla_metric is not None and sla_threshold_ms is not None:
            sla = _sla_break(list(rows["concurrency"]), list(rows[sla_metric]), sla_threshold_ms)
        records.append((run_id, scenario, *_pick_rule(knee, sla), knee, sla))
    return pd.DataFrame.from_records(records, columns=list(SATURATION_COLUMNS))


def rule_text(saturation_row: pd.Series, lang: str, *, gain_threshold_pct: float = DEFAULT_SATURATION_GAIN_PCT,
              sla_metric: str | None = None, sla_threshold_ms: float | None = None) -> str:
    """Which rule fired for a row of :func:`saturation_points`, in words, with its setting."""
    rule = saturation_row["rule"]
    if rule is None or is_missing(rule):
        return t("compare.rule.none", lang)
    if rule == "throughput_gain":
        return t("compare.rule.throughput_gain", lang, pct=f"{gain_threshold_pct:g}")
    if rule == "latency_sla":
        metric = metric_label(sla_metric, lang) if sla_metric else "?"
        return t("compare.rule.latency_sla", lang, metric=metric, ms=f"{sla_threshold_ms:g}")
    return t("compare.rule.both", lang)


def _knee(concurrency: list, throughput: list, threshold_pct: float) -> float | None:
    points = [(c, thr) for c, thr in zip(concurrency, throughput, strict=True) if not is_missing(thr) and thr > 0]
    knee = None
    for (c1, thr1), (c2, thr2) in itertools.pairwise(points):
        if gain_per_doubling(c1, thr1, c2, thr2) * 100.0 < threshold_pct:
            knee = c1 if knee is None else knee
        else:
            knee = None  # gains resumed: the earlier flat step was not the knee
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


SCALING_COLUMNS = ("run_id", "scenario", "concurrency", "throughput", "speedup", "ideal_speedup", "efficiency")


def scaling_efficiency(summary: pd.DataFrame, throughput_metric: str = DEFAULT_THROUGHPUT_METRIC) -> pd.DataFrame:
    """efficiency(c) = (thr(c)/thr(c0)) / (c/c0), c0 the lowest measured concurrency of each
    (run, scenario); 1.0 is perfectly linear scaling.  Columns :data:`SCALING_COLUMNS`."""
    records = []
    for (run_id, scenario), rows in summary.groupby(["run_id", "scenario"], sort=False):
        rows = rows.sort_values("concurrency")
        c0, thr0 = rows["concurrency"].iloc[0], rows[throughput_metric].iloc[0]
        for c, thr in zip(rows["concurrency"], rows[throughput_metric], strict=True):
            speedup = thr / thr0 if thr0 else math.nan
            records.append((run_id, scenario, c, thr, speedup, c / c0, speedup / (c / c0)))
    return pd.DataFrame.from_records(records, columns=list(SCALING_COLUMNS))


# -- Pareto --------------------------------------------------------------------------------------

PARETO_COLUMNS = ("run_id", "run_name", "source", "scenario", "concurrency", "interactivity", "throughput_per_gpu",
                  "on_frontier")


def pareto_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput per GPU (output tok/s ÷ ``gpus_used``, the GPUs the topology uses, else
    ÷ gpu_count) against interactivity (1000 / TPOT median, tok/s/user), with
    ``on_frontier`` marking the points no other point of the same scenario beats on both
    axes.  Points lacking either value are kept, never on the frontier."""
    table = summary[["run_id", "run_name", "source", "scenario", "concurrency"]].copy()
    tpot = pd.to_numeric(summary["tpot_p50"], errors="coerce")
    gpus = pd.to_numeric(summary["gpus_used" if "gpus_used" in summary.columns else "gpu_count"], errors="coerce")
    table["interactivity"] = 1000.0 / tpot.where(tpot > 0)
    table["throughput_per_gpu"] = pd.to_numeric(summary["output_tok_s"], errors="coerce") / gpus.where(gpus > 0)
    table["on_frontier"] = False
    for _, rows in table.groupby("scenario", sort=False):
        table.loc[_frontier_index(rows), "on_frontier"] = True
    return table[list(PARETO_COLUMNS)]


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
