"""The quality row of each compared run, beside its speed delta (issue 42): the compare
page, the checklist and every export (their first lines, ``tables.export_head``) show it.

A run that is faster and whose quality *changed* is a trade-off, never a plain
improvement: its row says so with the seed's rule-risk sentence.  A run whose speculative
acceptance was pinned (``SGLANG_SIMULATE_ACC_LEN``) says so in its row, measured or not.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from domain.core.i18n import t
from domain.results.quality import QualityResult

SPEED_METRIC = "output_tok_s"


@dataclass(frozen=True)
class QualityRow:
    run_id: int
    verdict: str  # same | changed | cannot_tell | not_measured
    trade_off: bool  # faster (outside the noise) and changed
    line: str
    pinned: str | None = None  # the pinned acceptance's label (PinnedAcceptance.label)


def speed_change(compare: pd.DataFrame, run_id: int) -> tuple[float | None, bool]:
    """(median Δ% of output tok/s over the points shared with the baseline, whether some
    point is faster outside the noise)."""
    rows = compare[(compare["run_id"] == run_id) & (compare["metric"] == SPEED_METRIC)]
    deltas = [float(d) for d in rows["delta_pct"] if pd.notna(d)]
    if not deltas:
        return None, False
    median = statistics.median(deltas)
    return median, median > 0 and bool((rows["verdict"] == "better").any())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _figures(result: QualityResult, lang: str) -> str:
    if result.verdict == "not_measured" or result.exact_match is None:
        return result.reason
    floor = result.floor or {}
    text = t("quality.row.figures", lang, exact=_pct(result.exact_match), floor=_pct(floor.get("exact_match")),
             dlogprob="-" if result.mean_abs_dlogprob is None else f"{result.mean_abs_dlogprob:.4f}",
             method=result.dlogprob_method or "-")
    if result.accuracy is not None:
        acc = result.accuracy
        text += t("quality.row.accuracy", lang, accuracy=_pct(acc["estimate"]), low=_pct(acc["low"]),
                  high=_pct(acc["high"]), n=acc["n"])
    diff = result.accuracy_difference
    if diff is not None:
        text += t("quality.row.paired", lang, diff=f"{100 * diff['difference_estimate']:+.1f}",
                  low=f"{100 * diff['difference_low']:+.1f}", high=f"{100 * diff['difference_high']:+.1f}",
                  p=f"{diff['mcnemar_p']:.3g}")
    return text


def quality_row(result: QualityResult, speed: tuple[float | None, bool], lang: str,
                pinned: str | None = None) -> QualityRow:
    delta, faster = speed
    trade_off = faster and result.verdict == "changed"
    line = t("quality.row.line", lang, run=result.run_id, verdict=t(f"quality.verdict.{result.verdict}", lang),
             figures=_figures(result, lang),
             speed="-" if delta is None else f"{delta:+.1f}%")
    if trade_off:
        line += t("quality.row.trade_off", lang)
    if pinned:
        line += t("quality.row.pinned", lang, pinned=pinned)
    if result.emulated:
        line += t("quality.emulated", lang)
    return QualityRow(result.run_id, result.verdict, trade_off, line, pinned)


def quality_rows(compare: pd.DataFrame, results: Sequence[QualityResult], lang: str,
                 pinned: Mapping[int, str]) -> list[QualityRow]:
    """One row per compared run, plus the baseline's pinned acceptance when it has one."""
    rows = [quality_row(r, speed_change(compare, r.run_id), lang, pinned.get(r.run_id)) for r in results]
    baseline = results[0].baseline_run_id if results else None
    if baseline is not None and pinned.get(baseline):
        rows.insert(0, QualityRow(baseline, "baseline", False,
                                  t("quality.row.baseline_pinned", lang, run=baseline, pinned=pinned[baseline]),
                                  pinned[baseline]))
    return rows
