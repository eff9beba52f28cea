"""The practical threshold (domain/results/difference.py): a delta beyond a tiny noise band
but under ``BENCHDECK_PRACTICAL_THRESHOLD_PCT`` (default 2 %) is a small change, never
coloured nor worded better/worse, on the compare page's tables and in every export, in
both languages; a delta beyond both is judged as before."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from domain.compare.comparison import Comparison, build_comparison
from domain.core.i18n import LANGUAGES, t
from domain.core.settings import Settings
from domain.render import deck, tables
from domain.results import analysis, difference
from pages.parts.compare_tables import VERDICT_STYLE, metric_table
from tests.test_analysis import cell, frame, point

SMALL_DELTAS_PCT = (0.04, 0.6, 1.9)  # 0.04 % is shown "+0.0%": the red "+0.0%"
LARGE_DELTA_PCT = 2.5
BASE_THROUGHPUT, BASE_TTFT = 1000.0, 50.0
SPREAD = 1e-4  # each side's repeats differ by ±0.0001: a noise band of about 0.00002 %


def repeats(run_id: int, delta_pct: float) -> list[dict[str, Any]]:
    """Three repeats of one point, ``delta_pct`` more output throughput and TTFT than the baseline."""
    factor = 1 + delta_pct / 100
    return [point(run_id, repeat_idx=i, output_throughput=BASE_THROUGHPUT * factor + offset,
                  ttft_median_ms=BASE_TTFT * factor + offset / 100)
            for i, offset in enumerate((-SPREAD, 0.0, SPREAD))]


def compared(lang: str) -> Comparison:
    runs = [repeats(1, 0.0)] + [repeats(2 + i, d) for i, d in enumerate((*SMALL_DELTAS_PCT, LARGE_DELTA_PCT))]
    return build_comparison(frame(*(row for run in runs for row in run)), 1, [2, 3, 4, 5], lang)


SMALL_RUNS, LARGE_RUN = (2, 3, 4), 5


@pytest.fixture(scope="module", params=LANGUAGES)
def comparison(request: pytest.FixtureRequest) -> Comparison:
    return compared(request.param)


def test_the_one_rule_for_one_delta_and_for_a_table_agree() -> None:
    deltas = np.array([0.0, 0.5, 1.9, 2.0, -2.5, math.nan, 3.0])
    noise = np.array([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, math.nan])
    direction = np.array(["higher"] * 7, dtype=object)
    many = difference.classify_many(deltas, noise, direction, 2.0).tolist()
    assert many == [difference.classify(d, n, "higher", 2.0) for d, n in zip(deltas, noise, strict=True)]
    assert many == ["same", "small", "small", "better", "worse", "n/a", "uncertain"]


def test_small_deltas_beyond_the_noise_are_small_and_larger_ones_judged(comparison: Comparison) -> None:
    for run_id in SMALL_RUNS:
        for metric in ("output_tok_s", "ttft_p50"):
            row = cell(comparison.compare, run_id=run_id, metric=metric)
            assert row["noise_pct"] < 0.001 < abs(row["delta_pct"]), (run_id, metric)  # beyond a tiny band
            assert row["verdict"] == difference.SMALL, (run_id, metric)
    assert cell(comparison.compare, run_id=LARGE_RUN, metric="output_tok_s")["verdict"] == "better"
    assert cell(comparison.compare, run_id=LARGE_RUN, metric="ttft_p50")["verdict"] == "worse"


def _judged_words(lang: str) -> list[str]:
    return [t(f"compare.verdict.{v}", lang) for v in ("better", "worse")]


def test_the_page_colours_only_the_delta_beyond_the_threshold(comparison: Comparison) -> None:
    lang = comparison.lang
    for metric in ("output_tok_s", "ttft_p50"):
        table, styles, _ = metric_table(comparison, metric, lang)
        for run_id in SMALL_RUNS:
            [text] = table[f"#{run_id}"].tolist()
            assert styles[f"#{run_id}"].tolist() == [""], (metric, run_id, text)
            assert t("stats.delta_small", lang, delta="").strip() in text
            assert not any(word in text for word in _judged_words(lang))
        assert styles[f"#{LARGE_RUN}"].tolist()[0] in (VERDICT_STYLE["better"], VERDICT_STYLE["worse"])
    assert f"±{difference.DEFAULT_PRACTICAL_THRESHOLD_PCT:g}%" in analysis.noise_rule_text(lang)


def _small_cells(text: str, lang: str) -> list[str]:
    """The delta texts of the small runs as every export writes them."""
    marks = [t("stats.delta_small", lang, delta=f"{d:+.1f}%") for d in SMALL_DELTAS_PCT]
    return [mark for mark in marks if mark in text]


def test_every_export_words_a_small_delta_as_small(comparison: Comparison) -> None:
    lang = comparison.lang
    csv_text = tables.comparison_csv(comparison).decode(tables.CSV_ENCODING)
    markdown = tables.comparison_markdown(comparison)
    slide_table = deck.metric_slide_table(comparison, "output_tok_s", "short").to_string()
    for name, text in (("csv", csv_text), ("markdown", markdown), ("deck table", slide_table)):
        assert len(_small_cells(text, lang)) == len(SMALL_DELTAS_PCT), (name, text)
        assert f"+{LARGE_DELTA_PCT:.1f}%" in text, name
    # The legend every export carries states the threshold.
    assert any(f"±{difference.DEFAULT_PRACTICAL_THRESHOLD_PCT:g}%" in line for line in comparison.caveat)


def test_the_threshold_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHDECK_PRACTICAL_THRESHOLD_PCT", "0.5")
    assert Settings().practical_threshold_pct == 0.5
    runs = [*repeats(1, 0.0), *repeats(2, 0.6)]
    loose = build_comparison(frame(*runs), 1, [2], "en", practical_threshold_pct=0.5)
    assert cell(loose.compare, run_id=2, metric="output_tok_s")["verdict"] == "better"
    assert any("±0.5%" in line for line in loose.caveat)


def test_the_one_slide_colours_only_the_delta_beyond_the_threshold(comparison: Comparison) -> None:
    import io

    from pptx import Presentation

    from domain.render import one_slide

    slide = Presentation(io.BytesIO(one_slide.one_slide(comparison, "report", ("output_tok_s",)))).slides[0]
    table = next(shape for shape in slide.shapes if shape.name == "benchdeck-table").table
    header = [cell.text_frame.paragraphs[0].text for cell in table.rows[0].cells]
    coloured = {str(c) for c in one_slide.VERDICT_COLOURS.values()}
    for row in list(table.rows)[1:]:
        for column, box in zip(header, row.cells, strict=True):
            deltas = box.text_frame.paragraphs[1:]
            colours = {str(p.runs[0].font.color.rgb) for p in deltas}
            if any(column.startswith(f"#{run_id}") for run_id in SMALL_RUNS):
                assert deltas and not colours & coloured, (column, [p.text for p in deltas])
            elif column.startswith(f"#{LARGE_RUN}"):
                assert colours & coloured, column
