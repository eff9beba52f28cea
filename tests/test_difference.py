"""The difference rule (domain/results/difference.py): a difference's interval from both
sides' intervals, the verdict read from it, and how often the compare table's verdict
calls two points different, on closed-loop synthetic points (TTFT and TPOT log-AR(1),
ρ = 0.6, 600 requests a point) written as the runner writes a measured point and as an
import's ``--output-details`` arrays are read."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench import interval_coverage as coverage
from domain.core.settings import Settings
from domain.results import analysis, difference
from domain.results.request_table import details_table
from runner.bench_client import MeasuredRequest, request_table
from tests.test_analysis import frame, point


def test_the_interval_of_a_ratio_holds_both_sides_noise() -> None:
    delta, low, high = difference.difference_interval(110.0, 5.5, 100.0, 5.0)
    assert delta == pytest.approx(10.0)
    # 5 % of each side, in quadrature: exp(±0.0707) around the ratio 1.1.
    assert low == pytest.approx((1.1 * math.exp(-math.hypot(0.05, 0.05)) - 1) * 100)
    assert high == pytest.approx((1.1 * math.exp(math.hypot(0.05, 0.05)) - 1) * 100)


def test_a_side_that_is_not_positive_falls_back_to_the_linear_rule() -> None:
    assert difference.difference_interval(-1.0, 3.0, 4.0, 4.0) == pytest.approx((-125.0, -250.0, 0.0))


@pytest.mark.parametrize("args", [(math.nan, 1.0, 100.0, 1.0), (100.0, 1.0, 0.0, 1.0), (100.0, math.nan, 90.0, 1.0)])
def test_no_interval_without_both_sides(args: tuple[float, float, float, float]) -> None:
    _delta, low, high = difference.difference_interval(*args)
    assert math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize(("delta", "low", "high", "direction", "expected"), [
    (0.2, -1.5, 1.8, "higher", "same"),          # spans zero, all within ±2 %
    (1.0, 0.5, 1.5, "lower", "small"),           # misses zero, under the threshold
    (6.0, 3.0, 9.0, "higher", "better"),
    (6.0, 3.0, 9.0, "lower", "worse"),
    (-5.0, -9.0, -0.1, "lower", "better"),
    (5.0, 1.0, 9.0, None, "changed"),
    (1.0, -4.0, 6.0, "higher", "cannot_tell"),   # spans zero and reaches past ±2 %
    (1.0, math.nan, math.nan, "higher", "uncertain"),
    (math.nan, math.nan, math.nan, "higher", "n/a"),
])
def test_the_verdict_is_read_from_the_interval(delta: float, low: float, high: float, direction: object,
                                               expected: str) -> None:
    assert difference.classify_interval(delta, low, high, direction, 2.0) == expected


def test_the_vectorised_rule_is_the_scalar_one() -> None:
    rng = np.random.default_rng(3)
    delta = rng.normal(0, 5, 300)
    low, high = delta - rng.uniform(0, 6, 300), delta + rng.uniform(0, 6, 300)
    direction = np.array([["higher", "lower", None][i] for i in rng.integers(0, 3, 300)], dtype=object)
    many = difference.classify_intervals(delta, low, high, direction, 2.5).tolist()
    assert many == [difference.classify_interval(d, a, b, r, 2.5)
                    for d, a, b, r in zip(delta, low, high, direction, strict=True)]


def test_the_threshold_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert difference.practical_threshold_pct(None) == difference.DEFAULT_PRACTICAL_THRESHOLD_PCT
    monkeypatch.setenv("BENCHDECK_PRACTICAL_THRESHOLD_PCT", "5")
    assert difference.practical_threshold_pct(Settings()) == 5.0
    assert difference.classify_interval(0.5, -4.0, 4.5, "higher", 5.0) == "same"
    with pytest.raises(ValueError, match="threshold"):
        difference.classify_interval(0.0, -1.0, 1.0, "higher", -1.0)


def test_the_interval_is_shown_beside_the_delta() -> None:
    assert analysis.delta_text(12.3, "better", "en", 8.06, 16.61) == "+12.3% [+8.1, +16.6]%"
    assert analysis.delta_text(3.0, "cannot_tell", "en", -1.0, 7.0) == "+3.0%? [-1.0, +7.0]%"
    assert analysis.delta_text(0.1, "same", "en", -1.0, 1.2) == "≈ [-1.0, +1.2]%"


# -- false positives and power through the compare table -----------------------------------------

PAIRS, REQUESTS, RHO = 200, 600, 0.6
OUTPUT_LEN = 8
METRICS = [analysis.METRIC_BY_NAME["ttft_p50"], analysis.METRIC_BY_NAME["tpot_p50"]]
CALLED = ("better", "worse", "small", "changed")


def _measured(point: pd.DataFrame) -> pd.DataFrame:
    """The point as the runner writes it: the client's timings (s) through the runner's table."""
    requests = [MeasuredRequest(True, 512, OUTPUT_LEN, ttft / 1000, (ttft + tpot * (OUTPUT_LEN - 1)) / 1000,
                                [tpot / 1000] * (OUTPUT_LEN - 1), start)
                for ttft, tpot, start in zip(point["ttft_ms"], point["tpot_ms"], point["start_s"], strict=True)]
    return request_table(requests).to_pandas()


def _imported(point: pd.DataFrame) -> pd.DataFrame:
    """The point as an import's ``--output-details`` arrays give it (no start times: row order)."""
    record: dict[str, Any] = {
        "ttfts": (point["ttft_ms"] / 1000).tolist(),
        "itls": [[tpot / 1000] * (OUTPUT_LEN - 1) for tpot in point["tpot_ms"]],
        "input_lens": [512] * len(point), "output_lens": [OUTPUT_LEN] * len(point), "errors": [""] * len(point)}
    table = details_table(record)  # what db/store.py's import_runs writes for such a record
    assert table is not None
    return table.to_pandas()


