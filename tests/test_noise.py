"""Honest statistics (issue #15): percentiles pooled over the requests of all repeats, bootstrap
intervals over the requests of one point, and verdicts that mark a difference only when it
exceeds a noise estimate computed from the data.

Per-request samples are synthetic, drawn from known distributions (lognormal latencies, as
serving latencies are right-skewed), so each test knows the true answer: the true percentile
a 95 % interval should cover, a throughput change built in, or two runs drawn from one
distribution that must not read as different.  The points frame rows come from
tests/test_analysis.py::point, the same rows every analysis and export test uses.
"""

from __future__ import annotations

import math
import time
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from domain.core.i18n import LANGUAGES
from domain.results import analysis, difference
from domain.results import requests as req
from domain.results.analysis import compare_table, summarise_points
from tests.test_analysis import cell, frame, point

OUTPUT_LEN = 16


def samples(ttft_ms: np.ndarray, *, e2e_ms: np.ndarray | None = None, itl_ms: list[np.ndarray] | None = None,
            output_len: int = OUTPUT_LEN) -> pd.DataFrame:
    """Per-request samples (requests.REQUEST_COLUMNS) with the given TTFTs; E2E and ITL
    follow from a steady 10 ms per token unless given."""
    n = len(ttft_ms)
    e2e = ttft_ms + 10.0 * (output_len - 1) if e2e_ms is None else e2e_ms
    return pd.DataFrame({
        "request_idx": np.arange(n), "success": True, "input_len": 128, "output_len": output_len,
        "ttft_ms": ttft_ms, "tpot_ms": (e2e - ttft_ms) / (output_len - 1), "e2e_ms": e2e,
        "itl_ms": itl_ms if itl_ms is not None else [np.full(output_len - 1, 10.0) for _ in range(n)],
        "start_s": np.nan,
    })[list(req.REQUEST_COLUMNS)]


def measured(run_id: int, point_id: int, requests: pd.DataFrame, repeat_idx: int = 0,
             **overrides: Any) -> dict[str, Any]:
    """A points-frame row whose stored statistics are those of its requests, as the client
    computes them (recorded p50/p90/p99 = numpy percentiles over the same requests)."""
    computed = req.request_statistics(requests)
    row: dict[str, Any] = {"point_id": point_id, "repeat_idx": repeat_idx, "completed": len(requests),
                           "requested": len(requests)}
    for name, stat in (("ttft", "median"), ("tpot", "median"), ("itl", "median"), ("e2e", "median")):
        row[f"{name}_{stat}_ms"] = computed[f"{name}_p50"]
        row[f"{name}_p90_ms"], row[f"{name}_p99_ms"] = computed[f"{name}_p90"], computed[f"{name}_p99"]
    row.update(overrides)
    return point(run_id, **row)


# -- per-request statistics -------------------------------------------------------------------------


def test_request_statistics_follow_the_clients_definitions() -> None:
    rng = np.random.default_rng(1)
    ttft = rng.lognormal(3.0, 0.5, 200)
    itl = [rng.lognormal(2.0, 0.3, OUTPUT_LEN - 1) for _ in range(200)]
    table = samples(ttft, itl_ms=itl)
    table.loc[5, "success"] = False  # a failed request counts in no latency
    computed = req.request_statistics(table)
    kept = np.delete(ttft, 5)
    assert computed["n"] == 199
    assert computed["ttft_p50"] == np.median(kept) and computed["ttft_p99"] == np.percentile(kept, 99)
    assert computed["itl_p90"] == np.percentile(np.concatenate(itl[:5] + itl[6:]), 90)  # gaps pooled


