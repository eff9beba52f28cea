"""Badges for artifacts of the measuring method (domain/results/method_badges.py): each
fires on the case built for it, with the numbers behind it, and stays silent on a steady
point; the ramp badge on the real client's records against a cold-started emulator
(tests/fixtures/ramp_in_window/, imported: a burst point fires, the steady one does not; the
aggregate-only cold sweep is in tests/test_cold_sweep_fixture.py); every badge is
labelled and explained in both languages, and reaches the comparison's badge table."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from db.sample_files import SampleFiles
from domain.compare.comparison import build_comparison
from domain.core.i18n import LANGUAGES, t
from domain.results.method_badges import (
    METHOD_BADGES,
    Issued,
    lengths_shrunk,
    method_badges,
    ramp_of,
    same_config_runs,
    trend_of,
)
from domain.results.validity import badge_explanation, badge_label
from tests.conftest import ROOT

RAMP_FIXTURE = ROOT / "tests" / "fixtures" / "ramp_in_window" / "points-0.5.23.jsonl"


@pytest.fixture(scope="module")
def imported_ramp(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, pd.DataFrame, SampleFiles]:
    """The fixture through the importer into a real DuckDB store: its run, its points frame
    (one point at c=8, repeat 0 the burst, repeat 1 the steady one) and their samples."""
    from db import Store
    from db.imported_runs import import_file
    from domain.importer.conditions import ImportConditions
    from domain.results.frames import points_frame
    from tests.support.actors import operator

    store = Store(tmp_path_factory.mktemp("ramp") / "bench.duckdb", lock_timeout_s=10)
    store.migrate()
    [run] = import_file(store, RAMP_FIXTURE, ImportConditions(), actor=operator("t")).run_ids
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run]))
    return run, frame, store.sample_files([int(p) for p in frame["point_id"]])


def fixture_points(imported: tuple[int, pd.DataFrame, SampleFiles]) -> dict[str, pd.DataFrame]:
    """The two records' per-request columns, as the compare page reads them."""
    _, frame, files = imported
    by_repeat = dict(zip(frame["repeat_idx"], frame["point_id"], strict=True))
    return {name: files.timelines()[int(by_repeat[repeat])] for name, repeat in (("burst", 0), ("steady", 1))}


def test_the_ramp_fires_on_the_burst_point_and_not_on_the_steady_one(
        imported_ramp: tuple[int, pd.DataFrame, SampleFiles]) -> None:
    points = fixture_points(imported_ramp)
    burst, steady = (ramp_of(points[name], 8) for name in ("burst", "steady"))
    assert burst is not None and steady is not None
    print(f"\nburst: {burst.detail()}\nsteady: {steady.detail()}")
    assert burst.fires and burst.ratio > 5 and (burst.wave, burst.affected, burst.n) == (8, 8, 64)
    assert not steady.fires and steady.affected == 0
    assert "8/64 requests (12 %)" in burst.detail()
    # Between the first and the last wave the throughput holds within its noise on both.
    trends = [trend_of(points[name], 8) for name in ("burst", "steady")]
    print("\n".join(f"{name}: {trend.detail()}" for name, trend in zip(("burst", "steady"), trends, strict=True)
                    if trend is not None))
    assert all(trend is not None and not trend.fires for trend in trends), trends


# -- synthetic points -----------------------------------------------------------------------------


def timeline(ttft: list[float] | np.ndarray, e2e: list[float] | np.ndarray | None = None,
             output_len: int = 32) -> pd.DataFrame:
    n = len(ttft)
    e2e_ms = np.asarray(e2e, float) if e2e is not None else np.asarray(ttft, float) + 600.0
    return pd.DataFrame({"request_idx": range(n), "success": True, "ttft_ms": ttft, "e2e_ms": e2e_ms,
                         "start_s": np.nan, "output_len": output_len})


def steady_ttft(n: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(80.0), 0.2, n)


def test_a_steady_point_has_no_ramp_and_a_burst_one_does() -> None:
    quiet = ramp_of(timeline(steady_ttft(80)), 8)
    assert quiet is not None and not quiet.fires
    ttft = steady_ttft(80)
    ttft[:8] *= 6.0
    loud = ramp_of(timeline(ttft), 8)
    assert loud is not None and loud.fires and loud.affected == 8
    small = ramp_of(timeline(ttft / 8.0), 8)  # the same shape around 10 ms: a few tens of ms of excess
    assert small is not None and small.ratio > 5 and not small.fires


def test_issue_times_order_the_requests_when_known() -> None:
    ttft = steady_ttft(40)
    ttft[-8:] *= 6.0  # stored last, but issued first
    points = timeline(ttft).assign(start_s=[*np.arange(8, 40) * 0.1, *np.zeros(8)])
    ramp = ramp_of(points, 8)
    assert ramp is not None and ramp.fires


def test_too_few_requests_cannot_tell() -> None:
    assert ramp_of(timeline(steady_ttft(6)), 1) is None
    assert ramp_of(timeline(steady_ttft(12)), 8) is None  # not two waves


