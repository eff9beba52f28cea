"""The Pareto view's marks from the points' intervals (domain/results/curve.py
``pareto_points``' ``pareto_mark``): dominated even at the ends of both intervals, on the
front wherever within them, or ambiguous."""

from __future__ import annotations

import math

import pandas as pd

from domain.results import curve


def summary(points: list[tuple[float, float, float, float]]) -> pd.DataFrame:
    """(output tok/s, its half-width, TPOT p50 ms, its half-width) per point, one scenario, one GPU."""
    return pd.DataFrame({
        "run_id": range(1, len(points) + 1), "run_name": "r", "source": "measured", "scenario": "short",
        "concurrency": 8, "gpu_count": 1,
        "output_tok_s": [p[0] for p in points], "output_tok_s_ci": [p[1] for p in points],
        "tpot_p50": [p[2] for p in points], "tpot_p50_ci": [p[3] for p in points],
    })


def test_points_far_apart_are_front_and_dominated() -> None:
    marks = curve.pareto_points(summary([(1000.0, 10.0, 20.0, 0.5), (800.0, 10.0, 25.0, 0.5)]))["pareto_mark"]
    assert marks.tolist() == ["front", "dominated"]


def test_intervals_that_overlap_the_front_are_ambiguous() -> None:
    marks = curve.pareto_points(summary([(1000.0, 40.0, 20.0, 1.0), (980.0, 40.0, 20.5, 1.0)]))["pareto_mark"]
    assert marks.tolist() == ["ambiguous", "ambiguous"]  # either could beat the other within the intervals


def test_without_intervals_the_marks_are_the_point_frontier() -> None:
    points = [(1000.0, math.nan, 20.0, math.nan), (800.0, math.nan, 25.0, math.nan), (1200.0, math.nan, 30.0, math.nan)]
    table = curve.pareto_points(summary(points))
    assert table["pareto_mark"].tolist() == ["front", "dominated", "front"]
    assert (table["pareto_mark"] == "front").tolist() == table["on_frontier"].tolist()
