"""Analysis of the points frame on hand-made data with known answers: deltas, the noise band
(default and from repeats), saturation (both rules), scaling efficiency, the Pareto
frontier and each validity badge.

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
    METRIC_BY_NAME,
    compare_table,
    delta_pct,
    mean_ci,
    noise_band_pct,
    pareto_points,
    saturation_points,
    scaling_efficiency,
    summarise_points,
    t_quantile_975,
    wide_table,
)
from domain.results.validity import BADGES, badges_by_point, validity_badges

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
        "backend": "sglang",
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


def test_direction_decides_better_or_worse_and_the_default_band_gives_approx() -> None:
    base = point(1, output_throughput=100.0, ttft_median_ms=50.0, ttft_p99_ms=100.0, tpot_median_ms=10.0,
                 e2e_p99_ms=1000.0, gpu_util_mean=50.0)
    other = point(2, output_throughput=110.0, ttft_median_ms=55.0, ttft_p99_ms=108.0, tpot_median_ms=10.2,
                  e2e_p99_ms=1120.0, gpu_util_mean=60.0)
    table = compare_table(frame(base, other), 1, [1, 2])
    expect = {
        "output_tok_s": (10.0, "better"),  # throughput up
        "ttft_p50": (10.0, "worse"),  # latency up
        "tpot_p50": (2.0, "same"),  # inside the ±3 % default band
        "ttft_p99": (8.0, "same"),  # a p99 gets the wider ±10 % band
        "e2e_p99": (12.0, "worse"),
        "gpu_util_mean": (20.0, "changed"),  # no direction: never better or worse
    }
    for metric, (delta, verdict) in expect.items():
        row = cell(table, run_id=2, metric=metric)
        assert row["delta_pct"] == pytest.approx(delta), metric
        assert row["verdict"] == verdict, metric
        assert row["noise_source"] == "default"
    assert cell(table, run_id=2, metric="tpot_p50")["noise_pct"] == analysis.DEFAULT_NOISE_BAND_PCT
    assert cell(table, run_id=2, metric="ttft_p99")["noise_pct"] == analysis.TAIL_NOISE_BAND_PCT
    assert cell(table, run_id=1, metric="output_tok_s")["verdict"] == "baseline"
    assert analysis.delta_text(2.0, "same") == "≈" and analysis.delta_text(10.0, "better") == "+10.0%"


def test_t_table_and_confidence_interval() -> None:
    assert t_quantile_975(1) == 12.706 and t_quantile_975(2) == 4.303 and t_quantile_975(35) == 2.042
    assert t_quantile_975(500) == 1.960
    mean, half = mean_ci([98.0, 100.0, 102.0])  # s = 2, n = 3
    assert mean == 100.0 and half == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert mean_ci([123.456789]) == (123.456789, None)  # one value passes through exactly


def repeated(run_id: int, throughputs: list[float]) -> list[dict[str, Any]]:
    return [point(run_id, repeat_idx=i, output_throughput=v) for i, v in enumerate(throughputs)]


def test_noise_from_repeats_overrides_the_default_band() -> None:
    base = repeated(1, [98.0, 100.0, 102.0])  # mean 100, half-width 4.969
    small = repeated(2, [102.0, 104.0, 106.0])  # +4 %: outside ±3 %, inside the repeats' noise
    large = repeated(3, [108.0, 110.0, 112.0])  # +10 %: outside both
    table = compare_table(frame(*base, *small, *large), 1)
    half = 4.303 * 2 / math.sqrt(3)
    expected_noise = math.hypot(half, half)  # in % of a baseline of 100
    row = cell(table, run_id=2, metric="output_tok_s")
    assert row["noise_source"] == "repeats" and row["repeats"] == 3 and row["baseline_repeats"] == 3
    assert row["noise_pct"] == pytest.approx(expected_noise)
    assert row["delta_pct"] == pytest.approx(4.0) and row["verdict"] == "same"
    assert cell(table, run_id=3, metric="output_tok_s")["verdict"] == "better"


def test_one_side_without_repeats_falls_back_to_the_default_band() -> None:
    noise, source = noise_band_pct(100.0, 5.0, math.nan, tail=METRIC_BY_NAME["output_tok_s"].tail)
    assert (noise, source) == (analysis.DEFAULT_NOISE_BAND_PCT, "default")


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
    assert wide.iloc[0][("run2 (#2) (emulated)", "Output tok/s Δ")] == "≈"
    assert "（エミュレート）" in wide_table(compare_table(data, 1), "ja", ["output_tok_s"]).columns[1][0]


# -- saturation and scaling --------------------------------------------------------------------------


def sweep(run_id: int, throughput: dict[int, float], **per_point: dict[int, float]) -> list[dict[str, Any]]:
    rows = []
    for c, thr in throughput.items():
        extra = {column: values[c] for column, values in per_point.items()}
        rows.append(point(run_id, c, output_throughput=thr, **extra))
    return rows


def test_gain_per_doubling_interpolates_uneven_steps() -> None:
    assert analysis.gain_per_doubling(1, 100.0, 2, 150.0) == pytest.approx(0.5)
    assert analysis.gain_per_doubling(8, 100.0, 32, 121.0) == pytest.approx(0.10)  # 2 doublings, 1.1 each


def test_saturation_by_throughput_gain() -> None:
    # gains per doubling: +90 %, +84 %, +8.6 %, +2.6 % → flat from concurrency 4 on.
    summary = summarise_points(frame(*sweep(1, {1: 100, 2: 190, 4: 350, 8: 380, 16: 390})))
    row = saturation_points(summary, gain_threshold_pct=10.0).iloc[0]
    assert row["concurrency"] == 4 and row["rule"] == "throughput_gain" and row["knee_concurrency"] == 4
    assert saturation_points(summary, gain_threshold_pct=2.0).iloc[0]["rule"] is None  # still gaining > 2 %


def test_a_flat_step_followed_by_growth_is_not_the_knee() -> None:
    summary = summarise_points(frame(*sweep(1, {1: 100, 2: 105, 4: 200, 8: 205})))
    assert saturation_points(summary, gain_threshold_pct=10.0).iloc[0]["knee_concurrency"] == 4


def test_saturation_by_latency_sla() -> None:
    ttft = {1: 50.0, 2: 80.0, 4: 120.0, 8: 300.0}
    summary = summarise_points(frame(*sweep(1, {1: 100, 2: 200, 4: 400, 8: 800}, ttft_p99_ms=ttft)))
    row = saturation_points(summary, sla_metric="ttft_p99", sla_threshold_ms=100.0).iloc[0]
    assert row["concurrency"] == 4 and row["rule"] == "latency_sla" and pd.isna(row["knee_concurrency"])
    assert saturation_points(summary).iloc[0]["rule"] is None  # no SLA given, still scaling


def test_both_rules_at_once_pick_the_earlier_and_say_so() -> None:
    ttft = {1: 50.0, 2: 80.0, 4: 120.0, 8: 300.0, 16: 600.0}
    summary = summarise_points(frame(*sweep(1, {1: 100, 2: 190, 4: 350, 8: 380, 16: 390}, ttft_p99_ms=ttft)))
    same = saturation_points(summary, sla_metric="ttft_p99", sla_threshold_ms=100.0).iloc[0]
    assert (same["concurrency"], same["rule"]) == (4, "both")
    later_sla = saturation_points(summary, sla_metric="ttft_p99", sla_threshold_ms=200.0).iloc[0]
    assert (later_sla["concurrency"], later_sla["rule"], later_sla["sla_break_concurrency"]) == (
        4, "throughput_gain", 8)


def test_scaling_efficiency_against_the_lowest_concurrency() -> None:
    summary = summarise_points(frame(*sweep(1, {1: 100, 2: 180, 4: 320}), *sweep(2, {2: 200, 4: 360, 8: 600})))
    table = scaling_efficiency(summary)
    assert list(table[table["run_id"] == 1]["efficiency"]) == pytest.approx([1.0, 0.9, 0.8])
    run2 = table[table["run_id"] == 2]  # c0 = 2 for this run
    assert list(run2["ideal_speedup"]) == [1.0, 2.0, 4.0]
    assert list(run2["efficiency"]) == pytest.approx([1.0, 0.9, 0.75])


# -- Pareto --------------------------------------------------------------------------------------


def test_pareto_frontier_marks_the_undominated_points() -> None:
    # (interactivity tok/s/user, throughput per GPU) on 2 GPUs: tpot = 1000 / x, output = 2 y.
    points = {"A": (100, 100), "B": (50, 200), "C": (40, 150), "D": (100, 90), "E": (200, 10)}
    rows = [point(1, c, gpu_count=2, tpot_median_ms=1000 / x, output_throughput=2 * y)
            for c, (x, y) in enumerate(points.values(), start=1)]
    table = pareto_points(summarise_points(frame(*rows)))
    on = {name: bool(table.iloc[i]["on_frontier"]) for i, name in enumerate(points)}
    assert on == {"A": True, "B": True, "C": False, "D": False, "E": True}
    assert table.iloc[0]["interactivity"] == pytest.approx(100) and table.iloc[0]["throughput_per_gpu"] == 100


def test_pareto_is_per_scenario_and_skips_points_without_values() -> None:
    rows = [point(1, 1, tpot_median_ms=10.0, output_throughput=100.0),
            point(1, 1, scenario="long", tpot_median_ms=20.0, output_throughput=50.0),
            point(1, 2, scenario="long", tpot_median_ms=None, output_throughput=500.0)]
    table = pareto_points(summarise_points(frame(*rows)))
    assert list(table["on_frontier"]) == [True, False, True]  # sorted: long@1, long@2, short@1


# -- validity badges -------------------------------------------------------------------------------


def badges_of(**overrides: Any) -> dict[str, str]:
    table = validity_badges(frame(point(1, 8, **overrides)))
    return dict(zip(table["badge"], table["detail"], strict=True))


def test_a_clean_point_earns_no_badge() -> None:
    assert badges_of() == {}


@pytest.mark.parametrize(
    ("overrides", "badge"),
    [
        ({"achieved_concurrency": 6.0}, "low_concurrency"),  # 75 % of 8
        ({"completed": 79, "requested": 80}, "incomplete"),
        ({"total_output_tokens": 9000}, "output_shortfall"),  # 112.5 of 128 per request
        ({"total_input_tokens": 80 * 140}, "input_length_off"),  # 140 vs 128: +9 %
        ({"gpu_clock_event_reasons_max": 0x4 | 0x1}, "throttled"),
        ({"host_healthy": False}, "unhealthy_host"),
        ({"source": "emulated"}, "emulated"),
        ({"source": "imported"}, "imported"),
    ],
)
def test_each_badge_fires_alone(overrides: dict[str, Any], badge: str) -> None:
    assert list(badges_of(**overrides)) == [badge]


def test_badge_thresholds_are_not_hair_triggers() -> None:
    assert badges_of(achieved_concurrency=6.5) == {}  # 81 % of 8
    assert badges_of(total_input_tokens=80 * 133) == {}  # +3.9 %
    assert badges_of(total_output_tokens=int(0.96 * 80 * 128)) == {}
    assert badges_of(gpu_clock_event_reasons_max=0x1 | 0x2) == {}  # idle, app clocks: not throttling
    assert badges_of(host_healthy=None, gpu_clock_event_reasons_max=None, total_output_tokens=None) == {}


def test_badge_details_name_the_cause() -> None:
    assert badges_of(gpu_clock_event_reasons_max=0x4 | 0x40)["throttled"] == "sw_power_cap, hw_thermal"
    assert "eos_not_ignored" in badges_of(total_output_tokens=5000, ignore_eos=False)["output_shortfall"]
    assert "server_cap" in badges_of(total_output_tokens=5000)["output_shortfall"]


def test_range_ratio_sets_the_expected_lengths() -> None:
    # ratio 0.5: lengths uniform in [64, 128], mean 96 per request — not a shortfall.
    assert badges_of(random_range_ratio=0.5, total_output_tokens=80 * 96, total_input_tokens=80 * 96) == {}


def test_badges_by_point_merges_repeats() -> None:
    rows = [point(1, 8, repeat_idx=0, host_healthy=False), point(1, 8, repeat_idx=1, source="emulated",
                                                                   host_healthy=False)]
    merged = badges_by_point(validity_badges(frame(*rows)))
    assert merged.iloc[0]["badges"] == ["emulated", "unhealthy_host"]


# -- strings -------------------------------------------------------------------------------------


def test_every_metric_badge_and_rule_has_strings_in_both_languages() -> None:
    keys = [f"compare.metric.{m.name}" for m in analysis.METRICS] + [f"compare.badge.{b}" for b in BADGES]
    keys += [f"compare.rule.{r}" for r in ("throughput_gain", "latency_sla", "both", "none")]
    keys += [f"compare.verdict.{v}" for v in ("better", "worse", "same", "changed", "baseline")]
    for key in keys:
        assert set(LANGUAGES) <= set(catalogue()[key]), key


def test_rule_text_names_the_rule_and_its_setting() -> None:
    row = pd.Series({"rule": "latency_sla"})
    text = analysis.rule_text(row, "en", sla_metric="ttft_p99", sla_threshold_ms=200.0)
    assert text == "TTFT p99 (ms) above the 200 ms SLA"
    assert analysis.rule_text(pd.Series({"rule": "throughput_gain"}), "ja", gain_threshold_pct=10.0) == (
        "スループット増加が倍化あたり 10% 未満")
    assert analysis.rule_text(pd.Series({"rule": None}), "en") == "not saturated"
