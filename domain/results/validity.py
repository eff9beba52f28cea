"""Validity badges: per measured point, the warnings that say its numbers may not mean what
they seem (the client could not keep the concurrency, requests were lost, output or input
lengths are off, the GPU throttled, the host was unhealthy, the data is emulated or imported).

Pure functions of the points frame (see :mod:`domain.results.analysis` for its shape); the
compare page shows them per point and :func:`domain.results.comparison.build_comparison`
carries them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.results.analysis import POINT, is_missing

LOW_CONCURRENCY_RATIO = 0.80  # achieved < 80 % of the target: the client could not keep requests in flight
OUTPUT_SHORTFALL_RATIO = 0.95  # under 95 % of the expected output tokens
INPUT_LENGTH_TOLERANCE = 0.05  # measured mean input length more than 5 % off the expected
# NVML clock-event reasons that mean throttling: SW power cap, HW slowdown, SW thermal,
# HW thermal, HW power brake (0x1 idle and 0x2 application clocks are not).
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}
THROTTLE_MASK = sum(THROTTLE_REASONS)

BADGES = ("low_concurrency", "incomplete", "output_shortfall", "input_length_off", "throttled", "unhealthy_host",
          "emulated", "imported")
BADGE_COLUMNS = ("run_id", "scenario", "concurrency", "repeat_idx", "badge", "detail")


def expected_length(requested: float, range_ratio: object) -> float:
    """Mean length bench_serving's random datasets draw: uniform in [ratio × L, L], so
    L × (1 + ratio) / 2; an unknown ratio is taken as 1 (exact lengths, benchdeck's default)."""
    ratio = 1.0 if is_missing(range_ratio) else float(range_ratio)  # type: ignore[arg-type]
    return requested * (1.0 + ratio) / 2.0


def point_badges(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every badge one point earns, as (badge, detail) with the numbers behind it."""
    checks = (_low_concurrency, _incomplete, _output_shortfall, _input_length_off, _throttled, _unhealthy_host,
              _source_badge)
    return [badge for check in checks if (badge := check(row)) is not None]


def validity_badges(frame: pd.DataFrame) -> pd.DataFrame:
    """Long table, one row per (point, badge) fired; columns :data:`BADGE_COLUMNS`."""
    records = [
        (row["run_id"], row["scenario"], row["concurrency"], row.get("repeat_idx"), badge, detail)
        for row in frame.to_dict("records")  # plain dicts: iterrows builds a Series per row, ~10× slower
        for badge, detail in point_badges(row)
    ]
    return pd.DataFrame.from_records(records, columns=list(BADGE_COLUMNS))


def badges_by_point(badges: pd.DataFrame) -> pd.DataFrame:
    """Per (run, scenario, concurrency): the sorted distinct badge names (repeats merged)."""
    grouped = badges.groupby(["run_id", *POINT], sort=True)["badge"].agg(lambda b: sorted(set(b)))
    return grouped.reset_index().rename(columns={"badge": "badges"})


def _num(row: Mapping[str, Any], column: str) -> float | None:
    value = row.get(column)
    if value is None or is_missing(value):
        return None
    return float(value)


def _low_concurrency(row: Mapping[str, Any]) -> tuple[str, str] | None:
    achieved, target = _num(row, "achieved_concurrency"), _num(row, "concurrency")
    if achieved is None or not target or achieved >= LOW_CONCURRENCY_RATIO * target:
        return None
    return "low_concurrency", f"{achieved:.2f}/{target:g}"


def _incomplete(row: Mapping[str, Any]) -> tuple[str, str] | None:
    completed, requested = _num(row, "completed"), _num(row, "requested")
    if completed is None or requested is None or completed >= requested:
        return None
    return "incomplete", f"{completed:g}/{requested:g}"


def _output_shortfall(row: Mapping[str, Any]) -> tuple[str, str] | None:
    tokens, completed, osl = _num(row, "total_output_tokens"), _num(row, "completed"), _num(row, "output_len")
    if tokens is None or not completed or not osl:
        return None
    expected = completed * expected_length(osl, row.get("random_range_ratio"))
    if tokens >= OUTPUT_SHORTFALL_RATIO * expected:
        return None
    cause = "eos_not_ignored" if row.get("ignore_eos") is False else "server_cap"
    return "output_shortfall", f"{tokens / completed:.1f}/{expected / completed:.1f} ({cause})"


def _input_length_off(row: Mapping[str, Any]) -> tuple[str, str] | None:
    tokens, completed, isl = _num(row, "total_input_tokens"), _num(row, "completed"), _num(row, "input_len")
    if tokens is None or not completed or not isl:
        return None
    measured, expected = tokens / completed, expected_length(isl, row.get("random_range_ratio"))
    if abs(measured - expected) <= INPUT_LENGTH_TOLERANCE * expected:
        return None
    return "input_length_off", f"{measured:.1f}/{expected:.1f}"


def _throttled(row: Mapping[str, Any]) -> tuple[str, str] | None:
    reasons = _num(row, "gpu_clock_event_reasons_max")
    if reasons is None or not int(reasons) & THROTTLE_MASK:
        return None
    return "throttled", ", ".join(name for bit, name in THROTTLE_REASONS.items() if int(reasons) & bit)


def _unhealthy_host(row: Mapping[str, Any]) -> tuple[str, str] | None:
    return ("unhealthy_host", "") if row.get("host_healthy") is False or row.get("host_healthy") is np.False_ else None


def _source_badge(row: Mapping[str, Any]) -> tuple[str, str] | None:
    source = row.get("source")
    return (str(source), "") if source in ("emulated", "imported") else None


def badge_label(badge: str, lang: str) -> str:
    return t(f"compare.badge.{badge}", lang)
