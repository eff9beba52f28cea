"""One number per curve, for a reader who will not read a Pareto chart: the output tok/s per
GPU a run reaches at a stated interactivity (tok/s/user), read off its measured curve with a
95 % interval, and the area under that curve.

The curve of a (run, scenario) is its points in the Pareto view (:func:`domain.results.curve.
pareto_points`: x = interactivity, 1000 / TPOT p50; y = output tok/s ÷ GPUs), reduced to its
own front (a point another point of the same curve beats on both axes is not on the curve a
user can choose from) and ordered by x.

* **At a stated interactivity** x*: linear interpolation between the two front points that
  bracket x*.  Never extrapolated: outside the measured range the number is not made and the
  range is said instead.  Its half-width combines the two points' throughput half-widths
  (weights (1 − w) and w, independent points) and the interactivity's own, carried through the
  segment's slope (x's half-width from the TPOT interval, 1000·h / TPOT², interpolated alike),
  in quadrature.  Where a point it rests on has no interval (one repeat without per-request
  data), the value is given and said to have none.
* **Area under the curve**: the trapezoid integral of y over x along the front, in
  (tok/s/GPU)·(tok/s/user), over a stated interactivity range.  Curves are compared over one
  range, the one all of them measured (the intersection), each end interpolated as above;
  alone, a curve's own measured range.  A curve that does not cover the range has none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.results.analysis import run_label
from domain.results.curve import pareto_points

DEFAULT_INTERACTIVITY = 50.0  # tok/s/user (a 20 ms TPOT): BENCHDECK_INTERACTIVITY_TARGET's default


@dataclass(frozen=True)
class Curve:
    """One (run, scenario)'s front, ordered by interactivity, with each point's half-widths."""

    x: np.ndarray  # interactivity, tok/s/user
    y: np.ndarray  # output tok/s per GPU
    x_ci: np.ndarray
    y_ci: np.ndarray

    @property
    def span(self) -> tuple[float, float]:
        return float(self.x[0]), float(self.x[-1])


@dataclass(frozen=True)
class CurveNumber:
    """The one number of a (run, scenario) curve and its area, or why there is none."""

    run_id: int
    scenario: object
    label: str
    target: float
    value: float | None  # tok/s/GPU at ``target`` tok/s/user
    half_width: float | None
    span: tuple[float, float] | None  # the curve's measured interactivity range
    area: float | None
    area_range: tuple[float, float] | None


def curve_of(rows: pd.DataFrame, summary_rows: pd.DataFrame, tpot_metric: str = "tpot_p50") -> Curve | None:
    """The front of one curve's Pareto rows (``on_frontier`` is per scenario across runs, so
    the run's own front is recomputed here) with half-widths from its summary rows."""
    columns = ["concurrency", "output_tok_s", "output_tok_s_ci", tpot_metric, f"{tpot_metric}_ci"]
    merged = rows.merge(summary_rows[columns], on="concurrency", how="left")
    merged = merged.dropna(subset=["interactivity", "throughput_per_gpu"])
    if merged.empty:
        return None
    per_gpu = merged["throughput_per_gpu"] / _positive(merged["output_tok_s"])  # 1 / the GPUs it divided by
    y_ci = pd.to_numeric(merged["output_tok_s_ci"], errors="coerce") * per_gpu  # NaN: no interval
    tpot = pd.to_numeric(merged[tpot_metric], errors="coerce")
    x_ci = 1000.0 * pd.to_numeric(merged[f"{tpot_metric}_ci"], errors="coerce") / tpot ** 2
    front = _own_front(merged["interactivity"].to_numpy(float), merged["throughput_per_gpu"].to_numpy(float))
    order = front[np.argsort(merged["interactivity"].to_numpy(float)[front])]
    return Curve(merged["interactivity"].to_numpy(float)[order], merged["throughput_per_gpu"].to_numpy(float)[order],
                 x_ci.to_numpy(float)[order], y_ci.to_numpy(float)[order])


def _positive(values: pd.Series) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.where(numbers > 0)


