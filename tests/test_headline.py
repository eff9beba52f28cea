"""The headline of a comparison (domain/results/headline.py): the verdict and the change
under test from the older run to the newer, whichever run is the baseline, first in the
verdict box's lines and in every export."""

from __future__ import annotations

import pytest

from domain.compare.comparison import Comparison, build_comparison
from domain.render import tables
from tests.test_analysis import frame, point

ROWS = (point(1, server_args={"max-running-requests": 64}), point(2, server_args={"max-running-requests": 128}))
EXPECTED = {
    ("en", 1): "#2 vs #1 (baseline): comparable; the change under test: --max-running-requests 64 → 128 "
               "(Serving settings, low to medium risk)",
    ("en", 2): "#2 (baseline) vs #1: comparable; the change under test: --max-running-requests 64 → 128 "
               "(Serving settings, low to medium risk)",
    ("ja", 1): "#2 対 #1(ベースライン): 比較可能。検証した変更: --max-running-requests 64 → 128"
               "(serving設定、リスク低から中)",
    ("ja", 2): "#2(ベースライン) 対 #1: 比較可能。検証した変更: --max-running-requests 64 → 128"
               "(serving設定、リスク低から中)",
}


def compared(lang: str, baseline: int) -> Comparison:
    return build_comparison(frame(*ROWS), baseline, [3 - baseline], lang)


@pytest.mark.parametrize(("lang", "baseline"), sorted(EXPECTED))
def test_the_change_reads_from_the_older_run_to_the_newer_whichever_is_the_baseline(lang: str, baseline: int) -> None:
    c = compared(lang, baseline)
    assert c.headline_lines == [EXPECTED[(lang, baseline)]]
    assert tables.export_head(c)[0] == EXPECTED[(lang, baseline)]
    csv_text = tables.comparison_csv(c).decode(tables.CSV_ENCODING)
    assert csv_text.splitlines()[0] == "# " + EXPECTED[(lang, baseline)]
    assert tables.comparison_markdown(c).splitlines()[0].startswith("- \\#2")


def test_a_not_comparable_verdict_names_its_values_in_the_same_direction() -> None:
    rows = (point(1, server_args={"kv-cache-dtype": "auto"}), point(2, server_args={"kv-cache-dtype": "fp8_e4m3"}))
    [line] = build_comparison(frame(*rows), 2, [1], "en").headline_lines
    assert line.startswith("#2 (baseline) vs #1: not comparable — --kv-cache-dtype (Quantization): auto → fp8_e4m3")
    assert line.endswith("the change under test: --kv-cache-dtype auto → fp8_e4m3 (Quantization, high risk)")


def test_no_flag_changed_says_so() -> None:
    [line] = build_comparison(frame(point(1), point(2)), 1, [2], "en").headline_lines
    assert line == "#2 vs #1 (baseline): comparable; the change under test: no server flag changed"