def test_a_throughput_trend_is_steady_state_not_reached() -> None:
    rng = np.random.default_rng(5)
    e2e = np.linspace(1200.0, 600.0, 96) * rng.lognormal(0.0, 0.03, 96)  # the server speeds up all along
    trend = trend_of(timeline(steady_ttft(96), e2e), 8)
    assert trend is not None and trend.fires and trend.change > 0.3
    flat = trend_of(timeline(steady_ttft(96), 600.0 * rng.lognormal(0.0, 0.03, 96)), 8)
    assert flat is not None and not flat.fires
    assert trend_of(timeline(steady_ttft(10)), 8) is None


def test_a_trend_within_correlated_noise_does_not_fire() -> None:
    """An AR(1) wander (ρ = 0.9) moves the halves apart by chance; the effective sample sees it."""
    rng = np.random.default_rng(11)
    log_e2e = np.zeros(64)
    for i in range(1, 64):
        log_e2e[i] = 0.9 * log_e2e[i - 1] + rng.normal(0.0, 0.08)
    trend = trend_of(timeline(steady_ttft(64), 600.0 * np.exp(log_e2e)), 8)
    assert trend is not None and not trend.fires, trend


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"run_id": 1, "scenario": "s", "concurrency": 8, "repeat_idx": 0, "completed": 80,
                            "input_len": 1000, "output_len": 200, "random_range_ratio": 1.0,
                            "server_prompt_tokens": 80_000.0, "server_generation_tokens": 16_000.0,
                            "total_input_tokens": 80_000.0, "total_output_tokens": 16_000.0, "ttft_median_ms": 80.0}
    base.update(overrides)
    return base


def test_range_ratio_below_1_shrinks_the_lengths() -> None:
    assert lengths_shrunk(row()) is None
    shrunk = row(random_range_ratio=0.0, server_prompt_tokens=80 * 500.5, server_generation_tokens=80 * 100.5)
    assert lengths_shrunk(shrunk) == ("mean input 500/1000 (50 %), output 100/200 (50 %) at range ratio 0 "
                                      "(server counts)")
    client_only = row(random_range_ratio=0.8, server_prompt_tokens=None, server_generation_tokens=None,
                      total_input_tokens=80 * 900.0, total_output_tokens=80 * 170.0)
    assert lengths_shrunk(client_only) == "mean output 170/200 (85 %) at range ratio 0.8 (client counts)"
    assert lengths_shrunk({**shrunk, "dataset": "sharegpt"}) is None  # its lengths are its own


def test_a_point_far_slower_than_the_next_concurrency_is_a_ramp_without_samples() -> None:
    frame = pd.DataFrame([row(concurrency=1, ttft_median_ms=500.0), row(concurrency=2, ttft_median_ms=70.0),
                          row(concurrency=4, ttft_median_ms=80.0)])
    badges = method_badges(frame)
    assert list(zip(badges["concurrency"], badges["badge"], strict=True)) == [(1, "ramp_in_window")]
    assert badges.iloc[0]["detail"] == "median TTFT 7.1× that at c=2 (500 vs 70 ms): at least 50 % of the requests"


def test_samples_give_the_ramp_its_share_by_point_id() -> None:
    ttft = steady_ttft(64)
    ttft[:8] *= 6.0
    frame = pd.DataFrame([row(point_id=7)])
    badges = method_badges(frame, {7: timeline(ttft)})
    assert list(badges["badge"]) == ["ramp_in_window"] and "8/64 requests" in badges.iloc[0]["detail"]
    assert method_badges(frame, {7: timeline(steady_ttft(64))}).empty


# -- request-count sensitivity -----------------------------------------------------------------------


def summary_of(ttft_a: float, ttft_b: float, ci: float) -> pd.DataFrame:
    return pd.DataFrame({"run_id": [1, 2], "scenario": "s", "concurrency": 8, "ttft_p50": [ttft_a, ttft_b],
                         "ttft_p50_ci": ci})


def test_two_request_counts_at_one_concurrency_differing_beyond_the_intervals() -> None:
    frame = pd.DataFrame([row(run_id=1, requested=80), row(run_id=2, requested=320)])
    fired = method_badges(frame, summary=summary_of(80.0, 120.0, 5.0), same_config=[{1, 2}])
    fired = fired[fired["badge"] == "request_count_sensitive"]
    assert sorted(fired["run_id"]) == [1, 2]
    assert fired.iloc[0]["detail"] == ("median TTFT 80 ms at 80 requests vs 120 ms at 320 (#2), beyond the "
                                       "intervals (±5, ±5 ms)")
    within = method_badges(frame, summary=summary_of(80.0, 86.0, 5.0), same_config=[{1, 2}])
    assert "request_count_sensitive" not in set(within["badge"])
    other_config = method_badges(frame, summary=summary_of(80.0, 120.0, 5.0), same_config=[])
    assert "request_count_sensitive" not in set(other_config["badge"])


