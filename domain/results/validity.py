"""Validity badges: per measured point, the warnings that say its numbers may not mean what
they seem (the client could not keep the concurrency, requests were lost, the server served
other lengths than asked, the GPU throttled, the host was unhealthy, the data is emulated
or imported), and per curve the points whose scaling says the measurement went wrong (a
cold first point, super-linear efficiency).

Pure functions of the points frame (see :mod:`domain.results.analysis` for its shape and
:mod:`domain.results.frames` for where its columns come from); the compare page shows them
per point and :func:`domain.compare.comparison.build_comparison` carries them.  Each badge
has a label (``compare.badge.<name>``) and a one-sentence explanation
(``badge.explain.<name>``, :func:`badge_explanation`) in both languages.

Length checks use the server's own token counts (``server_prompt_tokens`` and
``server_generation_tokens``: the increase of SGLang's ``sglang:prompt_tokens_total`` and
``sglang:generation_tokens_total`` over the measured window, ``runner/telemetry.py``), never
bench_serving's totals: its input total adds up the lengths it asked for, so comparing it with
the asked lengths checks nothing.  Where the server's counts are unknown (imported runs,
points measured without them) or cannot be read per request (failed requests are in them,
a dataset whose lengths are its own), the point earns ``lengths_unchecked`` with the reason:
a check that could not run says so rather than passing silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from domain.core.i18n import t
from domain.results.analysis import POINT, is_missing
from domain.results.speculative import acceptance_badge
from domain.results.workload_columns import unexpected_cache_hit

LOW_CONCURRENCY_RATIO = 0.80  # achieved < 80 % of the target: the client could not keep requests in flight
# What the length checks allow besides the sampling spread of random lengths: re-tokenisation
# of text prompts by the server (the ``random`` dataset decodes ids to text), special tokens.
OUTPUT_SHORTFALL_RATIO = 0.95  # served under 95 % of the expected output tokens (one-sided)
INPUT_LENGTH_TOLERANCE = 0.05  # served mean input length more than 5 % off the expected (two-sided)
# Sampling spread: bench_serving draws each length uniformly (``compute_random_lens``), so the
# mean of n requests has standard error sigma/sqrt(n); a deviation past SPREAD_Z of those is not
# chance (two-sided p ~ 6e-5 under the normal approximation; ~0.025 false badges per 200 points
# checked on both lengths, tests/test_badges.py).
SPREAD_Z = 4.0
LENGTH_DATASETS = frozenset({"random", "random-ids"})  # whose lengths follow input_len/output_len

# NVML clock-event reasons (nvmlClocksEventReasons): 0x1 idle, 0x2 application clocks, 0x10
# sync boost and 0x100 display clocks are not throttling.  SW power cap is the driver holding
# the board at its power limit: at full load under heavy decode an H200 sits there by design.
SW_POWER_CAP = 0x4
THROTTLE_REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
THROTTLE_MASK = sum(THROTTLE_REASONS)
FULL_LOAD_UTIL_PCT = 80.0  # mean GPU utilisation over the measured window that counts as full load

BADGES = ("low_concurrency", "incomplete", "output_shortfall", "input_length_off", "lengths_unchecked", "throttled",
          "power_capped", "unhealthy_host", "emulated", "imported", "cold_first_point", "super_linear",
          "unexpected_cache_hit", "acceptance_not_representative")
CURVE_BADGES = ("cold_first_point", "super_linear")  # from curve_badges, per (run, scenario, concurrency)
BADGE_COLUMNS = ("run_id", "scenario", "concurrency", "repeat_idx", "badge", "detail")


# -- expected lengths ------------------------------------------------------------------------------

def _lowest_length(requested: float, ratio: float) -> float:
    """bench_serving's ``compute_random_lens``: integers uniform in [max(int(L*ratio), 1), L]."""
    return float(max(int(requested * ratio), 1))


def _ratio(range_ratio: object) -> float:
    """An unknown ratio is taken as 1 (exact lengths, benchdeck's default)."""
    return 1.0 if is_missing(range_ratio) else float(range_ratio)  # type: ignore[arg-type]


def expected_length(requested: float, range_ratio: object) -> float:
    """Mean length bench_serving's random datasets draw: the midpoint of
    [max(int(ratio × L), 1), L], about L × (1 + ratio) / 2."""
    return (_lowest_length(requested, _ratio(range_ratio)) + requested) / 2.0


def length_spread(requested: float, range_ratio: object, n: float) -> float:
    """Standard error of the mean of ``n`` drawn lengths: the discrete uniform over m
    integers has variance (m² − 1) / 12; exact lengths (ratio 1) have none."""
    m = requested - _lowest_length(requested, _ratio(range_ratio)) + 1.0
    return math.sqrt((m * m - 1.0) / 12.0 / n) if n > 0 else math.inf


# -- point badges ------------------------------------------------------------------------------------

