"""Per-point intervals under correlated requests (domain/results/requests.py: the
effective-sample-size correction).  The full coverage table (n ∈ {100, 240, 1000},
ρ ∈ {0, 0.3, 0.6}, 400 points a cell) is ``python -m bench interval_coverage``; this runs
a smaller one, seeded, and the parts of the correction one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench import interval_coverage as coverage
from domain.results import requests as req


def test_intervals_cover_correlated_points_where_the_iid_bootstrap_does_not() -> None:
    rows = coverage.coverage_table(150, sizes=(100, 240), rhos=(0.0, 0.6), seed=7)
    print("\n" + coverage.table_text(rows, 150))
    for _n, rho, cell in rows:
        for name, (kept, iid) in cell.items():
            # 150 points: a true 95 % reads 91.5–98.5 % in all but a few seeds in a thousand.
            assert 91.0 <= kept <= 98.7, (name, rho, kept)
            if rho == 0.6:
                assert iid < 88.0, (name, iid)  # the i.i.d. interval is too narrow here


def test_the_lag1_autocorrelation_is_read_from_the_series() -> None:
    rng = np.random.default_rng(5)
    for rho in (0.0, 0.3, 0.6):
        estimates = [req.lag1_autocorrelation(np.exp(coverage.ar1(rng, 400, rho)[0])) for _ in range(60)]
        assert np.mean(estimates) == pytest.approx(max(rho, 0.02), abs=0.04)
    assert math.isnan(req.lag1_autocorrelation(np.array([1.0, 2.0])))


def test_the_inflation_of_a_mean_and_of_a_median_follow_the_ar1_model() -> None:
    # A mean of an AR(1): (1 + ρ) / (1 − ρ) for a long series.
    assert req.variance_inflation(0.6, 100_000) == pytest.approx(4.0, rel=1e-3)
    # A median: indicators of a Gaussian copula correlate as (2/π) arcsin(ρ^k).
    lags = np.arange(1, 200)
    expected = 1 + 2 * np.sum((2 / np.pi) * np.arcsin(0.6 ** lags))
    assert req.variance_inflation(0.6, 100_000, 50.0) == pytest.approx(expected, rel=1e-3)
    assert req.variance_inflation(0.6, 100_000, 90.0) < req.variance_inflation(0.6, 100_000, 50.0)
    assert req.variance_inflation(math.nan, 100) == req.variance_inflation(0.0, 100) == 1.0


def test_each_interval_keeps_its_correlation_and_effective_sample() -> None:
    point = coverage.closed_loop_points(np.random.default_rng(1), 600, 0.6)[0]
    memo: req.BootstrapMemo = {}
    intervals = req.bootstrap_intervals(point, names=("ttft_p50", "ttft_mean", "tpot_p90", "output_tok_s"), memo=memo)
    for interval in intervals.values():
        assert 0.4 < interval.rho < 0.8
        assert interval.n_eff < interval.n / 1.5
        assert interval.low < interval.estimate < interval.high
    kept = req.kept_intervals(memo, None, ("ttft_p50", "ttft_mean", "tpot_p90", "output_tok_s"))
    assert kept == intervals


def test_correlation_is_measured_in_completion_order() -> None:
    point = coverage.closed_loop_points(np.random.default_rng(2), 300, 0.6)[0]
    shuffled = point.sample(frac=1.0, random_state=3).reset_index(drop=True)  # rows out of order, times kept
    assert req.bootstrap_intervals(shuffled, names=("ttft_p50",)) == req.bootstrap_intervals(point, names=("ttft_p50",))


def test_the_summary_and_the_compare_table_carry_the_correlation_and_effective_sample() -> None:
    from domain.results.analysis import METRIC_BY_NAME, compare_table, summarise_points
    from tests.test_analysis import frame, point

    rng = np.random.default_rng(6)
    kept = {i: coverage.closed_loop_points(rng, 400, 0.6)[0] for i in (1, 2)}
    rows = [point(run_id, point_id=run_id, completed=400,
                  ttft_median_ms=req.request_statistics(kept[run_id])["ttft_p50"]) for run_id in (1, 2)]
    metrics = [METRIC_BY_NAME["ttft_p50"]]
    summary = summarise_points(frame(*rows), metrics, requests=kept)
    assert (0.4 < summary["ttft_p50_rho"]).all() and (summary["ttft_p50_n_eff"] < 400 / 1.5).all()
    table = compare_table(frame(*rows), 1, [1, 2], metrics=metrics, requests=kept)
    assert table.loc[table["run_id"] == 2, "n_eff"].iloc[0] == summary.loc[1, "ttft_p50_n_eff"]
    without = summarise_points(frame(*rows), metrics)  # no samples: no per-request correlation
    assert without["ttft_p50_rho"].isna().all()