def _own_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indexes of the points no other point beats on both axes (ties kept)."""
    beaten = [((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))).any() for i in range(len(x))]
    return np.flatnonzero(~np.array(beaten, dtype=bool))


def value_at(curve: Curve, target: float) -> tuple[float, float] | None:
    """(tok/s/GPU, its 95 % half-width) at ``target`` tok/s/user; None outside the curve.
    The half-width is NaN when a point it rests on has no interval (one repeat without
    per-request data): the value is then given without one, never with a made-up ± 0."""
    low, high = curve.span
    if not low <= target <= high:
        return None
    if len(curve.x) == 1:
        return float(curve.y[0]), float(curve.y_ci[0])
    right = min(max(int(np.searchsorted(curve.x, target)), 1), len(curve.x) - 1)
    left = right - 1
    dx = curve.x[right] - curve.x[left]
    w = 0.0 if dx == 0 else float((target - curve.x[left]) / dx)
    value = (1 - w) * curve.y[left] + w * curve.y[right]
    slope = 0.0 if dx == 0 else float((curve.y[right] - curve.y[left]) / dx)
    used = [(weight, i) for weight, i in ((1 - w, left), (w, right)) if weight > 0]
    x_half = sum(weight * curve.x_ci[i] for weight, i in used)
    half = math.sqrt(sum((weight * curve.y_ci[i]) ** 2 for weight, i in used) + (slope * x_half) ** 2)
    return float(value), float(half)


def area_under(curve: Curve, low: float, high: float) -> float | None:
    """The trapezoid integral of the curve over [low, high]; None unless it covers the range."""
    ends = (value_at(curve, low), value_at(curve, high))
    if ends[0] is None or ends[1] is None or high < low:
        return None
    inside = (curve.x > low) & (curve.x < high)
    x = np.concatenate([[low], curve.x[inside], [high]])
    y = np.concatenate([[ends[0][0]], curve.y[inside], [ends[1][0]]])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def curve_numbers(summary: pd.DataFrame, lang: str, target: float = DEFAULT_INTERACTIVITY,
                  tpot_metric: str = "tpot_p50") -> list[CurveNumber]:
    """Every (run, scenario) curve's number at ``target`` and its area over the range all
    curves of the scenario measured (their intersection)."""
    pareto = pareto_points(summary, tpot_metric=tpot_metric)
    curves = {}
    for (run_id, scenario), rows in pareto.groupby(["run_id", "scenario"], sort=False):
        of_summary = summary[(summary["run_id"] == run_id) & (summary["scenario"] == scenario)]
        curves[(run_id, scenario)] = (rows.iloc[0], curve_of(rows, of_summary, tpot_metric))
    ranges = _common_ranges((key[1], curve) for key, (_, curve) in curves.items())
    return [_number(first, curve, target, ranges.get(key[1]), lang) for key, (first, curve) in curves.items()]


def _common_ranges(curves: Iterable[tuple[object, Curve | None]]) -> dict[object, tuple[float, float]]:
    ranges: dict[object, tuple[float, float]] = {}
    for scenario, curve in curves:
        if curve is None:
            continue
        low, high = curve.span
        known = ranges.get(scenario, (low, high))
        ranges[scenario] = (max(known[0], low), min(known[1], high))
    return {scenario: span for scenario, span in ranges.items() if span[0] < span[1]}


def _number(first: pd.Series, curve: Curve | None, target: float, common: tuple[float, float] | None,
            lang: str) -> CurveNumber:
    label = run_label(first["run_id"], first["run_name"], first["source"], lang)
    at = value_at(curve, target) if curve is not None else None
    area = area_under(curve, *common) if curve is not None and common is not None else None
    half = None if at is None or math.isnan(at[1]) else at[1]
    return CurveNumber(int(first["run_id"]), first["scenario"], label, target, None if at is None else at[0],
                       half, None if curve is None else curve.span, area, common if area is not None else None)


def number_line(number: CurveNumber, lang: str) -> str:
    """The number in one sentence: the value with its interval at the target, then the area
    with its range; or why there is no value (the curve's measured range, or no curve)."""
    head = t("curve_number.head", lang, run=number.label, scenario=number.scenario)
    if number.value is not None and number.half_width is not None:
        value = t("curve_number.value", lang, value=f"{number.value:,.1f}", half=f"{number.half_width:,.1f}",
                  target=f"{number.target:g}")
    elif number.value is not None:
        value = t("curve_number.value_no_interval", lang, value=f"{number.value:,.1f}", target=f"{number.target:g}")
    elif number.span is not None:
        value = t("curve_number.outside", lang, target=f"{number.target:g}", low=f"{number.span[0]:,.1f}",
                  high=f"{number.span[1]:,.1f}")
    else:
        value = t("curve_number.no_curve", lang)
    if number.area is None or number.area_range is None:
        return f"{head}: {value}"
    area = t("curve_number.area", lang, area=f"{number.area:,.0f}", low=f"{number.area_range[0]:,.1f}",
             high=f"{number.area_range[1]:,.1f}")
    return f"{head}: {value}; {area}"
