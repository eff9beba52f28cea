"""A watched configuration's baseline that knows its noise, and the verdict of each re-run.

Issue 19, after vLLM's performance dashboard (a rolling baseline; "suspicious" on a first
violation, "regression" only after two in a row) with what benchdeck adds: repeats, and
the comparability checklist.

For one watched point (scenario, concurrency) and one metric:

* a run's **value** is the median of the point's repeats, its **spread** their max − min;
* the **baseline** is the median of the values of the last N comparable measurements of the
  series (:attr:`WatchThresholds.baseline_runs`, default 3), its **band** that median ± the
  largest spread of their repeats (the noise the repeats showed);
* a value is a **violation** when it lies outside the band *and* its relative change passes
  the metric's threshold (10 % by default for throughput and for p99 latency) in one
  direction; the first violation is ``suspicious``, a second one in a row in the same
  direction ``regression`` (slower) or ``improvement`` (faster).  A confirmed shift becomes
  the new level: the baseline then starts from the two measurements that confirmed it.
  A suspicious measurement never joins the baseline on its own;
* a **series** holds only comparable measurements (domain/compare/comparability.py): a
  re-run whose conditions differ from the previous one's beyond what a version change is
  expected to change (the engine version, the bench client's version that ships with it,
  the translated flags) starts a new series, and the differing conditions say why.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from domain.compare.comparability import POINTS_CONDITION, comparability_matrix, comparability_summary
from domain.compare.flag_sets import condition_flag
from domain.compare.values import MISSING_TEXT

Verdict = Literal["baseline", "ok", "suspicious", "regression", "improvement"]
Direction = Literal["higher", "lower"]

# The metrics a watch follows and which way is better.  Output throughput (tokens/s, what a
# deployment sells) and the p99 of end-to-end request latency (the tail a user waits for).
WATCH_METRICS: dict[str, Direction] = {"output_throughput": "higher", "e2e_p99_ms": "lower"}
# Order of severity, for a run's overall verdict over its points and metrics.
SEVERITY: tuple[Verdict, ...] = ("baseline", "ok", "improvement", "suspicious", "regression")
# What a change of SGLang version is expected to change: these never break a series.
VERSION_CONDITIONS = frozenset({"engine_version", "bench_version"})


@dataclass(frozen=True)
class WatchThresholds:
    """How the baseline is built and when a change counts (settings ``watch_*``)."""

    baseline_runs: int = 3
    throughput: float = 0.10
    latency: float = 0.10

    @classmethod
    def from_settings(cls, settings: Any) -> WatchThresholds:
        # getattr: the three settings are added to domain/core/settings.py with this module;
        # a Settings object without them keeps the defaults.
        return cls(
            baseline_runs=int(getattr(settings, "watch_baseline_runs", cls.baseline_runs)),
            throughput=float(getattr(settings, "watch_throughput_threshold", cls.throughput)),
            latency=float(getattr(settings, "watch_latency_threshold", cls.latency)),
        )

    def threshold(self, metric: str) -> float:
        return self.throughput if WATCH_METRICS[metric] == "higher" else self.latency


@dataclass(frozen=True)
class Repeats:
    """One run's repeats of one point and metric, summarised."""

    value: float | None  # median of the repeats; None when none measured it
    repeats: int
    spread: float | None  # max - min; None with fewer than two repeats


def summarise_repeats(values: Sequence[float | None]) -> Repeats:
    known = [float(v) for v in values if v is not None and pd.notna(v)]
    if not known:
        return Repeats(None, 0, None)
    spread = max(known) - min(known) if len(known) > 1 else None
    return Repeats(statistics.median(known), len(known), spread)


@dataclass(frozen=True)
class Measurement:
    """A measurement already in the series, with the verdict it got when it came in."""

    run_id: int
    value: float | None
    spread: float | None
    verdict: Verdict
    change: float | None = None


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    baseline: float | None
    band_low: float | None
    band_high: float | None
    change: float | None
    baseline_runs: tuple[int, ...]


def baseline_pool(history: Sequence[Measurement], n: int) -> list[Measurement]:
    """The last ``n`` measurements the baseline is built from (oldest first in ``history``):
    ordinary ones, or the pair that confirmed a shift and what followed it; a suspicious
    measurement waits until the next one confirms or dismisses it."""
    pool: list[Measurement] = []
    pending: list[Measurement] = []
    for m in history:
        if m.value is None:
            continue
        if m.verdict == "suspicious":
            pending.append(m)
        elif m.verdict in ("regression", "improvement"):
            pool, pending = [*pending[-1:], m], []
        else:
            pool.append(m)
            pending = []
    return pool[-n:] if n > 0 else []


def _worse(metric: str, change: float) -> bool:
    return change < 0 if WATCH_METRICS[metric] == "higher" else change > 0


def judge(history: Sequence[Measurement], new: Repeats, metric: str, thresholds: WatchThresholds) -> Judgement:
    """The verdict of a new measurement against the series so far (oldest first)."""
    pool = baseline_pool(history, thresholds.baseline_runs)
    if new.value is None or not pool:
        return Judgement("baseline", None, None, None, None, tuple(m.run_id for m in pool))
    base = statistics.median(m.value for m in pool if m.value is not None)
    noise = max((m.spread for m in pool if m.spread is not None), default=0.0)
    low, high = base - noise, base + noise
    change = (new.value - base) / base if base else None
    runs = tuple(m.run_id for m in pool)
    outside = new.value < low or new.value > high
    if change is None or not outside or abs(change) <= thresholds.threshold(metric):
        return Judgement("ok", base, low, high, change, runs)
    worse = _worse(metric, change)
    previous = next((m for m in reversed(history) if m.value is not None), None)
    confirmed = (previous is not None and previous.verdict == "suspicious" and previous.change is not None
                 and _worse(metric, previous.change) == worse)
    verdict: Verdict = ("regression" if worse else "improvement") if confirmed else "suspicious"
    return Judgement(verdict, base, low, high, change, runs)


def overall(verdicts: Sequence[str]) -> Verdict:
    """A run's verdict over its points and metrics: the most severe one."""
    ranked = [v for v in SEVERITY if v in set(verdicts)]
    return ranked[-1] if ranked else "baseline"


def series_break(frame: pd.DataFrame, previous_run: int, new_run: int) -> dict[str, tuple[str, str]] | None:
    """Why ``new_run`` cannot continue the series of ``previous_run`` (both in the points
    frame of domain/results/frames.py): each condition that differs or is fatally unknown,
    with both values as the checklist shows them; None when it continues it.  The
    engine's version and the flags are what a watch follows, so they never break it."""
    matrix = comparability_matrix(frame, previous_run, [new_run])
    summary = comparability_summary(matrix).iloc[0]
    values: Mapping[str, tuple[str, str]] = summary["values"]
    fatal = [n for n in summary["fatal"] if _breaks(n)]
    # A different set of points (a re-run that stopped early) only matters when none is shared.
    differing = [n for n in summary["differing"] if _breaks(n) and n != POINTS_CONDITION]
    breaking = {n: values.get(n, (MISSING_TEXT, MISSING_TEXT)) for n in dict.fromkeys([*fatal, *differing])}
    return breaking or None


def _breaks(condition: str) -> bool:
    return condition not in VERSION_CONDITIONS and condition_flag(condition) is None
