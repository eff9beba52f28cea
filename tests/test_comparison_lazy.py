"""A comparison's saturation, Pareto and estimate frames (domain/compare/comparison.py) are
computed when first read and then kept: the compare page's first view reads none of them,
so building a comparison must not pay for them, and reading one twice must not pay twice.
On points read from a real DuckDB file; the values are the analyses' own (same call)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from bench import synthetic
from db import Store
from domain.compare.comparison import build_comparison
from domain.results import curve, estimate_overlay
from domain.results.frames import points_frame
from tests.support.calls import counted

RUNS = [3, 2, 1]
LAZY = [("saturation", curve, "saturation_points"), ("pareto", curve, "pareto_points"),
        ("estimates", estimate_overlay, "estimates_for")]


@pytest.mark.parametrize(("attribute", "module", "name"), LAZY)
def test_a_lazy_analysis_is_computed_on_first_read_and_once(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                             attribute: str, module: Any, name: str) -> None:
    synthetic.fill(store, runs=3, points_per_run=6)
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(RUNS))
    calls: list[str] = []
    monkeypatch.setattr(module, name, counted(getattr(module, name), name, calls))
    c = build_comparison(frame, 3, [2, 1], "en", gain_threshold_pct=7.0, sla_metric="ttft_p99",
                         sla_threshold_ms=500.0)
    assert calls == []
    first = getattr(c, attribute)
    assert getattr(c, attribute) is first
    assert len(calls) == 1
    assert not first.empty


def test_the_saturation_read_later_uses_the_comparisons_rule(store: Store) -> None:
    """The rule's threshold, SLA and kept cold points given to build_comparison are the ones
    the later read applies."""
    synthetic.fill(store, runs=3, points_per_run=6)
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(RUNS))
    c = build_comparison(frame, 3, [2, 1], "en", gain_threshold_pct=7.0, sla_metric="ttft_p99",
                         sla_threshold_ms=500.0)
    expected = curve.saturation_points(c.summary, gain_threshold_pct=7.0, sla_metric="ttft_p99",
                                       sla_threshold_ms=500.0)
    pd.testing.assert_frame_equal(c.saturation, expected)
    default = build_comparison(frame, 3, [2, 1], "en")
    pd.testing.assert_frame_equal(default.saturation, curve.saturation_points(default.summary))
