"""The page benchmark's lines (bench/pages_browser.py): a cold time is the median of the
app starts' first visits, printed with the fastest and slowest, and a visit that never
settled is counted and left out, not averaged in."""

from __future__ import annotations

import math

from bench.pages_browser import PageTimes, Visit, _line


def _visits(*settled: float) -> list[Visit]:
    return [Visit(s / 2, s) for s in settled]


def test_the_cold_time_is_the_median_of_the_starts_with_its_spread() -> None:
    line = _line("compare", PageTimes(_visits(2.4, 1.5, 1.7), _visits(1.0, 1.2, 1.1), _visits(0.3, 0.4, 0.5)))
    assert line.split() == ["compare", "cold", "0.85", "/", "1.70", "[1.50–2.40]", "|", "reload", "0.55", "/",
                            "1.10", "|", "in", "app", "0.20", "/", "0.40"]


def test_a_visit_that_never_settled_is_left_out_and_said() -> None:
    cold = [*_visits(1.6, 1.8), Visit(math.nan, math.nan)]
    line = _line("run", PageTimes(cold, _visits(1.0), _visits(0.3)))
    assert "cold  0.85 /  1.70 [1.60–1.80]" in line and "(1 visits never settled: left out)" in line
