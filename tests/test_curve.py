"""The curve rules (domain/results/curve.py) on data with known answers: the knee on noisy
sweeps (200 synthetic curves, bench/curve_knee.py), the SLA half, cold first points and the
efficiency baseline on the issue's real 0.5.23 sweep shape, super-linear efficiency,
AIPerf's goodput, and the change between two points of the Pareto front.

Points go through ``analysis.summarise_points`` from rows built by
``tests.test_analysis.point``, as the comparison builds them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench import curve_knee
from domain.core.i18n import LANGUAGES, catalogue, t
from domain.results import curve
from domain.results.analysis import summarise_points
from tests.test_analysis import frame, point


def sweep(run_id: int, throughput: dict[int, float], **per_point: dict[int, float]) -> list[dict[str, Any]]:
    """One run's points at the given concurrencies, with per-point overrides."""
    rows = []
    for c, thr in throughput.items():
        extra = {column: values[c] for column, values in per_point.items()}
        rows.append(point(run_id, c, output_throughput=thr, **extra))
    return rows


# The real 0.5.23 sweep: c=1 ran cold at 35 tok/s against 783 at c=2 (1,101 % /
# 1,119 % efficiency); the later points scale sub-linearly as a warm server does.
REAL_SWEEP = {1: 35.0, 2: 783.0, 4: 1450.0, 8: 2600.0, 16: 4100.0}


def summary_of(*sweeps: dict[int, float], **per_point: dict[int, float]) -> pd.DataFrame:
    rows = [row for run_id, thr in enumerate(sweeps, start=1) for row in sweep(run_id, thr, **per_point)]
    return summarise_points(frame(*rows))


# -- the knee ------------------------------------------------------------------------------------


def test_the_knee_is_found_within_one_grid_step_on_200_noisy_sweeps() -> None:
    """200 sweeps on the default grid (1, 2, 4, 8, 12, 16, 24, 32), four curve families in
    turn, each point × a uniform ±3 % noise factor.  The true knee is the unchanged threshold
    rule (10 % per doubling) applied to the curve *without* noise: the smallest grid
    concurrency after which every grid step gains less than 10 % per doubling, "none" when
    the last step still gains that much (bench/curve_knee.py's docstring has the families).
    A hit is a knee within one grid step of the true one ("none" = the position after 32)."""
    rates = curve_knee.hit_rates(200, seed=0)
    print(f"knee within one grid step on 200 noisy sweeps: curve.knee_of {rates['knee_of']:.1%}, "
          f"raw per-step rule {rates['raw_steps']:.1%}")
    assert rates["knee_of"] >= 0.90
    assert rates["knee_of"] > rates["raw_steps"]


def test_noise_on_a_short_step_does_not_make_a_knee() -> None:
    # +20 % per doubling everywhere (no knee); +3 % at 24 and −3 % at 32 make the 0.41-doubling
    # 24→32 step read +3.9 % per doubling, which the raw per-step rule takes for the knee.
    cs = list(curve_knee.GRID)
    thr = [1000.0 * c ** math.log2(1.2) for c in cs]
    thr[-2], thr[-1] = thr[-2] * 1.03, thr[-1] * 0.97
    assert curve_knee.step_knee(np.array(cs), np.array(thr)) == 24
    assert curve.knee_of(cs, thr)[0] is None


CLEAR_KNEE = {1: 100, 2: 200, 4: 380, 8: 395, 16: 400}  # per doubling: +100 %, +90 %, +3.9 %, +1.3 %


def test_a_clear_knee_is_read_off_the_fitted_curve() -> None:
    row = curve.saturation_points(summary_of(CLEAR_KNEE)).iloc[0]
    assert (row["concurrency"], row["rule"], row["knee_concurrency"], row["knee_method"]) == (
        4, "throughput_gain", 4, "fit")
    still_scaling = curve.saturation_points(summary_of({1: 100, 2: 200, 4: 400, 8: 780, 16: 1500})).iloc[0]
    assert still_scaling["rule"] is None and still_scaling["knee_method"] == "fit"


def test_a_step_within_noise_of_the_threshold_may_move_the_knee_by_one_step() -> None:
    # 4→8 gains +8.6 % per doubling, within ±3 % noise of the 10 % threshold: the fitted
    # curve reads +10.4 % there and puts the knee one step later; the raw step said 4.
    thr = {1: 100, 2: 190, 4: 350, 8: 380, 16: 390}
    assert curve.knee_of(list(thr), list(thr.values())) == (8, "fit")
    assert curve_knee.step_knee(np.array(list(thr), dtype=float), np.array(list(thr.values()), dtype=float)) == 4