def _verdicts(scale: float, write: Any, seed: int) -> pd.DataFrame:
    """The compare table's verdicts of ``PAIRS`` pairs, one pair per concurrency: the
    baseline drawn from the process, the run from it with latencies × ``scale``."""
    rng = np.random.default_rng(seed)
    rows, kept = [], {}
    for pair in range(PAIRS):
        for run_id, factor in ((1, 1.0), (2, scale)):
            samples = write(coverage.closed_loop_points(rng, REQUESTS, RHO, scale=factor)[0])
            point_id = 2 * pair + run_id
            kept[point_id] = samples
            stats = analysis.req.request_statistics(samples)
            rows.append(point(run_id, concurrency=pair + 1, point_id=point_id, completed=REQUESTS,
                              ttft_median_ms=stats["ttft_p50"], tpot_median_ms=stats["tpot_p50"]))
    table = analysis.compare_table(frame(*rows), 1, [1, 2], metrics=METRICS, requests=kept)
    return table[table["run_id"] == 2]


@pytest.mark.parametrize("write", [_measured, _imported], ids=["measured", "imported"])
def test_one_process_is_rarely_called_different_and_a_20_percent_change_is_found(write: Any) -> None:
    same = _verdicts(1.0, write, seed=11)
    slower = _verdicts(1.2, write, seed=12)
    for metric in ("ttft_p50", "tpot_p50"):
        false = same[same["metric"] == metric]["verdict"].isin(CALLED).mean()
        found = (slower[slower["metric"] == metric]["verdict"] == "worse").mean()
        print(f"\n{write.__name__[1:]} {metric}: same process called different in {false:.1%} of {PAIRS} pairs; "
              f"+20 % found in {found:.1%}")
        assert false <= 0.08, (metric, false)
        assert found >= 0.80, (metric, found)
