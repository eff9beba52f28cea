"""Exports: CSV numbers equal the frame's, Markdown rounds and says so, PNG and SVG render
(Japanese not as tofu), the PPTX opens with a footer on every slide and East Asian fonts.

The tofu check renders the same chart with the real font named, once with a Japanese
title and once with the title's characters swapped for Unicode noncharacters (U+FDD0…),
which no font may map, so they render as the renderer's missing-glyph box: a tofu
reference made on this very machine.  (Private Use Area code points are not safe for this:
some installed symbol fonts map parts of U+E000….)  The test first proves the reference is
tofu (two different noncharacter strings render pixel-identically), then requires the
Japanese title strip to differ clearly from it, and two different Japanese titles to differ
from each other (tofu boxes would all look alike).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from typing import Any

import altair as alt
import pandas as pd
import pytest
import vl_convert
from PIL import Image, ImageChops
from pptx import Presentation
from pptx.oxml.ns import qn

from domain.results.analysis import wide_table
from domain.results.comparison import Comparison, build_comparison
from domain.slides import charts
from domain.slides.charts import FONT
from domain.slides.deck import FOOTER_NAME, chart_png, chart_svg, comparison_deck, standard_charts
from domain.slides.tables import format_number, table_csv, table_markdown
from tests.test_analysis import frame, point

JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def comparison_rows() -> list[dict[str, Any]]:
    """The browser test's set: two emulated runs one flag apart, one run with another OSL."""
    rows = []
    for c in (1, 2, 4, 8):
        rows.append(point(1, c, source="emulated", output_throughput=100.0 * c ** 0.9 + 0.123456789))
        rows.append(point(2, c, source="emulated", server_args={"max-running-requests": 128},
                          output_throughput=105.0 * c ** 0.9))
        rows.append(point(3, c, source="emulated", output_len=256, output_throughput=1 / 3 + 90 * c,
                          total_output_tokens=256 * 10 * c))
    return rows


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return build_comparison(frame(*comparison_rows()), 1, [2, 3], "ja")


# -- tables --------------------------------------------------------------------------------------


def read_csv(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), comment="#", encoding="utf-8-sig")


def test_csv_numbers_equal_the_frame_exactly(comparison: Comparison) -> None:
    data = table_csv(comparison.compare, comparison.caveat)
    back = read_csv(data)
    assert len(back) == len(comparison.compare)
    source = frame(*comparison_rows()).set_index(["run_id", "concurrency"])
    throughput = back[back["metric"] == "output_tok_s"]
    for run_id, conc, value in zip(throughput["run_id"], throughput["concurrency"], throughput["value"], strict=True):
        assert value == source.loc[(run_id, conc), "output_throughput"]  # exact, not approx
    assert back["value"].tolist() == pytest.approx(comparison.compare["value"].tolist(), rel=0, abs=0, nan_ok=True)


def test_csv_carries_the_caveat_after_the_table(comparison: Comparison) -> None:
    text = table_csv(comparison.compare, comparison.caveat).decode("utf-8-sig")
    footer = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    assert footer == comparison.caveat
    assert any("出力長 (OSL)" in line for line in footer) and any("エミュレート" in line for line in footer)


def test_wide_csv_keeps_run_labels_with_hash_and_exact_numbers(comparison: Comparison) -> None:
    wide = wide_table(comparison.compare, "en", ["output_tok_s"])
    back = read_csv(table_csv(wide, ["caveat"]))
    assert list(back.columns[:3]) == ["Scenario", "Concurrency", "run1 (#1) (emulated) · Output tok/s"]
    assert back.iloc[0, 2] == 100.123456789


def test_markdown_rounds_and_says_so(comparison: Comparison) -> None:
    wide = wide_table(comparison.compare, "en", ["output_tok_s"])
    text = table_markdown(wide, comparison.caveat, "en")
    lines = text.splitlines()
    assert lines[0].startswith("| Scenario | Concurrency | run1 (#1) (emulated) · Output tok/s |")
    assert lines[2] == "| short | 1 | 100.1 | 105 | +4.9% | 90.33 | -9.8% |"  # 100.123456789, 105.0, 90.333…
    assert "> Numbers rounded for display; the CSV carries the exact values." in text
    assert all(f"> {line}" in text for line in comparison.caveat)


def test_number_formatting() -> None:
    assert [format_number(v) for v in (1234.56, 12.345, 0.12345, 8.0, None, float("inf"), "x")] == [
        "1,234.6", "12.35", "0.123", "8", "", "inf", "x"]


# -- charts --------------------------------------------------------------------------------------


def test_png_opens_and_svg_is_xml_with_the_caveat(comparison: Comparison) -> None:
    chart = charts.metric_chart(comparison.summary, ["output_tok_s", "ttft_p99"], "ja",
                                saturation=comparison.saturation)
    png = chart_png(chart, comparison.caveat, scale=1)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width > 600 and image.height > 300
    svg = chart_svg(chart, comparison.caveat)
    root = ET.fromstring(svg)  # noqa: S314 — our own renderer's output, not untrusted input
    assert root.tag.endswith("svg")
    assert "比較キー" in svg and "出力 tok/s" in svg and FONT in svg