def test_a_shape_the_curve_cannot_take_falls_back_to_doubling_steps() -> None:
    # A flat step followed by growth: no saturating curve fits it, and the flat 1→2 step
    # is not the knee because 2→4 gains again.
    row = curve.saturation_points(summary_of({1: 100, 2: 105, 4: 200, 8: 205})).iloc[0]
    assert (row["knee_concurrency"], row["knee_method"]) == (4, "steps")


def test_short_sweeps_use_doubling_steps_and_a_single_point_has_no_knee() -> None:
    assert curve.knee_of([1, 2, 4], [100.0, 190.0, 200.0]) == (2, "steps")
    assert curve.knee_of([8], [100.0]) == (None, None)


def test_the_sla_half_is_unchanged() -> None:
    ttft = {1: 50.0, 2: 80.0, 4: 120.0, 8: 300.0, 16: 600.0}
    summary = summary_of(CLEAR_KNEE, ttft_p99_ms=ttft)
    same = curve.saturation_points(summary, sla_metric="ttft_p99", sla_threshold_ms=100.0).iloc[0]
    assert (same["concurrency"], same["rule"]) == (4, "both")
    later = curve.saturation_points(summary, sla_metric="ttft_p99", sla_threshold_ms=200.0).iloc[0]
    assert (later["concurrency"], later["rule"], later["sla_break_concurrency"]) == (4, "throughput_gain", 8)
    scaling = summary_of({1: 100, 2: 200, 4: 400, 8: 800}, ttft_p99_ms={1: 50.0, 2: 80.0, 4: 120.0, 8: 300.0})
    sla_only = curve.saturation_points(scaling, sla_metric="ttft_p99", sla_threshold_ms=100.0).iloc[0]
    assert sla_only["rule"] == "latency_sla" and sla_only["concurrency"] == 4 and pd.isna(sla_only["knee_concurrency"])
    assert list(sla_only.index) == list(curve.SATURATION_COLUMNS)


def test_rule_text_says_how_the_knee_was_read() -> None:
    fit = pd.Series({"rule": "throughput_gain", "knee_method": "fit"})
    assert curve.rule_text(fit, "en", gain_threshold_pct=10.0) == (
        "throughput gain below 10% per doubling (read off a saturating curve fitted to the whole sweep)")
    steps = pd.Series({"rule": "throughput_gain", "knee_method": "steps"})
    assert "2 倍以上離れたポイント" in curve.rule_text(steps, "ja", gain_threshold_pct=10.0)
    assert curve.rule_text(pd.Series({"rule": None}), "en") == "not saturated"


# -- cold first points and scaling efficiency ----------------------------------------------------


def test_the_real_sweeps_cold_first_point_is_badged_and_left_out_of_the_baseline() -> None:
    summary = summary_of(REAL_SWEEP)
    assert curve.cold_first_points(summary) == {(1, "short", 1)}
    table = curve.scaling_efficiency(summary)
    assert list(table.columns) == list(curve.SCALING_COLUMNS)
    assert list(table["cold"]) == [True, False, False, False, False]
    assert set(table["baseline_concurrency"]) == {2}
    warm = table[~table["cold"]]
    assert list(warm["efficiency"]) == pytest.approx([1.0, 1450 / 783 / 2, 2600 / 783 / 4, 4100 / 783 / 8])
    assert not warm["super_linear"].any()
    _no_silent_super_linear(table)


def test_a_kept_cold_point_stays_the_baseline_and_every_later_point_is_badged() -> None:
    summary = summary_of(REAL_SWEEP)
    table = curve.scaling_efficiency(summary, keep=[(1, "short", 1)])
    assert set(table["baseline_concurrency"]) == {1}
    assert table.iloc[1]["efficiency"] == pytest.approx(783 / 35 / 2)  # the 1,119 %
    assert list(table["super_linear"]) == [False, True, True, True, True]
    _no_silent_super_linear(table)


def test_the_cold_point_stays_out_of_the_knee_unless_kept() -> None:
    summary = summary_of(REAL_SWEEP)
    assert curve.saturation_points(summary).iloc[0]["knee_method"] == "fit"  # fitted on c = 2…16
    kept = curve.saturation_points(summary, keep=[(1, "short", 1)]).iloc[0]
    assert kept["knee_method"] == "steps"  # 35 → 783 is no saturating curve


def test_a_slightly_low_first_point_is_super_linear_not_cold() -> None:
    summary = summary_of({1: 80, 2: 190, 4: 360, 8: 700})  # 2 against 1: 119 %
    assert curve.cold_first_points(summary) == set()
    table = curve.scaling_efficiency(summary)
    assert set(table["baseline_concurrency"]) == {1}
    assert list(table["super_linear"]) == [False, True, True, True]
    _no_silent_super_linear(table)