def test_pooled_p99_is_the_p99_of_all_requests_not_the_mean_of_p99s() -> None:
    # Repeat 0 is calm, repeat 1 has a slow tail: 100 requests each.
    calm = samples(np.linspace(10.0, 20.0, 100))
    tail = samples(np.concatenate([np.linspace(10.0, 20.0, 90), np.linspace(200.0, 400.0, 10)]))
    rows = [measured(1, 11, calm, repeat_idx=0), measured(1, 12, tail, repeat_idx=1)]
    summary = summarise_points(frame(*rows), requests={11: calm, 12: tail}).iloc[0]
    both = np.concatenate([calm["ttft_ms"], tail["ttft_ms"]])
    assert summary["ttft_p99"] == np.percentile(both, 99)
    assert summary["ttft_p99_basis"] == "pooled" and summary["ttft_p99_n"] == 200
    mean_of_p99s = (np.percentile(calm["ttft_ms"], 99) + np.percentile(tail["ttft_ms"], 99)) / 2
    assert abs(summary["ttft_p99"] - mean_of_p99s) > 50.0  # 380 ms pooled against 199 ms averaged
    # Without the samples the same rows can only average the repeats' p99s, and say so.
    approximate = summarise_points(frame(*rows)).iloc[0]
    assert approximate["ttft_p99"] == pytest.approx(mean_of_p99s)
    assert approximate["ttft_p99_basis"] == "mean_of_repeats" and approximate["ttft_p99_n"] == 200


def test_pooling_needs_samples_for_every_repeat() -> None:
    first, second = samples(np.linspace(10.0, 20.0, 50)), samples(np.linspace(30.0, 40.0, 50))
    rows = [measured(1, 11, first, repeat_idx=0), measured(1, 12, second, repeat_idx=1)]
    summary = summarise_points(frame(*rows), requests={11: first}).iloc[0]  # repeat 1's file is gone
    assert summary["ttft_p50_basis"] == "mean_of_repeats" and summary["ttft_p50_ci_source"] == "repeats"


def test_p90_comes_from_the_samples_when_the_record_lacks_it() -> None:
    table = samples(np.linspace(10.0, 109.0, 100))
    row = measured(1, 7, table, ttft_p90_ms=None)  # clients before 0.5.9 write no p90
    summary = summarise_points(frame(row), requests={7: table}).iloc[0]
    assert summary["ttft_p90"] == np.percentile(table["ttft_ms"], 90)
    assert math.isnan(summarise_points(frame(row)).iloc[0]["ttft_p90"])  # nothing to compute it from


# -- the bootstrap --------------------------------------------------------------------------------


def test_bootstrap_interval_covers_the_true_percentile_at_the_nominal_rate() -> None:
    """200 points of 200 lognormal TTFTs each: the 95 % intervals of the median and the p90
    must cover the distribution's true value in about 95 % of them (binomial sd 1.5 %)."""
    mu, sigma, trials = 3.0, 0.6, 200
    truth = {"ttft_p50": math.exp(mu), "ttft_p90": math.exp(mu + sigma * NormalDist().inv_cdf(0.90))}
    rng = np.random.default_rng(15)
    covered = dict.fromkeys(truth, 0)
    for _ in range(trials):
        intervals = req.bootstrap_intervals(samples(rng.lognormal(mu, sigma, 200)), names=list(truth))
        for name, value in truth.items():
            covered[name] += intervals[name].low <= value <= intervals[name].high
    rates = {name: count / trials for name, count in covered.items()}
    print(f"coverage of the 95 % bootstrap interval over {trials} points: {rates}")
    assert all(0.89 <= rate <= 0.99 for rate in rates.values()), rates


