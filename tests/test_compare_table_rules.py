"""The compare table fills its deltas, noise bands and verdicts for all rows at once
(``analysis._add_deltas``, ``analysis._low_n``); the rules are written for one row
(``delta_pct``, ``noise_band_pct``, ``verdict``, ``requests.min_requests_for``).  Every
row of generated tables must read the same both ways: missing values, a zero baseline,
the baseline's own rows, mixed noise sources, metrics with and without a direction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.results import analysis, difference
from domain.results import requests as req

BASELINE = 1
number = st.one_of(st.just(math.nan), st.just(0.0), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
half_width = st.one_of(st.just(math.nan), st.just(0.0), st.floats(min_value=0, max_value=1e5, allow_nan=False))
source = st.sampled_from(["repeats", "bootstrap", "exact"])
row = st.fixed_dictionaries({
    "run_id": st.sampled_from([BASELINE, 2, 3]),
    "value": number, "baseline_value": number, "ci": half_width, "baseline_ci": half_width,
    "ci_source": source, "baseline_ci_source": source,
    "direction": st.sampled_from(["higher", "lower", None]),
    "quantile": st.sampled_from([None, 50.0, 90.0, 99.0]),
    "n": st.one_of(st.just(math.nan), st.integers(min_value=0, max_value=300).map(float)),
    "baseline_n": st.one_of(st.just(math.nan), st.integers(min_value=0, max_value=300).map(float)),
})


def table_of(rows: list[dict[str, object]]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    # A missing half-width has no source, as in a summary (analysis.summarise_points).
    table["ci_source"] = [None if math.isnan(c) else s for c, s in zip(table["ci"], table["ci_source"], strict=True)]
    table["baseline_ci_source"] = [None if math.isnan(c) else s for c, s in
                                   zip(table["baseline_ci"], table["baseline_ci_source"], strict=True)]
    for column in ("direction", "quantile", "ci_source", "baseline_ci_source"):
        table[column] = pd.Series(table[column].tolist(), dtype=object)
    return table


def same(a: object, b: object) -> bool:
    return (analysis.is_missing(a) and analysis.is_missing(b)) or a == b


@settings(max_examples=200, deadline=None)
@given(st.lists(row, min_size=1, max_size=40))
def test_deltas_noise_and_verdicts_for_all_rows_equal_the_one_row_rules(rows: list[dict[str, object]]) -> None:
    table = table_of(rows)
    analysis._add_deltas(table, BASELINE)
    for r in table.to_dict("records"):
        if r["run_id"] == BASELINE:
            expected: tuple[object, ...] = (math.nan, math.nan, None, "baseline")
        elif analysis.is_missing(r["baseline_value"]):
            expected = (math.nan, math.nan, None, "n/a")
        else:
            delta = analysis.delta_pct(r["value"], r["baseline_value"])
            noise, noise_source = analysis.noise_band_pct(r["baseline_value"], r["ci"], r["baseline_ci"],
                                                          r["ci_source"], r["baseline_ci_source"])
            half = r["ci"] if not analysis.is_missing(noise) else math.nan
            _, low, high = difference.difference_interval(r["value"], half, r["baseline_value"], r["baseline_ci"])
            judged = analysis.verdict(delta, noise, r["direction"], interval=(low, high))
            expected = (delta, noise, noise_source, judged)
        got = (r["delta_pct"], r["noise_pct"], r["noise_source"], r["verdict"])
        assert all(same(g, e) for g, e in zip(got, expected, strict=True)), (r, expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(row, min_size=1, max_size=40))
def test_low_n_for_all_rows_equals_the_one_row_rule(rows: list[dict[str, object]]) -> None:
    table = table_of(rows)

    def low(quantile: object, n: object) -> bool:
        if analysis.is_missing(quantile) or analysis.is_missing(n):
            return False
        return float(n) < req.min_requests_for(float(quantile))

    expected = [low(q, n) or low(q, bn) for q, n, bn in zip(table["quantile"], table["n"], table["baseline_n"],
                                                               strict=True)]
    assert analysis._low_n(table).tolist() == expected


def test_a_p99_from_99_requests_on_the_baseline_side_is_low_n() -> None:
    table = table_of([{"run_id": 2, "value": 1.0, "baseline_value": 1.0, "ci": 0.1, "baseline_ci": 0.1,
                       "ci_source": "bootstrap", "baseline_ci_source": "bootstrap", "direction": "lower",
                       "quantile": 99.0, "n": 1000.0, "baseline_n": 99.0}])
    assert np.array_equal(analysis._low_n(table), [True])


def test_a_delta_is_judged_by_its_own_interval() -> None:
    """+10 % with 6 % and 8 % half-widths: the ratio's interval reaches below zero (cannot
    tell); with 3 % and 4 % it does not (better); +1 % with 0.5 % each misses zero but is
    under the threshold (small); +0.5 % with 1 % each lies within ±2 % (same)."""
    def judged(value: float, ci: float, base_ci: float) -> list[object]:
        table = table_of([{"run_id": 2, "value": value, "baseline_value": 100.0, "ci": ci, "baseline_ci": base_ci,
                           "ci_source": "repeats", "baseline_ci_source": "bootstrap", "direction": "higher",
                           "quantile": None, "n": math.nan, "baseline_n": math.nan}])
        analysis._add_deltas(table, BASELINE)
        return table.loc[0, ["noise_pct", "noise_source", "verdict"]].tolist()

    assert judged(110.0, 6.0, 8.0) == [10.0, "repeats+bootstrap", "cannot_tell"]
    assert judged(110.0, 3.0, 4.0)[2] == "better"
    assert judged(101.0, 0.3, 0.3)[2] == "small"
    assert judged(100.5, 0.5, 0.5)[2] == "same"
