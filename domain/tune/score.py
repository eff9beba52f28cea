"""A trial's score: the study's objective over the measured points, and whether it met the SLA.

Input is one run's points frame (domain/results/frames.points_frame: ``scenario``,
``concurrency``, ``repeat_idx``, ``ttft_p99_ms``, ``tpot_p99_ms``, ``output_throughput``,
``request_throughput``, ``duration_s``, ``point_id``).  The points that count are those
at the SLA's concurrencies (every concurrency when the SLA names none); repeats of a point
are averaged.

- **output tok/s per GPU**: the mean over the counted points of output tok/s ÷ the base
  plan's GPU count; the trial is feasible when no counted point breaks the SLA.
- **goodput**: requests per second that met every SLA limit (AIPerf's rule,
  domain/results/curve.py ``good_requests``), per point from its per-request samples when
  they are given; a point without samples counts its whole request rate when its
  aggregate p99s meet the SLA and nothing when they do not (``TrialScore.basis`` says which
  was used).  Mean over the counted points; feasible when above zero.
- **max concurrency under SLA**: the SLA margin of each concurrency (the smallest of
  ``(limit − p99) / limit`` over the limits and scenarios) is fitted by a non-increasing
  curve (pool-adjacent-violators, the monotone fit vLLM's ``serve_sla`` uses) and the
  concurrency where the fit crosses zero is interpolated between the last passing and the
  first failing concurrency.  A sweep that passes everywhere scores its highest
  concurrency (a lower bound); one that fails at its lowest scores nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.results.curve import good_requests
from domain.tune.study import Objective, Sla, Study

Basis = Literal["aggregate", "requests", "mixed", "none"]
_LIMITS = (("ttft", "ttft_p99_ms", "TTFT"), ("tpot", "tpot_p99_ms", "TPOT"))


@dataclass(frozen=True)
class TrialScore:
    value: float | None
    feasible: bool
    violations: tuple[str, ...]
    max_concurrency: float | None
    basis: Basis = "aggregate"  # goodput: from per-request samples, aggregate p99s, or both
    miss: float = 0.0  # how far the worst counted point is over its limit, as a fraction of it


def _limits(sla: Sla) -> list[tuple[str, float, str]]:
    """(column, limit ms, label) for each limit the SLA sets."""
    values = {"ttft": sla.ttft_p99_ms, "tpot": sla.tpot_p99_ms}
    return [(column, limit, label) for key, column, label in _LIMITS if (limit := values[key]) is not None]


_FIGURES = ("ttft_p99_ms", "tpot_p99_ms", "output_throughput", "request_throughput", "duration_s")


@dataclass(frozen=True)
class PointFigures:
    """One counted (scenario, concurrency): its figures averaged over repeats (NaN: unknown)."""

    scenario: str
    concurrency: int
    figures: Mapping[str, float]

    def get(self, column: str) -> float:
        return self.figures.get(column, math.nan)


def _floats(column: pd.Series) -> np.ndarray:
    if pd.api.types.is_float_dtype(column.dtype):
        return column.to_numpy(dtype=float)
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)


def counted_points(points: pd.DataFrame, sla: Sla) -> list[PointFigures]:
    """The points the SLA speaks about, one per (scenario, concurrency), repeats averaged.
    (Plain Python over numpy columns: a run has tens of points, where pandas' group-by costs
    milliseconds per call and a search scores thousands of trials.)"""
    if points.empty:
        return []
    wanted = set(sla.concurrencies) if sla.concurrencies is not None else None
    columns = [c for c in _FIGURES if c in points.columns]
    values = {c: _floats(points[c]) for c in columns}
    scenarios, concurrencies = points["scenario"].to_numpy(), points["concurrency"].to_numpy()
    sums: dict[tuple[str, int], dict[str, list[float]]] = {}
    for i, (scenario, concurrency) in enumerate(zip(scenarios, concurrencies, strict=True)):
        if wanted is not None and int(concurrency) not in wanted:
            continue
        figures = sums.setdefault((str(scenario), int(concurrency)), {c: [] for c in columns})
        for column in columns:
            figures[column].append(float(values[column][i]))
    return [PointFigures(scenario, concurrency, {c: statistics.fmean(v) for c, v in figures.items()})
            for (scenario, concurrency), figures in sorted(sums.items())]


def _violations(table: Sequence[PointFigures], sla: Sla, lang: str = "en") -> list[str]:
    out = []
    for point in table:
        for column, limit, label in _limits(sla):
            measured = point.get(column)
            if not measured <= limit:  # NaN fails
                shown = (t("tune_domain.missing", lang) if math.isnan(measured)
                         else t("tune_domain.measured_ms", lang, value=f"{measured:.0f}"))
                out.append(t("tune_domain.violation", lang, scenario=point.scenario, concurrency=point.concurrency,
                             metric=label, measured=shown, limit=f"{limit:g}"))
    return out


def sla_violations(points: pd.DataFrame, sla: Sla, lang: str = "en") -> list[str]:
    """One line per counted point and limit it breaks (a missing value breaks it too), in
    ``lang`` (English by default: what Optuna's trial attributes keep): non-empty means the
    trial cannot meet the SLA, so its remaining points can be skipped."""
    return _violations(counted_points(points, sla), sla, lang)


def _miss(table: Sequence[PointFigures], sla: Sla) -> float:
    worst = 0.0
    for point in table:
        for column, limit, _ in _limits(sla):
            measured = point.get(column)
            worst = max(worst, 1.0 if math.isnan(measured) else (measured - limit) / limit)
    return worst


def miss_amount(points: pd.DataFrame, sla: Sla) -> float:
    """How far the worst counted point is over its SLA limit, as a fraction of the limit
    (1 for a missing value; 0 when every point meets the SLA)."""
    return _miss(counted_points(points, sla), sla)


def _margin(point: PointFigures, sla: Sla) -> float:
    margins = [(limit - point.get(column)) / limit for column, limit, _ in _limits(sla)]
    return min((m for m in margins if not math.isnan(m)), default=-math.inf)


def _margins(table: Sequence[PointFigures], sla: Sla) -> list[tuple[int, float]]:
    worst: dict[int, float] = {}
    for point in table:
        worst[point.concurrency] = min(worst.get(point.concurrency, math.inf), _margin(point, sla))
    return sorted(worst.items())


def concurrency_margins(points: pd.DataFrame, sla: Sla) -> list[tuple[int, float]]:
    """(concurrency, SLA margin) with the margin the worst over the scenarios; > 0 passes."""
    return _margins(counted_points(points, sla), sla)


def _non_increasing(values: Sequence[float]) -> list[float]:
    """The closest non-increasing sequence in least squares (pool-adjacent-violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for value in values:
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(int(count))]


def max_concurrency_under_sla(margins: Sequence[tuple[int, float]]) -> float | None:
    """The concurrency where the monotone fit of the margins crosses zero, interpolated
    between the last passing and the first failing concurrency; the highest concurrency
    when all pass; None when the lowest already fails (or there is nothing)."""
    ordered = sorted((c, m) for c, m in margins if not math.isnan(m))
    if not ordered:
        return None
    finite = [max(m, -1e9) for _, m in ordered]  # a missing value (−inf) still pools
    fitted = _non_increasing(finite)
    concurrencies = [c for c, _ in ordered]
    if fitted[0] < 0:
        return None
    for i in range(1, len(fitted)):
        if fitted[i] < 0:
            c0, c1, m0, m1 = concurrencies[i - 1], concurrencies[i], fitted[i - 1], fitted[i]
            return c0 + (c1 - c0) * m0 / (m0 - m1)
    return float(concurrencies[-1])


def next_concurrency(results: Mapping[int, bool], low: int, high: int, *, resolution: int = 1) -> int | None:
    """The next concurrency a bisection on [low, high] measures, given which concurrencies
    passed the SLA so far; None when the boundary is found to ``resolution`` (or the lowest
    fails, or the highest passes)."""
    failing = [c for c, ok in results.items() if not ok]
    hi = min(failing) if failing else None
    passing = [c for c, ok in results.items() if ok and (hi is None or c < hi)]
    lo = max(passing) if passing else None
    if lo is None:
        return low if low not in results else None
    if hi is None:
        return high if high not in results else None
    if hi - lo <= resolution:
        return None
    mid = (lo + hi) // 2
    return mid if mid not in results else None


def _good_rate(row: pd.Series, samples: pd.DataFrame | None, sla: Sla) -> float:
    if samples is not None and float(row.get("duration_s") or 0) > 0:
        good = good_requests(samples, sla.ttft_p99_ms, sla.tpot_p99_ms)
        return float(good.sum()) / float(row["duration_s"])
    meets = all(float(row.get(column, math.nan)) <= limit for column, limit, _ in _limits(sla))
    return float(row.get("request_throughput") or 0.0) if meets else 0.0


def goodput(points: pd.DataFrame, sla: Sla, requests: Mapping[int, pd.DataFrame] | None = None
            ) -> tuple[float | None, Basis]:
    """Mean good requests/s over the counted points (repeats averaged), and the basis used."""
    rows = points if sla.concurrencies is None else points[points["concurrency"].isin(sla.concurrencies)]
    if rows.empty:
        return None, "none"
    rates, bases = [], set()
    for _, row in rows.iterrows():
        point_id = row.get("point_id")
        samples = requests.get(int(point_id)) if requests and point_id is not None and not pd.isna(point_id) else None
        bases.add("requests" if samples is not None else "aggregate")
        rates.append((row["scenario"], row["concurrency"], _good_rate(row, samples, sla)))
    per_point = pd.DataFrame(rates, columns=["scenario", "concurrency", "rate"]).groupby(
        ["scenario", "concurrency"])["rate"].mean()
    basis: Basis = "mixed" if len(bases) > 1 else bases.pop()  # type: ignore[assignment]
    return float(per_point.mean()), basis


def score_points(points: pd.DataFrame, study: Study, requests: Mapping[int, pd.DataFrame] | None = None
                 ) -> TrialScore:
    """The study's objective for one run's points (``requests``: per-request samples by
    ``point_id``, used for goodput when given)."""
    sla = study.sla
    table = counted_points(points, sla)
    if not table:
        return TrialScore(None, False, ("no measured points",), None, "none")
    violations = tuple(_violations(table, sla)) if sla.limited else ()
    max_c = max_concurrency_under_sla(_margins(table, sla)) if sla.limited else None
    miss = _miss(table, sla) if sla.limited else 0.0
    if study.objective == Objective.GOODPUT:
        value, basis = goodput(points, sla, requests)
        return TrialScore(value, value is not None and value > 0, violations, max_c, basis, miss)
    if study.objective == Objective.MAX_CONCURRENCY:
        return TrialScore(max_c, max_c is not None, violations, max_c, miss=miss)
    per_gpu = [p.get("output_throughput") / study.base_plan.gpu.count for p in table]
    known = [v for v in per_gpu if not math.isnan(v)]
    value = statistics.fmean(known) if known else None
    return TrialScore(value, value is not None and not violations, violations, max_c, miss=miss)
