"""Analysis of the points frame on hand-made data with known answers: deltas, the noise
estimate from repeats (the per-request bootstrap is in tests/test_noise.py), saturation
(both rules), scaling efficiency, the Pareto frontier and each validity badge.

:func:`point` builds one row of the points frame with clean defaults; the comparability
and export tests build on it too.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
import pytest

from domain.core.i18n import LANGUAGES, catalogue
from domain.results import analysis
from domain.results.analysis import (
    compare_table,
    delta_pct,
    mean_ci,
    noise_band_pct,
    t_quantile_975,
    wide_table,
)
from domain.results.validity import BADGES

LATENCIES = {"ttft": 20.0, "tpot": 8.0, "itl": 8.0, "e2e": 1000.0}
STAT_FACTORS = {"mean": 1.1, "median": 1.0, "p90": 1.5, "p95": 1.7, "p99": 2.0}


def point(run_id: int = 1, concurrency: int = 1, **overrides: Any) -> dict[str, Any]:
    """One clean measured point: nothing in it earns a badge or differs between runs."""
    thr = 100.0 * concurrency
    row: dict[str, Any] = {
        "run_id": run_id, "run_name": f"run{run_id}", "source": "measured", "engine": "sglang",
        "engine_version": "0.5.23", "model": "Qwen/Qwen3-30B-A3B", "model_revision": "main", "dtype": "bf16",
        "load_format": "auto", "gpu_type": "H200", "gpu_count": 1, "network": "none", "topology": "aggregated",
        "server_args": {"max-running-requests": 64}, "tags": [], "submitted_at": dt.datetime(2026, 6, 26, 10),
        "host_healthy": True, "max_total_num_tokens": 400_000,
        "scenario": "short", "concurrency": concurrency, "repeat_idx": 0, "input_len": 128, "output_len": 128,
        "random_range_ratio": 1.0, "num_prompts": 10 * concurrency, "warmup": 2 * concurrency,
        "dataset": "random-ids", "seed": 42, "request_rate": "inf", "apply_chat_template": False,
        "thinking_mode": "n/a", "ignore_eos": True, "bench_tool": "sglang.bench_serving", "bench_version": "0.5.23",
        "backend": "sglang", "arrival": "closed-loop", "workload": "random-ids", "cache_state": "flushed",
        "completed": 10 * concurrency, "requested": 10 * concurrency, "duration_s": 10.0,
        "request_throughput": thr / 128, "input_throughput": thr, "output_throughput": thr,
        "total_throughput": 2 * thr, "achieved_concurrency": 0.97 * concurrency,
        "total_input_tokens": 128 * 10 * concurrency, "total_output_tokens": 128 * 10 * concurrency,
        "gpu_util_mean": 50.0, "gpu_mem_peak_gb": 100.0, "kv_usage_peak": 0.1, "gpu_clock_event_reasons_max": 0,
        "telemetry_available": True,
    }
    for name, scale in LATENCIES.items():
        for stat, factor in STAT_FACTORS.items():
            row[f"{name}_{stat}_ms"] = scale * factor
    row.update(overrides)
    return row


def frame(*rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def cell(table: pd.DataFrame, **where: Any) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for column, value in where.items():
        mask &= table[column] == value
    rows = table[mask]
    assert len(rows) == 1, f"{len(rows)} rows match {where}"
    return rows.iloc[0]


# -- deltas and noise ------------------------------------------------------------------------------


def test_delta_is_relative_to_the_baseline_in_percent() -> None:
    assert delta_pct(110.0, 100.0) == pytest.approx(10.0)
    assert delta_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert math.isnan(delta_pct(5.0, 0.0)) and math.isnan(delta_pct(math.nan, 100.0))


def test_direction_decides_better_or_worse_outside_the_noise_of_repeats() -> None:
    # Three repeats a side, spread ±1 around each mean: the t half-width is 4.303 · 1 / √3 ≈ 2.48
    # a side, so the noise is hypot(2.48, 2.48) ≈ 3.5 in the metric's units.
    def repeats(run_id: int, **means: float) -> list[dict[str, Any]]:
        return [point(run_id, repeat_idx=i, **{column: mean + offset for column, mean in means.items()})
                for i, offset in enumerate((-1.0, 0.0, 1.0))]
    base = repeats(1, output_throughput=100.0, ttft_median_ms=50.0, tpot_median_ms=100.0, gpu_util_mean=50.0)
    other = repeats(2, output_throughput=110.0, ttft_median_ms=55.0, tpot_median_ms=102.0, gpu_util_mean=60.0)
    table = compare_table(frame(*base, *other), 1, [1, 2])
    expect = {
        "output_tok_s": (10.0, "better"),  # throughput up
        "ttft_p50": (10.0, "worse"),  # latency up: +5 ms against a noise of 3.5 ms
        "tpot_p50": (2.0, "cannot_tell"),  # +2 ms: the difference's interval spans zero and ±2 %
        "gpu_util_mean": (20.0, "changed"),  # no direction: never better or worse
    }
    for metric, (delta, verdict) in expect.items():
        row = cell(table, run_id=2, metric=metric)
        assert row["delta_pct"] == pytest.approx(delta), metric
        assert row["verdict"] == verdict, metric
        assert row["noise_source"] == "repeats"
    assert cell(table, run_id=1, metric="output_tok_s")["verdict"] == "baseline"
    assert analysis.delta_text(2.0, "same") == "≈" and analysis.delta_text(10.0, "better") == "+10.0%"
    # The comparison hands compare_table the summary it made already: the same table.
    summary = analysis.summarise_points(frame(*base, *other))
    pd.testing.assert_frame_equal(compare_table(frame(*base, *other), 1, [1, 2], summary=summary), table)


def test_one_repeat_without_samples_is_not_judged() -> None:
    """No fixed band any more (issue #15): one repeat and no per-request data leave no noise
    estimate, so even +10 % throughput is shown with the "?" mark and never coloured."""
    base = point(1, output_throughput=100.0, ttft_p99_ms=100.0, max_total_num_tokens=400_000)
    other = point(2, output_throughput=110.0, ttft_p99_ms=108.0, max_total_num_tokens=800_000)
    table = compare_table(frame(base, other), 1, [1, 2])
    for metric in ("output_tok_s", "ttft_p99", "gpu_util_mean"):
        row = cell(table, run_id=2, metric=metric)
        assert row["verdict"] == "uncertain" and pd.isna(row["noise_source"]), metric
        assert math.isnan(row["noise_pct"])
    assert analysis.delta_text(cell(table, run_id=2, metric="output_tok_s")["delta_pct"], "uncertain") == "+10.0%?"
    # The KV pool's size is a server fact with no sampling noise: a change is a change.
    kv = cell(table, run_id=2, metric="kv_capacity")
    assert (kv["verdict"], kv["noise_source"], kv["delta_pct"]) == ("better", "exact", 100.0)


def test_t_table_and_confidence_interval() -> None:
    assert t_quantile_975(1) == 12.706 and t_quantile_975(2) == 4.303 and t_quantile_975(35) == 2.042
    assert t_quantile_975(500) == 1.960
    mean, half = mean_ci([98.0, 100.0, 102.0])  # s = 2, n = 3
    assert mean == 100.0 and half == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert mean_ci([123.456789]) == (123.456789, None)  # one value passes through exactly


def repeated(run_id: int, throughputs: list[float]) -> list[dict[str, Any]]:
    return [point(run_id, repeat_idx=i, output_throughput=v) for i, v in enumerate(throughputs)]


def test_noise_from_repeats() -> None:
    base = repeated(1, [98.0, 100.0, 102.0])  # mean 100, half-width 4.969
    small = repeated(2, [102.0, 104.0, 106.0])  # +4 %: inside the repeats' noise
    large = repeated(3, [108.0, 110.0, 112.0])  # +10 %: outside it
    table = compare_table(frame(*base, *small, *large), 1)
    half = 4.303 * 2 / math.sqrt(3)
    expected_noise = math.hypot(half, half)  # in % of a baseline of 100
    row = cell(table, run_id=2, metric="output_tok_s")
    assert row["noise_source"] == "repeats" and row["repeats"] == 3 and row["baseline_repeats"] == 3
    assert row["noise_pct"] == pytest.approx(expected_noise)
    assert row["delta_pct"] == pytest.approx(4.0) and row["verdict"] == "cannot_tell"  # spans zero and ±2 %
    assert cell(table, run_id=3, metric="output_tok_s")["verdict"] == "better"


def test_one_side_without_an_estimate_gives_none() -> None:
    assert noise_band_pct(100.0, 5.0, math.nan)[1] is None
    noise, source = noise_band_pct(100.0, 3.0, 4.0, "repeats", "bootstrap")
    assert noise == pytest.approx(5.0) and source == "repeats+bootstrap"


def test_single_repeat_values_pass_through_exactly() -> None:
    odd = 0.1 + 0.2  # not representable exactly: any arithmetic would show
    table = compare_table(frame(point(1, output_throughput=odd), point(2, output_throughput=1 / 3)), 1)
    assert cell(table, run_id=1, metric="output_tok_s")["value"] == odd
    assert cell(table, run_id=2, metric="output_tok_s")["value"] == 1 / 3


def test_wide_table_has_a_column_group_per_run_and_delta_text() -> None:
    data = frame(point(1, output_throughput=100.0), point(2, output_throughput=101.0, source="emulated"))
    wide = wide_table(compare_table(data, 1), "en", ["output_tok_s"])
    assert list(wide.columns) == [("run1 (#1)", "Output tok/s"), ("run2 (#2) (emulated)", "Output tok/s"),
                                  ("run2 (#2) (emulated)", "Output tok/s Δ")]
    assert wide.iloc[0][("run2 (#2) (emulated)", "Output tok/s Δ")] == "+1.0%?"  # one repeat, no samples
    assert "（エミュレート）" in wide_table(compare_table(data, 1), "ja", ["output_tok_s"]).columns[1][0]


# -- strings -------------------------------------------------------------------------------------


def test_every_metric_badge_and_rule_has_strings_in_both_languages() -> None:
    keys = [f"compare.metric.{m.name}" for m in analysis.METRICS] + [f"compare.badge.{b}" for b in BADGES]
    keys += [f"compare.rule.{r}" for r in ("latency_sla", "both", "none")]
    keys += [f"compare.verdict.{v}" for v in ("better", "worse", "same", "changed", "baseline", "uncertain")]
    for key in keys:
        assert set(LANGUAGES) <= set(catalogue()[key]), key