def point_badges(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every badge one point earns, as (badge, detail) with the numbers behind it."""
    checks = (_low_concurrency, _incomplete, _output_shortfall, _input_length_off, _lengths_unchecked, _throttled,
              _power_capped, _unhealthy_host, _source_badge, unexpected_cache_hit, acceptance_badge)
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


def _why_lengths_unchecked(row: Mapping[str, Any]) -> str | None:
    """Why the server's counts cannot be compared with the asked lengths, or None when they can."""
    completed, requested = _num(row, "completed"), _num(row, "requested")
    if not completed:
        return "no completed request"
    dataset = row.get("dataset")
    if not is_missing(dataset) and dataset not in LENGTH_DATASETS:  # unknown: taken as random, like the ratio
        return f"dataset {dataset}: lengths are the dataset's own"
    if _num(row, "server_prompt_tokens") is None or _num(row, "server_generation_tokens") is None:
        return "no server token counts"
    if requested is not None and completed < requested:
        return "failed requests are in the server's counts"
    return None


def _per_request(row: Mapping[str, Any], column: str, asked: str) -> tuple[float, float, float] | None:
    """(served per completed request, expected, sampling standard error), or None unchecked."""
    length = _num(row, asked)
    if _why_lengths_unchecked(row) is not None or not length:
        return None
    completed = _num(row, "completed") or 0.0
    served = (_num(row, column) or 0.0) / completed
    ratio = row.get("random_range_ratio")
    return served, expected_length(length, ratio), length_spread(length, ratio, completed)


def _output_shortfall(row: Mapping[str, Any]) -> tuple[str, str] | None:
    measured = _per_request(row, "server_generation_tokens", "output_len")
    if measured is None:
        return None
    served, expected, spread = measured
    if served >= OUTPUT_SHORTFALL_RATIO * expected - SPREAD_Z * spread:
        return None
    cause = "eos_not_ignored" if row.get("ignore_eos") is False else "server_cap"
    return "output_shortfall", f"{served:.1f}/{expected:.1f} ({cause})"


def _input_length_off(row: Mapping[str, Any]) -> tuple[str, str] | None:
    measured = _per_request(row, "server_prompt_tokens", "input_len")
    if measured is None:
        return None
    served, expected, spread = measured
    if abs(served - expected) <= INPUT_LENGTH_TOLERANCE * expected + SPREAD_Z * spread:
        return None
    return "input_length_off", f"{served:.1f}/{expected:.1f} ({100 * (served / expected - 1):+.1f} %)"


def _lengths_unchecked(row: Mapping[str, Any]) -> tuple[str, str] | None:
    if not _num(row, "input_len") and not _num(row, "output_len"):
        return None  # nothing was asked, so nothing goes unchecked
    reason = _why_lengths_unchecked(row)
    return None if reason is None else ("lengths_unchecked", reason)


def _reasons(row: Mapping[str, Any]) -> int | None:
    """The clock-event reasons OR-ed over the samples and GPUs of the measured window."""
    value = _num(row, "gpu_clock_event_reasons_any")
    return None if value is None else int(value)


def _throttled(row: Mapping[str, Any]) -> tuple[str, str] | None:
    reasons = _reasons(row)
    if reasons is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS.items() if reasons & bit]
    util = _num(row, "gpu_util_mean")
    if reasons & SW_POWER_CAP and util is not None and util < FULL_LOAD_UTIL_PCT:
        names.append(f"sw_power_cap below full load (GPU util {util:.0f} %)")  # the limit bites a light load
    return ("throttled", ", ".join(names)) if names else None


def _power_capped(row: Mapping[str, Any]) -> tuple[str, str] | None:
    reasons = _reasons(row)
    if reasons is None or not reasons & SW_POWER_CAP:
        return None
    util = _num(row, "gpu_util_mean")
    if util is None:
        return "power_capped", "sw_power_cap (GPU load unknown)"
    if util < FULL_LOAD_UTIL_PCT:
        return None  # a throttle, not the normal ceiling: _throttled names it
    return "power_capped", f"power cap at full load (GPU util {util:.0f} %): normal"


def _unhealthy_host(row: Mapping[str, Any]) -> tuple[str, str] | None:
    if row.get("host_healthy") is None or bool(row.get("host_healthy")):
        return None
    detail = row.get("host_health_detail")
    return "unhealthy_host", "" if detail is None or is_missing(detail) else str(detail)


def _source_badge(row: Mapping[str, Any]) -> tuple[str, str] | None:
    source = row.get("source")
    return (str(source), "") if source in ("emulated", "imported") else None


# -- host health --------------------------------------------------------------------------------------

