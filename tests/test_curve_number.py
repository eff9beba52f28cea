"""One number per curve (domain/results/curve_number.py): output tok/s per GPU at a stated
interactivity read off the measured curve with its interval, never extrapolated, and the area
under the curve over the range every compared curve measured; on the deck's first slide."""

from __future__ import annotations

import io
import math

import pytest
from pptx import Presentation

from domain.compare.comparison import build_comparison
from domain.render.deck import comparison_deck
from domain.results import analysis, curve_number
from tests.test_analysis import frame, point

# (concurrency, TPOT p50 ms, output tok/s): interactivity 1000/TPOT = 100, 80, 50, 25 tok/s/user.
CURVE = ((1, 10.0, 100.0), (2, 12.5, 200.0), (4, 20.0, 400.0), (8, 40.0, 800.0))


def _rows(run_id: int, points: tuple[tuple[int, float, float], ...], repeats: int = 3) -> list[dict[str, object]]:
    """Each point ``repeats`` times, its throughput spread 0, −1, +1 (a t half-width of 2.48)."""
    return [point(run_id, c, repeat_idx=i, tpot_median_ms=tpot, output_throughput=thr + offset)
            for c, tpot, thr in points for i, offset in enumerate((0.0, -1.0, 1.0)[:repeats])]


def _numbers(*rows: dict[str, object], target: float) -> dict[int, curve_number.CurveNumber]:
    summary = analysis.summarise_points(frame(*rows))
    return {n.run_id: n for n in curve_number.curve_numbers(summary, "en", target)}


def test_the_number_is_read_off_the_curve_between_its_two_neighbours() -> None:
    at_point = _numbers(*_rows(1, CURVE), target=50.0)[1]
    assert at_point.value == pytest.approx(400.0)
    assert at_point.half_width == pytest.approx(4.303 / math.sqrt(3))  # the point's own t half-width
    between = _numbers(*_rows(1, CURVE), target=60.0)[1]
    w = (60.0 - 50.0) / (80.0 - 50.0)
    assert between.value == pytest.approx((1 - w) * 400.0 + w * 200.0)
    assert between.half_width == pytest.approx(math.hypot(1 - w, w) * 4.303 / math.sqrt(3))
    # The whole measured range: trapezoids 25→50→80→100 tok/s/user.
    assert between.area == pytest.approx(25 * 600 + 30 * 300 + 20 * 150) and between.area_range == (25.0, 100.0)
    assert curve_number.number_line(between, "en") == (
        "run1 (#1) · short: 333.3 ± 1.9 tok/s/GPU at 60 tok/s/user (95% interval); "
        "area under the curve 27,000 over 25.0–100.0 tok/s/user (tok/s/GPU × tok/s/user)")


def test_never_extrapolated_and_areas_compared_over_the_common_range() -> None:
    numbers = _numbers(*_rows(1, CURVE), *_rows(2, CURVE[:2]), target=50.0)
    short = numbers[2]
    assert short.value is None and short.span == (80.0, 100.0)
    assert numbers[1].area_range == short.area_range == (80.0, 100.0)
    assert numbers[1].area == pytest.approx(20 * 150) and short.area == pytest.approx(20 * 150)
    assert "50 tok/s/user not measured (the curve spans 80.0–100.0 tok/s/user)" in curve_number.number_line(short, "en")


def test_a_dominated_point_is_not_on_the_curve_and_one_repeat_has_no_made_up_interval() -> None:
    dominated = (*CURVE, (16, 45.0, 700.0))  # slower and less throughput than c=8: off the curve
    number = _numbers(*_rows(1, dominated, repeats=1), target=25.0)[1]
    assert number.value == pytest.approx(800.0) and number.half_width is None
    assert "(no interval: one repeat without per-request data)" in curve_number.number_line(number, "en")


def test_the_decks_first_slide_carries_each_curves_number() -> None:
    c = build_comparison(frame(*_rows(1, CURVE), *_rows(2, CURVE[:2])), 1, [2], "ja")
    first = Presentation(io.BytesIO(comparison_deck(c, chart_set=[]))).slides[0]
    text = "\n".join(shape.text_frame.text for shape in first.shapes if shape.has_text_frame)
    assert "run1 (#1) · short: 400.0 ± 2.5 tok/s/GPU" not in text  # Japanese deck: Japanese words
    assert "50 tok/s/user で 400.0 ± 2.5 tok/s/GPU（95% 区間）" in text
    assert "50 tok/s/user は測定範囲外（80.0〜100.0 tok/s/user）" in text
    assert "曲線下面積 3,000（80.0〜100.0 tok/s/user" in text