def test_resampled_percentiles_equal_numpy_on_the_materialised_resamples() -> None:
    """The counts-based statistics give exactly numpy's percentile of each resample (TTFT)
    and the pooled-gap percentile within the bucketing's resolution (ITL)."""
    rng = np.random.default_rng(3)
    n = 120  # a p99 needs 100 requests before the bootstrap says anything
    itl = [rng.lognormal(2.0, 0.4, int(rng.integers(5, 40))) for _ in range(n)]
    table = samples(rng.lognormal(3.0, 0.7, n), itl_ms=itl)
    ours = req.iid_bootstrap(table, names=["ttft_p90", "itl_p99"], n_resamples=300, seed=5)

    def brute(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        rows = np.atleast_2d(idx).astype(int)
        ttft = np.percentile(table["ttft_ms"].to_numpy()[rows], 90, axis=-1)
        gaps = np.array([np.percentile(np.concatenate([itl[i] for i in row]), 99) for row in rows])
        return np.stack([ttft, gaps])

    theirs = stats.bootstrap((np.arange(n),), brute, n_resamples=300, method="percentile", vectorized=True,
                             rng=np.random.default_rng(5)).confidence_interval
    assert (ours["ttft_p90"].low, ours["ttft_p90"].high) == pytest.approx((theirs.low[0], theirs.high[0]), rel=1e-12)
    assert (ours["itl_p99"].low, ours["itl_p99"].high) == pytest.approx((theirs.low[1], theirs.high[1]), rel=0.02)
    assert ours["itl_p99"].estimate == np.percentile(np.concatenate(itl), 99)


def test_too_few_requests_give_no_interval_for_a_p99() -> None:
    ten = req.bootstrap_intervals(samples(np.linspace(10.0, 19.0, 10)))
    assert "ttft_p50" in ten and "ttft_p99" not in ten  # every resampled p99 is one of the top values
    assert req.min_requests_for(99.0) == 100 and req.min_requests_for(90.0) == 10 and req.min_requests_for(50.0) == 2
    assert req.bootstrap_intervals(samples(np.array([12.0]))) == {}


def test_throughput_interval_is_the_recorded_throughput_with_a_spread_from_the_latencies() -> None:
    rng = np.random.default_rng(4)
    ttft = rng.lognormal(3.0, 0.3, 400)
    table = samples(ttft, e2e_ms=ttft + rng.normal(500.0, 50.0, 400))
    duration = 400 * OUTPUT_LEN / 250.0  # recorded output throughput 250 tok/s
    interval = req.bootstrap_intervals(table, duration, names=["output_tok_s", "qps"])
    assert interval["output_tok_s"].estimate == pytest.approx(250.0)
    assert interval["qps"].estimate == pytest.approx(400 / duration)
    assert interval["output_tok_s"].low < 250.0 < interval["output_tok_s"].high
    # Fixed output lengths: the spread comes from the E2E latencies (CV ≈ 10 % / √400 ≈ 0.5 %).
    assert 0.002 < interval["output_tok_s"].half_width / 250.0 < 0.02


def test_a_point_of_1000_requests_bootstraps_quickly() -> None:
    """Every statistic of a 1,000-request point (128 tokens each) from one bootstrap of
    :data:`requests.N_RESAMPLES` resamples.  The bound is loose for a shared CI machine;
    the printed CPU time is the figure (79 ms best of 5 on the shared 2-core development
    machine, see requests.N_RESAMPLES)."""
    rng = np.random.default_rng(5)
    ttft = rng.lognormal(3.0, 0.5, 1000)
    table = samples(ttft, itl_ms=[rng.lognormal(2.0, 0.3, 127) for _ in range(1000)], output_len=128)
    names = [m.name for m in analysis.METRICS if m.from_requests]
    spent = []
    for _ in range(5):
        started = time.process_time()
        intervals = req.bootstrap_intervals(table, 60.0, names=names)
        spent.append(time.process_time() - started)
    print(f"bootstrap of {len(intervals)} statistics over 1,000 requests, {req.N_RESAMPLES} resamples: "
          f"{min(spent) * 1000:.0f} ms CPU (best of 5)")
    assert set(intervals) == set(names)
    assert min(spent) < 0.5


# -- verdicts -------------------------------------------------------------------------------------


def throughput_pair(e2e_sigma: float, requests: int) -> pd.DataFrame:
    """Two runs of one repeat, run 2 with +10 % output throughput; per-request E2E lognormal
    with the given spread around 1 s."""
    rng = np.random.default_rng(6)
    rows, kept = [], {}
    for run_id, throughput in ((1, 100.0), (2, 110.0)):
        table = samples(np.full(requests, 20.0), e2e_ms=1000.0 * rng.lognormal(0.0, e2e_sigma, requests))
        kept[run_id] = table
        rows.append(measured(run_id, run_id, table, output_throughput=throughput,
                             duration_s=requests * OUTPUT_LEN / throughput))
    return compare_table(frame(*rows), 1, [1, 2], requests=kept)


def test_ten_percent_more_throughput_is_better_when_requests_are_tight_and_cannot_be_told_when_noisy() -> None:
    tight = cell(throughput_pair(0.01, 200), run_id=2, metric="output_tok_s")
    assert (tight["verdict"], tight["noise_source"]) == ("better", "bootstrap")
    assert tight["delta_pct"] == pytest.approx(10.0) and tight["noise_pct"] < 1.0
    noisy = cell(throughput_pair(1.5, 20), run_id=2, metric="output_tok_s")
    assert (noisy["verdict"], noisy["noise_source"]) == ("cannot_tell", "bootstrap")
    assert noisy["delta_low_pct"] < 0.0 < 10.0 < noisy["delta_high_pct"]
    assert noisy["noise_pct"] > 10.0


def test_no_data_for_a_noise_estimate_is_uncertain_and_never_coloured() -> None:
    table = compare_table(frame(point(1, output_throughput=100.0), point(2, output_throughput=150.0)), 1, [1, 2])
    row = cell(table, run_id=2, metric="output_tok_s")
    assert row["verdict"] == "uncertain" and pd.isna(row["noise_source"]) and math.isnan(row["noise_pct"])
    assert analysis.delta_text(row["delta_pct"], row["verdict"]) == "+50.0%?"
    wide = analysis.wide_table(table, "en", ["output_tok_s"])
    assert wide.iloc[0][("run2 (#2)", "Output tok/s Δ")] == "+50.0%?"


TTFT_METRICS = [analysis.METRIC_BY_NAME[name] for name in ("ttft_p50", "ttft_p99")]


def same_distribution(seed: int, requests: int) -> dict[int, pd.DataFrame]:
    """The per-request samples of two runs of one repeat whose TTFTs come from one
    heavy-tailed distribution (lognormal, σ = 1: the p99 is 10× the median)."""
    rng = np.random.default_rng(seed)
    return {run_id: samples(rng.lognormal(4.0, 1.0, requests)) for run_id in (1, 2)}


def p50_delta_pct(tables: dict[int, pd.DataFrame]) -> float:
    return analysis.delta_pct(np.median(tables[2]["ttft_ms"]), np.median(tables[1]["ttft_ms"]))


def compare_pair(tables: dict[int, pd.DataFrame]) -> pd.DataFrame:
    rows = [measured(run_id, run_id, table) for run_id, table in tables.items()]
    return compare_table(frame(*rows), 1, [1, 2], metrics=TTFT_METRICS, requests=tables)


def test_the_issues_case_a_large_p50_change_among_ten_requests_is_not_a_difference() -> None:
    """Issue #15: one repeat each, 10 requests, TTFT p50 +67 % between runs that only differ
    by chance.  The first seed whose pair shows a delta near +67 % is taken as found."""
    seed = next(s for s in range(1000) if 60.0 <= p50_delta_pct(same_distribution(s, 10)) <= 75.0)
    table = compare_pair(same_distribution(seed, 10))
    p50 = cell(table, run_id=2, metric="ttft_p50")
    assert p50["verdict"] == "cannot_tell" and p50["noise_source"] == "bootstrap", (seed, p50["delta_pct"])
    assert p50["delta_low_pct"] < 0.0 < p50["delta_high_pct"]
    p99 = cell(table, run_id=2, metric="ttft_p99")  # the maximum of 10: no estimate, not judged
    assert p99["verdict"] == "uncertain" and bool(p99["low_n"])


def test_runs_from_one_distribution_read_as_different_about_5_percent_of_the_time() -> None:
    """The false-alarm rate of the rule over 100 pairs of 10-request points drawn from one
    distribution: near the nominal 5 % of a 95 % interval, far from the fixed band's."""
    def marked(tables: dict[int, pd.DataFrame]) -> bool:  # compare_table's rule, without building the table
        base, run = (req.bootstrap_intervals(tables[i], names=["ttft_p50"])["ttft_p50"] for i in (1, 2))
        noise, _ = analysis.noise_band_pct(base.estimate, run.half_width, base.half_width, "bootstrap", "bootstrap")
        delta, low, high = difference.difference_interval(run.estimate, run.half_width, base.estimate,
                                                          base.half_width)
        return analysis.verdict(delta, noise, "lower", interval=(low, high)) in ("better", "worse", "small")

    flagged = sum(marked(same_distribution(seed, 10)) for seed in range(100))
    print(f"same-distribution pairs marked different: {flagged} of 100")
    assert flagged <= 12


def test_low_n_p99_is_true_at_10_requests_and_false_at_1000() -> None:
    rng = np.random.default_rng(8)
    few, many = samples(rng.lognormal(3.0, 0.5, 10)), samples(rng.lognormal(3.0, 0.5, 1000))
    rows = [measured(1, 1, few), measured(1, 2, many, concurrency=2)]
    summary = summarise_points(frame(*rows), requests={1: few, 2: many}).set_index("concurrency")
    assert bool(summary.loc[1, "low_n_p99"]) and not bool(summary.loc[2, "low_n_p99"])
    assert summary.loc[1, "ttft_p99_n"] == 10 and summary.loc[2, "ttft_p99_n"] == 1000
    # Without samples the record's completed count says the same.
    assert bool(summarise_points(frame(measured(1, 1, few))).iloc[0]["low_n_p99"])


def test_repeats_with_samples_use_the_two_level_bootstrap_and_the_t_interval_without() -> None:
    from domain.results import repeat_bootstrap

    rng = np.random.default_rng(9)
    rows, kept = [], {}
    for run_id in (1, 2):
        for repeat in range(3):
            point_id = run_id * 10 + repeat
            kept[point_id] = samples(rng.lognormal(3.0, 0.3, 200))
            rows.append(measured(run_id, point_id, kept[point_id], repeat_idx=repeat))
    table = compare_table(frame(*rows), 1, [1, 2], requests=kept)
    row = cell(table, run_id=2, metric="ttft_p50")
    assert row["noise_source"] == "repeats" and row["basis"] == "pooled" and row["n"] == 600
    two_level = repeat_bootstrap.two_level_intervals([kept[20], kept[21], kept[22]], ["ttft_p50"])["ttft_p50"]
    assert row["ci"] == two_level.half_width
    # A throughput is a mean over repeats: its interval stays the t interval of the repeats' values.
    throughput = cell(table, run_id=2, metric="output_tok_s")
    assert throughput["basis"] == "mean_of_repeats"
    assert cell(compare_table(frame(*rows), 1, [1, 2]), run_id=2, metric="ttft_p50")["basis"] == "mean_of_repeats"


def test_the_rule_is_described_in_both_languages() -> None:
    for lang in LANGUAGES:
        text = analysis.noise_rule_text(lang)
        assert str(req.N_RESAMPLES) in text and analysis.UNCERTAIN_MARK in text and "100" in text
        assert analysis.noise_source_text(None, lang) and analysis.noise_source_text("repeats+bootstrap", lang)
        assert analysis.basis_text("pooled", lang) and "100" in analysis.low_n_text(lang)