def test_a_sweep_broken_past_its_first_step_has_no_cold_point_but_is_badged() -> None:
    summary = summary_of({1: 50, 2: 200, 4: 800, 8: 1500})  # 200 %, 200 %: the start itself is suspect
    assert curve.cold_first_points(summary) == set()
    _no_silent_super_linear(curve.scaling_efficiency(summary))


def test_two_points_are_enough_for_a_cold_first_point_and_each_run_has_its_own() -> None:
    summary = summary_of({1: 35, 2: 783}, {2: 200, 4: 360, 8: 600})
    assert curve.cold_first_points(summary) == {(1, "short", 1)}
    run2 = curve.scaling_efficiency(summary).query("run_id == 2")
    assert list(run2["efficiency"]) == pytest.approx([1.0, 0.9, 0.75]) and set(run2["baseline_concurrency"]) == {2}


def _no_silent_super_linear(table: pd.DataFrame) -> None:
    """No efficiency above 105 % without a badge (cold or super-linear)."""
    loud = table["efficiency"].gt(curve.SUPER_LINEAR_EFFICIENCY)
    assert (~loud | table["super_linear"] | table["cold"]).all()


def test_the_scaling_rule_is_stated_with_its_numbers() -> None:
    assert "1.3×" in curve.scaling_rule_text("en") and "105%" in curve.scaling_rule_text("ja")


# -- goodput -------------------------------------------------------------------------------------


def requests(*rows: tuple[bool, float, float]) -> pd.DataFrame:
    """Per-request samples with the REQUEST_COLUMNS shape: (success, ttft_ms, tpot_ms)."""
    return pd.DataFrame([{"request_idx": i, "success": ok, "input_len": 128, "output_len": 64, "ttft_ms": ttft,
                          "tpot_ms": tpot, "e2e_ms": ttft + 63 * tpot, "itl_ms": [tpot] * 63, "start_s": 0.1 * i}
                         for i, (ok, ttft, tpot) in enumerate(rows)])


SAMPLES = requests(
    (True, 100.0, 10.0),  # good
    (True, 200.0, 10.0),  # good: at the TTFT limit passes (AIPerf: value <= limit)
    (True, 250.0, 10.0),  # TTFT over
    (True, 100.0, 30.0),  # TPOT over
    (True, 100.0, math.nan),  # one output token: no TPOT, so the TPOT limit is not met
    (False, math.nan, math.nan),  # failed
)


def test_goodput_counts_requests_meeting_every_limit_per_second() -> None:
    assert curve.goodput(SAMPLES, 2.0, ttft_ms=200.0, tpot_ms=20.0) == pytest.approx(2 / 2.0)
    assert curve.goodput(SAMPLES, 2.0, ttft_ms=200.0, tpot_ms=None) == pytest.approx(4 / 2.0)  # TTFT only
    assert curve.goodput(SAMPLES, 4.0, ttft_ms=None, tpot_ms=20.0) == pytest.approx(3 / 4.0)
    with pytest.raises(ValueError, match="at least one SLA limit"):
        curve.goodput(SAMPLES, 2.0, ttft_ms=None, tpot_ms=None)
    with pytest.raises(ValueError, match="positive benchmark duration"):
        curve.goodput(SAMPLES, 0.0, ttft_ms=200.0, tpot_ms=None)


def test_goodput_table_pools_repeats_and_says_why_a_point_has_none() -> None:
    summary = summary_of({1: 100, 2: 190})
    table = curve.goodput_table(summary, {(1, "short", 1): [(SAMPLES, 2.0), (SAMPLES, 3.0)]},
                                ttft_ms=200.0, tpot_ms=20.0)
    assert list(table.columns) == list(curve.GOODPUT_COLUMNS)
    first, second = table.iloc[0], table.iloc[1]
    assert (first["good_requests"], first["requests"], first["repeats_with_samples"]) == (4, 12, 2)
    assert first["goodput_rps"] == pytest.approx(4 / 5.0) and pd.isna(first["reason"])
    assert math.isnan(second["goodput_rps"]) and second["reason"] == "no_samples"
    assert "per-request" in curve.goodput_reason_text(second["reason"], "en")


def test_goodput_rule_names_its_limits() -> None:
    assert curve.goodput_rule_text("en", 200.0, 20.0) == (
        "Goodput: requests that succeeded and met TTFT ≤ 200 ms and TPOT ≤ 20 ms, per second of the benchmark "
        "(req/s, AIPerf's definition)")
    assert "TTFT ≤ 200 ms、TPOT ≤ 20 ms" in curve.goodput_rule_text("ja", 200.0, 20.0)


# -- Pareto --------------------------------------------------------------------------------------