def test_every_chart_builder_renders(comparison: Comparison) -> None:
    for _title, chart in standard_charts(comparison):
        spec = charts.styled(charts.with_footer(chart, comparison.caveat)).to_dict()
        svg = vl_convert.vegalite_to_svg(spec, allowed_base_urls=[])
        assert "（エミュレート）" in svg  # emulated series are labelled in the legend


def title_strip(title: str, font: str = FONT) -> Image.Image:
    chart = alt.Chart(pd.DataFrame({"x": [1, 2], "y": [1, 2]})).mark_line().encode(x="x:Q", y="y:Q").properties(
        width=300, height=60, title=alt.TitleParams(title, font=font, fontSize=24, anchor="start"))
    png = vl_convert.vegalite_to_png(charts.styled(chart).to_dict(), scale=1, allowed_base_urls=[])
    image = Image.open(io.BytesIO(png)).convert("L")
    return image.crop((0, 0, image.width, 34))  # the title's band, above the plot


def ink(image: Image.Image) -> int:
    return sum(image.histogram()[:128])  # dark pixels of a greyscale image


def differing_pixels(a: Image.Image, b: Image.Image) -> int:
    return sum(ImageChops.difference(a, b).histogram()[65:])


def noncharacters(first: int, count: int) -> str:
    return "".join(chr(0xFDD0 + first + i) for i in range(count))


def test_japanese_in_png_is_not_tofu() -> None:
    title = "スループット比較"
    reference = title_strip(noncharacters(0, len(title)))
    assert differing_pixels(reference, title_strip(noncharacters(16, len(title)))) == 0  # all boxes: tofu
    japanese, other = title_strip(title), title_strip("遅延の分布を確認")
    assert ink(japanese) > 200 and ink(reference) > 200  # both drew something in the title band
    assert differing_pixels(japanese, reference) > 0.25 * ink(japanese)
    assert differing_pixels(japanese, other) > 0.25 * ink(japanese)  # tofu boxes would all look alike


# -- the deck ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deck(comparison: Comparison) -> Any:
    one_chart = [("チャート", charts.gpu_chart(comparison.summary, "ja"))]
    data = comparison_deck(comparison, metrics=("output_tok_s",), chart_set=one_chart)
    return Presentation(io.BytesIO(data))


def test_deck_opens_with_title_table_and_chart_slides(deck: Any) -> None:
    slides = list(deck.slides)
    assert len(slides) == 3
    texts = [[shape.text_frame.text for shape in s.shapes if shape.has_text_frame] for s in slides]
    assert "ベンチマーク比較" in texts[0]
    assert any("比較不可" in text for text in texts[0])
    assert any(shape.has_table for shape in slides[1].shapes)
    assert any(shape.shape_type == 13 for shape in slides[2].shapes)  # MSO_SHAPE_TYPE.PICTURE


def test_every_slide_has_the_caveat_footer(deck: Any, comparison: Comparison) -> None:
    for slide in deck.slides:
        footers = [shape for shape in slide.shapes if shape.name == FOOTER_NAME]
        assert len(footers) == 1
        assert footers[0].text_frame.text.splitlines() == comparison.caveat


def test_japanese_runs_carry_an_east_asian_font(deck: Any) -> None:
    japanese_runs = 0
    for slide in deck.slides:
        for shape in slide.shapes:
            for run in _runs(shape):
                if JAPANESE.search(run.text or ""):
                    japanese_runs += 1
                    ea = run._r.find(qn("a:rPr")).find(qn("a:ea"))
                    assert ea is not None and ea.get("typeface") == FONT, run.text
    assert japanese_runs > 10


def _runs(shape: Any) -> list[Any]:
    frames = []
    if shape.has_text_frame:
        frames.append(shape.text_frame)
    if getattr(shape, "has_table", False) and shape.has_table:
        frames += [cell.text_frame for row in shape.table.rows for cell in row.cells]
    return [run for f in frames for paragraph in f.paragraphs for run in paragraph.runs]


def test_deck_text_follows_the_ui_language() -> None:
    english = build_comparison(frame(*comparison_rows()), 1, [2], "en")
    deck = Presentation(io.BytesIO(comparison_deck(english, metrics=("output_tok_s",), chart_set=[])))
    title_texts = [shape.text_frame.text for shape in deck.slides[0].shapes if shape.has_text_frame]
    assert "Benchmark comparison" in title_texts
    assert not any(JAPANESE.search(text) for slide in deck.slides for shape in slide.shapes
                   if shape.has_text_frame for text in [shape.text_frame.text])


def test_csv_module_quoting_is_what_read_back_relies_on() -> None:
    text = table_csv(pd.DataFrame({"name": ["a#b"], "v": [1.5]}), ["x"]).decode("utf-8-sig")
    assert next(csv.reader(io.StringIO(text.splitlines()[1]))) == ["a#b", "1.5"]
    assert read_csv(text.encode("utf-8-sig")).iloc[0]["name"] == "a#b"