def test_runs_differing_only_in_their_request_count_are_one_configuration() -> None:
    matrix = pd.DataFrame({"run_id": [2, 2, 3, 3, 4, 4], "condition": ["num_prompts", "model"] * 3,
                           "state": ["differ", "match", "differ", "differ", "differ", "unknown"],
                           "baseline_value": ["80", "m", "80", "m", "80", "m"],
                           "value": ["320", "m", "320", "n", "320", "—"]})
    assert same_config_runs(matrix, 1) == [{1, 2}]
    assert same_config_runs(matrix[matrix["run_id"] != 2], 1) == []  # another model, or one not stated
    both_unstated = matrix[matrix["run_id"] == 4].assign(baseline_value="—")
    assert same_config_runs(both_unstated, 1) == [{1, 4}]


# -- labels and the comparison --------------------------------------------------------------------------


@pytest.mark.parametrize("badge", METHOD_BADGES)
def test_every_method_badge_has_a_label_a_short_form_and_one_sentence(badge: str) -> None:
    for lang in LANGUAGES:
        assert badge_label(badge, lang) and t(f"compare_page.badge_short.{badge}", lang)
        sentence = badge_explanation(badge, lang)
        end = "。" if lang == "ja" else "."
        assert sentence.endswith(end) and sentence.count(end) == 1, sentence


def test_the_comparison_carries_the_method_badges() -> None:
    from tests.test_badges import clean

    frame = pd.DataFrame([clean(concurrency=1, ttft_median_ms=400.0, point_id=1),
                          clean(concurrency=2, ttft_median_ms=60.0, point_id=2)])
    frame["run_name"], frame["gpu_count"] = "r", 1
    c = build_comparison(frame, 1, [1], "en")
    ramp = c.badges[c.badges["badge"] == "ramp_in_window"]
    assert list(ramp["concurrency"]) == [1] and ramp.iloc[0]["detail"].startswith("median TTFT 6.7× that at c=2")


def test_two_runs_differing_only_in_request_count_through_the_comparison() -> None:
    """The comparison's own summary intervals (bootstrapped from the requests) and its
    comparability matrix decide: 80 vs 320 requests at c=8, median TTFT 80 vs 120 ms."""
    from tests.test_badges import clean

    rng = np.random.default_rng(1)

    def samples(n: int, ttft_ms: float) -> pd.DataFrame:
        ttft = rng.lognormal(np.log(ttft_ms), 0.1, n)
        return pd.DataFrame({"request_idx": range(n), "success": True, "input_len": 128, "output_len": 128,
                             "ttft_ms": ttft, "tpot_ms": 10.0, "e2e_ms": ttft + 1270.0,
                             "itl_ms": [[10.0] * 127] * n, "start_s": np.arange(n) * 0.1})

    frame = pd.DataFrame([clean(run_id=run, point_id=run, requested=n, completed=n, num_prompts=n,
                                server_prompt_tokens=128 * n, server_generation_tokens=128 * n, duration_s=n / 8)
                          for run, n in ((1, 80), (2, 320))]).assign(run_name=["a", "b"], gpu_count=1)
    c = build_comparison(frame, 1, [1, 2], "en", requests={1: samples(80, 80.0), 2: samples(320, 120.0)})
    fired = c.badges[c.badges["badge"] == "request_count_sensitive"]
    assert sorted(fired["run_id"]) == [1, 2], c.badges
    assert re.fullmatch(r"median TTFT \d+ ms at 80 requests vs \d+ ms at 320 \(#2\), beyond the intervals .*",
                        fired.iloc[0]["detail"]), fired


def test_no_false_ramp_or_trend_over_200_steady_points() -> None:
    """Independent requests (lognormal TTFT of sigma 0.4 and E2E of sigma 0.2, as the
    bench's synthetic samples) at the plan's default grid, ten requests per slot: the
    first wave's median and the halves' throughput stay within what chance explains."""
    rng = np.random.default_rng(17)
    fired = []
    for i in range(200):
        concurrency = (1, 2, 4, 8, 12, 16, 24, 32)[i % 8]
        n = 10 * concurrency
        points = Issued(rng.lognormal(np.log(50.0), 0.4, n), rng.lognormal(np.log(1000.0), 0.2, n), np.full(n, 128.0))
        ramp, trend = ramp_of(points, concurrency), trend_of(points, concurrency)
        fired += [(i, "ramp") for _ in [ramp] if ramp is not None and ramp.fires]
        fired += [(i, "trend") for _ in [trend] if trend is not None and trend.fires]
    assert fired == []


def test_the_imported_fixture_is_badged_from_the_columns_the_page_reads(
        imported_ramp: tuple[int, pd.DataFrame, SampleFiles]) -> None:
    """The comparison as the compare page builds it (pages/parts/selection.py,
    ``timelines``): the burst repeat is a ramp, read from the few per-request columns
    (db/sample_timelines.py), no samples file read whole."""
    run, frame, files = imported_ramp
    c = build_comparison(frame, run, [run], "en", timelines=files.timelines())
    ramp = c.badges[c.badges["badge"] == "ramp_in_window"]
    assert list(zip(ramp["concurrency"], ramp["repeat_idx"], strict=True)) == [(8, 0)], c.badges
    assert ramp.iloc[0]["detail"].endswith("8/64 requests (12 %) above 3×")
    assert files.read() == {}  # no samples file read whole: the badges read only their columns