def pareto_of(points: dict[str, tuple[float, float]], **extra: float) -> pd.DataFrame:
    """(interactivity tok/s/user, throughput per GPU) per point, on 2 GPUs, concurrency 1, 2, …"""
    rows = [point(1, c, gpu_count=2, tpot_median_ms=1000 / x, output_throughput=2 * y, **extra)
            for c, (x, y) in enumerate(points.values(), start=1)]
    return curve.pareto_points(summarise_points(frame(*rows)))


def test_the_frontier_marks_the_undominated_points() -> None:
    table = pareto_of({"A": (100, 100), "B": (50, 200), "C": (40, 150), "D": (100, 90), "E": (200, 10)})
    assert list(table["on_frontier"]) == [True, True, False, False, True]
    assert table.iloc[0]["interactivity"] == pytest.approx(100) and table.iloc[0]["throughput_per_gpu"] == 100


def test_throughput_per_gpu_uses_the_gpus_the_topology_uses() -> None:
    rows = [point(1, 1, gpu_count=8, gpus_used=2, output_throughput=1000.0),
            point(1, 2, gpu_count=8, gpus_used=None, output_throughput=1000.0)]
    table = curve.pareto_points(summarise_points(frame(*rows)))
    assert list(table["throughput_per_gpu"]) == [500.0, 125.0]


def test_the_tpot_statistic_is_selectable() -> None:
    rows = [point(1, 1, tpot_median_ms=10.0, tpot_p99_ms=40.0)]
    summary = summarise_points(frame(*rows))
    assert curve.pareto_points(summary)["interactivity"].iloc[0] == pytest.approx(100.0)
    assert curve.pareto_points(summary, tpot_metric="tpot_p99")["interactivity"].iloc[0] == pytest.approx(25.0)


def test_pareto_change_between_two_frontier_points() -> None:
    table = pareto_of({"A": (100, 100), "B": (50, 200), "C": (40, 150)})
    change = curve.pareto_change(table, (1, "short", 1), (1, "short", 2))
    assert change["problem"] is None
    assert change["interactivity_change_pct"] == pytest.approx(-50.0)
    assert change["throughput_per_gpu_change_pct"] == pytest.approx(100.0)
    assert curve.pareto_change_text(change, "en") == (
        "From run #1, short, c=1 to run #1, short, c=2: tok/s/user -50.0%, tok/s/GPU +100.0%.")
    assert "GPU あたり tok/s が +100.0%" in curve.pareto_change_text(change, "ja")


def test_pareto_change_says_which_point_is_off_the_front_or_missing() -> None:
    table = pareto_of({"A": (100, 100), "B": (50, 200), "C": (40, 150)})
    off = curve.pareto_change(table, (1, "short", 1), (1, "short", 3))
    assert (off["problem"], off["points"]) == ("not_on_frontier", [(1, "short", 3)])
    assert math.isnan(off["interactivity_change_pct"])
    assert curve.pareto_change_text(off, "en", {(1, "short", 3): "C"}) == (
        "C is not on the Pareto front; pick two points on the front.")
    missing = curve.pareto_change(table, (1, "short", 1), (9, "short", 1))
    assert (missing["problem"], missing["points"]) == ("missing", [(9, "short", 1)])


def test_pareto_change_refuses_points_of_two_scenarios() -> None:
    rows = [point(1, 1, tpot_median_ms=10.0), point(1, 1, scenario="long", tpot_median_ms=20.0)]
    table = curve.pareto_points(summarise_points(frame(*rows)))
    change = curve.pareto_change(table, (1, "short", 1), (1, "long", 1))
    assert change["problem"] == "different_scenarios"
    assert "シナリオが異なります" in curve.pareto_change_text(change, "ja")


# -- strings -------------------------------------------------------------------------------------


def test_every_curve_string_exists_in_both_languages() -> None:
    source = Path(curve.__file__).read_text(encoding="utf-8")
    literal = set(re.findall(r'"(curve\.[a-z_.]+)"', source))
    built = {f"curve.goodput.reason.{r}" for r in ("no_samples",)} | {
        f"curve.pareto.problem.{p}" for p in ("missing", "not_on_frontier", "different_scenarios")} | {
        f"curve.goodput.limit_{name}" for name in ("ttft", "tpot")}
    entries = catalogue()
    for key in literal | built:
        assert set(entries[key]) >= set(LANGUAGES), key
        assert all(t(key, lang, **_params()) for lang in LANGUAGES)


def _params() -> dict[str, str]:
    names = ("pct", "cold", "super_pct", "limits", "ms", "run_id", "scenario", "concurrency", "a", "b", "user",
             "gpu", "points")
    return dict.fromkeys(names, "x")
