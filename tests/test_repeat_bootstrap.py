"""The interval of a point measured in several repeats (domain/results/repeat_bootstrap.py:
repeats, then requests within each), on synthetic repeats whose launches may differ by an
offset: TTFT log-normal (median 200 ms, log-sd 0.5) times exp(δ), δ ~ N(0, τ²) per repeat,
so the process's median over launches is 200 ms whatever τ."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench import interval_coverage as coverage
from domain.results import repeat_bootstrap as two_level
from domain.results import requests as req
from domain.results.analysis import summarise_points
from tests.test_analysis import frame
from tests.test_noise import measured

MEDIAN = coverage.true_value("ttft_p50")
RESAMPLES = 400  # enough for a 95 % interval's ends in a test; the page uses req.N_RESAMPLES


def launches(rng: np.random.Generator, repeats: int, n: int, tau: float, rho: float = 0.0) -> list[pd.DataFrame]:
    """``repeats`` repeats of ``n`` requests, each launch's latencies × exp(N(0, tau²))."""
    return [coverage.closed_loop_points(rng, n, rho, scale=float(np.exp(tau * rng.standard_normal())))[0]
            for _ in range(repeats)]


def pooled_and_two_level(repeats: list[pd.DataFrame]) -> tuple[req.Interval, req.Interval]:
    pooled = req.bootstrap_intervals(req.pooled(repeats), names=("ttft_p50",))["ttft_p50"]
    return pooled, two_level.two_level_intervals(repeats, ["ttft_p50"], n_resamples=RESAMPLES)["ttft_p50"]


def test_with_a_launch_offset_the_interval_is_wider_and_covers_the_launch_distribution() -> None:
    rng = np.random.default_rng(41)
    draws, covered, widths = 40, [0, 0], []
    for _ in range(draws):
        pooled, both = pooled_and_two_level(launches(rng, 5, 150, tau=0.15))
        covered[0] += pooled.low <= MEDIAN <= pooled.high
        covered[1] += both.low <= MEDIAN <= both.high
        widths.append(both.half_width / pooled.half_width)
    print(f"\nτ = 0.15, 5 repeats × 150: pooled covers {covered[0]}/{draws}, two-level {covered[1]}/{draws}; "
          f"width ratio median {np.median(widths):.2f}")
    # The pooled requests' interval holds one launch's noise only: it misses the launch spread.
    assert covered[0] <= 0.6 * draws
    # Five launches show (R − 1)/R of their spread (the module's docstring): a little under 95 %.
    assert covered[1] >= 0.8 * draws
    assert np.median(widths) > 2.0


def test_without_a_launch_offset_it_agrees_with_the_pooled_interval() -> None:
    rng = np.random.default_rng(42)
    ratios = []
    for _ in range(20):
        pooled, both = pooled_and_two_level(launches(rng, 3, 200, tau=0.0))
        assert both.estimate == pooled.estimate  # the value is the pooled requests' statistic
        ratios.append(both.half_width / pooled.half_width)
    # Each repeat's own noise is counted twice at most: sqrt((2R − 1)/R) ≈ 1.29 for three repeats.
    assert 0.9 < float(np.mean(ratios)) < 1.45, ratios


def test_correlated_repeats_are_drawn_as_their_effective_sample() -> None:
    rng = np.random.default_rng(43)
    independent, correlated = (np.concatenate([coverage.ar1(rng, 300, rho)[0] for _ in range(2)]) for rho in (0.0, 0.6))
    sizes = np.array([300, 300])
    assert (two_level.effective_draws(independent, sizes, "ttft_p50") > 250).all()
    # AR(1) at 0.6: a median's variance about 3 times an independent one's (requests.variance_inflation).
    assert two_level.effective_draws(correlated, sizes, "ttft_p50") == pytest.approx([100, 100], rel=0.3)


def test_the_summary_keeps_the_two_level_interval_and_reads_it_back() -> None:
    rng = np.random.default_rng(44)
    repeats = launches(rng, 3, 120, tau=0.1)
    rows = [measured(1, 10 + i, r, repeat_idx=i) for i, r in enumerate(repeats)]
    kept = {10 + i: r for i, r in enumerate(repeats)}
    memos: dict[int, req.BootstrapMemo] = {}
    first = summarise_points(frame(*rows), requests=kept, bootstrap_memos=memos).iloc[0]
    assert first["ttft_p50_ci_source"] == "repeats" and first["ttft_p50_basis"] == "pooled"
    assert first["ttft_p50_ci"] == two_level.two_level_intervals(repeats, ["ttft_p50"])["ttft_p50"].half_width
    assert set(memos) == {10} and any("two_level" in key for key in memos[10])
    # Read back from the memo, not resampled: an interval kept there is the one shown.
    [key] = [key for key in memos[10] if "two_level" in key]
    memos[10][key]["ttft_p50"][1:3] = [190.0, 210.0]
    again = summarise_points(frame(*rows), requests=kept, bootstrap_memos=memos).iloc[0]
    assert again["ttft_p50_ci"] == 10.0


def test_nothing_under_two_repeats_of_two_requests() -> None:
    rng = np.random.default_rng(45)
    one, tiny = launches(rng, 1, 50, 0.0), launches(rng, 2, 1, 0.0)
    assert two_level.two_level_intervals(one, ["ttft_p50"]) == {}
    assert two_level.two_level_intervals(tiny, ["ttft_p50"]) == {}