def host_health(host_info: Mapping[str, Any] | None) -> tuple[bool | None, str]:
    """(healthy, what is wrong) from an attempt's host record (``attempts.host_info``);
    None where the record cannot say (no record, or no health readings in it).

    Read from the record:
    - ``gpu.declared.type`` against the names NVML gave the run's GPUs (``run_gpus.gpus``,
      else ``gpu.gpus``): a host whose GPUs are not the declared type measures something else;
    - ``health`` (read before launch, per run GPU: ``gpus[].clock_event_reasons`` at idle,
      ``gpus[].ecc_uncorrected``, ``gpus[].remapped_rows_pending``,
      ``gpus[].remapped_rows_failure``; ``foreign_processes`` as the guard saw them).
    Only a record with ``health.checked`` true can say healthy."""
    if not host_info:
        return None, ""
    problems = [*_gpu_type_problems(host_info), *_health_problems(host_info.get("health") or {})]
    if problems:
        return False, "; ".join(problems)
    return (True, "") if (host_info.get("health") or {}).get("checked") else (None, "")


def _words(name: str) -> set[str]:
    return set("".join(c if c.isalnum() else " " for c in name.upper()).split())


def _gpu_type_problems(info: Mapping[str, Any]) -> list[str]:
    """The rule of ``runner/host.py::gpu_type_mismatch``: every word of the declared type is
    a word of NVML's device name."""
    gpu = info.get("gpu") or {}
    declared = (gpu.get("declared") or {}).get("type")
    listed = (info.get("run_gpus") or gpu).get("gpus") or []
    if not declared or gpu.get("source") != "measured":
        return []
    wrong = sorted({str(g.get("name")) for g in listed if not _words(declared) <= _words(str(g.get("name", "")))})
    return [f"declared {declared}, NVML names {', '.join(wrong)}"] if wrong else []


def _health_problems(health: Mapping[str, Any]) -> list[str]:
    problems = [f"foreign GPU process pid {entry[1]} ({entry[2]:.1f} GB)"
                for entry in health.get("foreign_processes") or []]
    for gpu in health.get("gpus") or []:
        problems += _gpu_problems(gpu)
    return problems


def _gpu_problems(gpu: Mapping[str, Any]) -> list[str]:
    name = str(gpu.get("uuid") or gpu.get("index") or "GPU")
    found = []
    idle_reasons = int(gpu.get("clock_event_reasons") or 0) & (THROTTLE_MASK | SW_POWER_CAP)
    if idle_reasons:
        reasons = [n for bit, n in {SW_POWER_CAP: "sw_power_cap", **THROTTLE_REASONS}.items() if idle_reasons & bit]
        found.append(f"{name}: {', '.join(reasons)} at idle")
    if gpu.get("ecc_uncorrected"):
        found.append(f"{name}: {gpu['ecc_uncorrected']} uncorrected ECC errors")
    if gpu.get("remapped_rows_pending") or gpu.get("remapped_rows_failure"):
        found.append(f"{name}: memory row remapping pending or failed (reset needed)")
    return found


# -- curve badges ------------------------------------------------------------------------------------

def curve_badges(scaling: pd.DataFrame) -> pd.DataFrame:
    """Badges of the scaling curve, from the ``cold`` and ``super_linear`` columns of
    ``domain.results.curve.scaling_efficiency``: one row per flagged (run, scenario,
    concurrency), columns :data:`BADGE_COLUMNS`, ``repeat_idx`` None (a curve point merges
    its repeats).  The details quote the throughput and efficiency the curve carries."""
    records = []
    rows = scaling.sort_values(["run_id", "scenario", "concurrency"]).to_dict("records")
    for row, following in zip(rows, [*rows[1:], None], strict=True):
        nxt = following if following and (following["run_id"], following["scenario"]) == (
            row["run_id"], row["scenario"]) else None
        for badge, detail in _curve_point_badges(row, nxt):
            records.append((row["run_id"], row["scenario"], row["concurrency"], None, badge, detail))
    return pd.DataFrame.from_records(records, columns=list(BADGE_COLUMNS))


def _flag(row: Mapping[str, Any], column: str) -> bool:
    value = row.get(column)
    return value is not None and not is_missing(value) and bool(value)


def _curve_point_badges(row: Mapping[str, Any], nxt: Mapping[str, Any] | None) -> Iterable[tuple[str, str]]:
    if _flag(row, "cold"):
        thr, next_thr = _num(row, "throughput"), _num(nxt, "throughput") if nxt else None
        detail = (f"{thr:.0f} tok/s at c={row['concurrency']}, {next_thr:.0f} at c={nxt['concurrency']}"  # type: ignore[index]
                  if thr is not None and next_thr is not None else f"c={row['concurrency']}")
        yield "cold_first_point", detail
    if _flag(row, "super_linear"):
        efficiency = _num(row, "efficiency")
        yield "super_linear", f"efficiency {100 * efficiency:.0f} %" if efficiency is not None else ""


# -- strings -------------------------------------------------------------------------------------------

def badge_label(badge: str, lang: str) -> str:
    return t(f"compare.badge.{badge}", lang)


def badge_explanation(badge: str, lang: str) -> str:
    """One sentence: what the badge means and why it matters."""
    return t(f"badge.explain.{badge}", lang)
