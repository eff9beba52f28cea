"""How each point's interval was made (domain/results/interval_notes.py): the ρ and n_eff
the compare page shows are the ones the interval was built from, measured on closed-loop
requests; an interval across repeats says so and has none."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench import interval_coverage as coverage
from domain.results import analysis, interval_notes
from tests.test_analysis import frame, point
from tests.test_difference import METRICS, _measured


def _compare() -> pd.DataFrame:
    """Run 1: one point of 600 correlated requests (ρ = 0.6); run 2: three repeats, no samples."""
    rng = np.random.default_rng(5)
    samples = _measured(coverage.closed_loop_points(rng, 600, 0.6)[0])
    stats = analysis.req.request_statistics(samples)
    rows = [point(1, 4, point_id=1, completed=600, ttft_median_ms=stats["ttft_p50"], tpot_median_ms=stats["tpot_p50"]),
            *(point(2, 4, repeat_idx=i, ttft_median_ms=100.0 + i, tpot_median_ms=20.0 + i) for i in range(3))]
    return analysis.compare_table(frame(*rows), 1, [1, 2], metrics=METRICS, requests={1: samples})


def test_the_page_shows_the_rho_and_n_eff_the_interval_was_built_from() -> None:
    compare = _compare()
    table = interval_notes.interval_rows(compare, ["ttft_p50"], "en")
    from_requests = table[table["Run"] == "#1"].iloc[0]
    source = compare[(compare["run_id"] == 1) & (compare["metric"] == "ttft_p50")].iloc[0]
    assert (from_requests["Lag-1 autocorrelation ρ"], from_requests["Effective sample n_eff"]) == (
        source["rho"], source["n_eff"])
    assert 0.3 < source["rho"] < 0.9 and source["n_eff"] < 600 / 2  # correlated: worth far fewer than 600
    assert from_requests["Interval"] == "from the requests (corrected for correlation)"
    repeats = table[table["Run"] == "#2"].iloc[0]
    assert repeats["Interval"] == "t interval across repeats" and np.isnan(repeats["Lag-1 autocorrelation ρ"])
    summary = interval_notes.correlation_summary(compare, ["ttft_p50"], "ja")
    assert summary is not None and f"{source['rho']:.2f}" in summary
    assert interval_notes.correlation_summary(compare[compare["run_id"] == 2], ["ttft_p50"], "en") is None
