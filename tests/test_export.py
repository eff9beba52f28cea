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

from domain.compare.comparison import Comparison, build_comparison
from domain.render import charts
from domain.render.charts import FONT
from domain.render.deck import FOOTER_NAME, comparison_deck, standard_charts
from domain.render.pictures import chart_png, chart_svg, comparison_chart_png, comparison_chart_svg
from domain.render.tables import (
    comparison_csv,
    comparison_markdown,
    comparison_table,
    export_head,
    format_number,
    table_csv,
    table_markdown,
)
from domain.results.analysis import wide_table
from domain.results.validity import badge_label, badges_by_point
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


def compared(rows: list[dict[str, Any]], baseline: int, runs: list[int], lang: str) -> Comparison:
    """build_comparison of point rows (:func:`tests.test_analysis.point`)."""
    return build_comparison(frame(*rows), baseline, runs, lang)


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return compared(comparison_rows(), 1, [2, 3], "ja")


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
    # 100.123456789, 105.0, 90.333…; the delta text's own marks (≈, ?) are analysis.delta_text's business
    assert re.fullmatch(r"\| short \| 1 \| 100\.1 \| 105 \| \+4\.9%\S* \| 90\.33 \| -9\.8%\S* \|", lines[2]), lines[2]
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


def test_deck_opens_with_title_table_native_and_picture_slides(deck: Any) -> None:
    slides = list(deck.slides)
    assert len(slides) == 5  # title, one table, two native charts (one scenario), one picture
    texts = [[shape.text_frame.text for shape in s.shapes if shape.has_text_frame] for s in slides]
    assert "ベンチマーク比較" in texts[0]
    assert any("比較不可" in text for text in texts[0])
    assert any(shape.has_table for shape in slides[1].shapes)
    assert all(any(shape.has_chart for shape in s.shapes) for s in slides[2:4])
    assert any(shape.shape_type == 13 for shape in slides[4].shapes)  # MSO_SHAPE_TYPE.PICTURE


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
    english = compared(comparison_rows(), 1, [2], "en")
    deck = Presentation(io.BytesIO(comparison_deck(english, metrics=("output_tok_s",), chart_set=[])))
    title_texts = [shape.text_frame.text for shape in deck.slides[0].shapes if shape.has_text_frame]
    assert "Benchmark comparison" in title_texts
    assert not any(JAPANESE.search(text) for slide in deck.slides for shape in slide.shapes
                   if shape.has_text_frame for text in [shape.text_frame.text])


def test_csv_module_quoting_is_what_read_back_relies_on() -> None:
    text = table_csv(pd.DataFrame({"name": ["a#b"], "v": [1.5]}), ["x"]).decode("utf-8-sig")
    assert next(csv.reader(io.StringIO(text.splitlines()[1]))) == ["a#b", "1.5"]
    assert read_csv(text.encode("utf-8-sig")).iloc[0]["name"] == "a#b"


# -- every export says what changed ----------------------------------------------------------------


def cap_pair_rows() -> list[dict[str, Any]]:
    """Two measured runs that differ only in --max-running-requests (64 vs 128)."""
    return [point(run_id, c, server_args={"max-running-requests": cap},
                  output_throughput=100.0 * c * (1 + run_id / 100)) for run_id, cap in ((1, 64), (2, 128))
            for c in (1, 2, 4, 8)]


@pytest.fixture(scope="module")
def cap_pair() -> Comparison:
    return compared(cap_pair_rows(), 1, [2], "en")


def names_the_cap(text: str) -> bool:
    return bool(re.search(r"max-running-requests\\?\W+64\W+128", text))


def test_the_flag_diff_reaches_the_head_of_every_export(cap_pair: Comparison) -> None:
    assert not cap_pair.flag_diff.empty
    head = export_head(cap_pair)
    assert head[:1] == cap_pair.headline_lines and "#2" in head[0] and any(names_the_cap(line) for line in head)
    csv_text = comparison_csv(cap_pair).decode("utf-8-sig")
    first = [line for line in csv_text.splitlines()[:len(head)]]
    assert all(line.startswith("# ") for line in first) and any(names_the_cap(line) for line in first)
    assert len(read_csv(csv_text.encode("utf-8-sig"))) == 4  # the '# ' head does not cost the table a row
    markdown = comparison_markdown(cap_pair).splitlines()
    assert markdown[0].startswith("- ") and any(names_the_cap(line) for line in markdown[:len(head)])
    slide = Presentation(io.BytesIO(comparison_deck(cap_pair, metrics=("output_tok_s",), chart_set=[]))).slides[0]
    assert any(names_the_cap(shape.text_frame.text) for shape in slide.shapes if shape.has_text_frame)


def test_chart_images_carry_the_head_above_the_caveat(cap_pair: Comparison) -> None:
    chart = charts.metric_chart(cap_pair.summary, ["output_tok_s"], "en")
    svg = comparison_chart_svg(cap_pair, chart)
    assert names_the_cap(svg.replace("&gt;", ">"))
    head_at, caveat_at = svg.index("max-running-requests"), svg.index("Comparability key")
    assert head_at < caveat_at  # what changed first, then the caveat
    with_head = Image.open(io.BytesIO(comparison_chart_png(cap_pair, chart, scale=1)))
    without = Image.open(io.BytesIO(chart_png(chart, cap_pair.caveat, scale=1)))
    assert with_head.height >= without.height + 14 * len(export_head(cap_pair))  # 14 px per text line


# -- saturation, scaling efficiency, validity, not comparable -------------------------------------


def test_csv_carries_efficiency_saturation_and_validity_per_run(comparison: Comparison) -> None:
    back = read_csv(comparison_csv(comparison, ["output_tok_s"]))
    efficiency = "run1 (#1)（エミュレート） · スケーリング効率 (%、最小 concurrency の出力 tok/s に対する線形比)"
    scaling = comparison.scaling[comparison.scaling["run_id"] == 1].sort_values("concurrency")
    assert back[efficiency].tolist() == pytest.approx((scaling["efficiency"] * 100).tolist(), rel=1e-12)
    assert back[efficiency].iloc[0] == 100.0  # the lowest concurrency is the basis
    validity = "run2 (#2)（エミュレート） · 妥当性"
    by_point = badges_by_point(comparison.badges)
    expected = [", ".join(badge_label(b, "ja") for b in names) for names in by_point[by_point["run_id"] == 2]["badges"]]
    assert back[validity].tolist() == expected and all("エミュレート(実 GPU の値ではない)" in v for v in expected)
    assert "run3 (#3)（エミュレート）【比較不可】 · 出力 tok/s" in back.columns  # run 3's OSL differs
    assert not any("run3" in column and "比較不可" not in column for column in back.columns)


def test_saturation_point_is_marked_at_its_concurrency() -> None:
    flat = [point(1, c, output_throughput=min(c, 4) * 100.0) for c in (1, 2, 4, 8, 16)]
    c = compared(flat, 1, [], "en")
    fired = c.saturation.iloc[0]
    assert fired["rule"] == "throughput_gain" and fired["concurrency"] == 4
    back = read_csv(comparison_csv(c, ["output_tok_s"]))
    marks = dict(zip(back["Concurrency"], back["run1 (#1) · Saturation"].fillna(""), strict=True))
    assert marks == {1: "", 2: "", 4: "saturation point (throughput gain below the threshold)", 8: "", 16: ""}
    markdown = comparison_markdown(c)
    # Columns: run, scenario, concurrency, efficiency %, its basis concurrency, saturation, validity.
    assert "| run1 (#1) | short | 4 | 100 | 1 | saturation point (throughput gain below the threshold) |" in markdown


def test_markdown_marks_not_comparable_runs_and_adds_the_points_section(comparison: Comparison) -> None:
    text = comparison_markdown(comparison, ["output_tok_s"])
    # One table per metric under its name, runs as columns.
    lines = text.splitlines()
    header = lines[lines.index("### 出力 tok/s") + 2]
    assert "run3 (#3)（エミュレート）【比較不可】" in header.replace("\\", "")
    section = text[text.index("### 点ごとのスケーリング効率・飽和・妥当性"):]
    rows = [line for line in section.splitlines() if line.startswith("| run")]
    assert len(rows) == len(comparison.summary)
    assert all("比較不可" in row for row in rows if row.startswith("| run3"))


def test_scaling_marks_from_the_curve_columns_reach_tables_and_chart(comparison: Comparison) -> None:
    marked = compared(comparison_rows(), 1, [2, 3], "en")
    first = marked.scaling["concurrency"] == 1
    marked.scaling = marked.scaling.assign(cold=first & (marked.scaling["run_id"] == 1),
                                           super_linear=~first & (marked.scaling["run_id"] == 2),
                                           baseline_concurrency=2)
    table = comparison_table(marked, ["output_tok_s"])
    validity = table[("run1 (#1) (emulated)", "Validity")]
    assert validity.iloc[0].startswith("emulated (not a real GPU)")
    assert validity.iloc[0].endswith(", cold first point (left out of the efficiency basis)")
    assert "cold first point" not in validity.iloc[1]
    assert set(table[("run1 (#1) (emulated)", "Efficiency basis (concurrency)")]) == {2}
    assert "efficiency above 100% (likely a measurement problem)" in table[("run2 (#2) (emulated)", "Validity")].iloc[1]
    svg = vl_convert.vegalite_to_svg(charts.styled(charts.scaling_chart(marked.scaling, "en", marked.summary))
                                     .to_dict(), allowed_base_urls=[])
    assert "cold first point" in svg and "efficiency above 100%" in svg


# -- native PowerPoint charts ----------------------------------------------------------------------


def native_charts_of(pptx: bytes) -> list[Any]:
    return [shape.chart for slide in Presentation(io.BytesIO(pptx)).slides for shape in slide.shapes
            if shape.has_chart]


def test_native_charts_hold_the_comparisons_numbers(comparison: Comparison) -> None:
    found = native_charts_of(comparison_deck(comparison, metrics=(), chart_set=[]))
    line, scatter = found
    assert line.chart_type == 65 and scatter.chart_type == -4169  # LINE_MARKERS, XY_SCATTER
    names = ["run1 (#1)（エミュレート）", "run2 (#2)（エミュレート）", "run3 (#3)（エミュレート）【比較不可】"]
    assert [s.name for s in line.plots[0].series] == names
    assert list(line.plots[0].categories) == ["1", "2", "4", "8"]  # read back as labels
    for run_id, series in zip((1, 2, 3), line.plots[0].series, strict=True):
        expected = comparison.summary[comparison.summary["run_id"] == run_id].sort_values("concurrency")
        assert list(series.values) == expected["output_tok_s"].tolist()
    assert [s.name for s in scatter.plots[0].series] == names
    for run_id, series in zip((1, 2, 3), scatter.plots[0].series, strict=True):
        expected = comparison.pareto[comparison.pareto["run_id"] == run_id]
        xs = [float(v) for v in series._element.xpath("./c:xVal//c:pt/c:v/text()")]
        assert xs == expected["interactivity"].tolist()
        assert list(series.values) == expected["throughput_per_gpu"].tolist()


def test_native_chart_text_names_the_east_asian_font(comparison: Comparison) -> None:
    line = native_charts_of(comparison_deck(comparison, metrics=(), chart_set=[]))[0]
    assert line.font._rPr.find(qn("a:ea")).get("typeface") == FONT
    title_run = line.value_axis.axis_title.text_frame.paragraphs[0].runs[0]
    assert title_run.text == "出力 tok/s"
    assert title_run._r.find(qn("a:rPr")).find(qn("a:ea")).get("typeface") == FONT


# -- missing numbers -------------------------------------------------------------------------------


def imported_rows() -> list[dict[str, Any]]:
    """Imported runs: no total tok/s, no GPU telemetry, no TPOT on run 2."""
    blank = {"total_throughput": None, "gpu_util_mean": None, "gpu_mem_peak_gb": None, "telemetry_available": False}
    return [point(run_id, c, source="imported", **blank, **({"tpot_median_ms": None} if run_id == 2 else {}))
            for run_id in (1, 2) for c in (1, 2, 4)]


def chart_texts(chart: Any) -> str:
    return str(vl_convert.vegalite_to_svg(charts.styled(chart).to_dict(), allowed_base_urls=[]))


def test_the_pareto_subtitle_names_the_tpot_statistic_it_was_computed_from() -> None:
    c = compared(comparison_rows(), 1, [2], "en")
    for lang, stat, words in (("en", "p50", "1000 / TPOT median"), ("en", "p99", "1000 / TPOT p99"),
                              ("ja", "p50", "1000 / TPOT 中央値"), ("ja", "p90", "1000 / TPOT p90")):
        spec = str(charts.pareto_chart(c.pareto, lang, stat).to_dict()["title"])
        assert words in spec, (lang, stat, spec)
        assert stat == "p50" or ("median" not in spec and "中央値" not in spec)


def test_charts_without_data_say_so_instead_of_an_empty_axis() -> None:
    c = compared(imported_rows(), 1, [2], "en")
    gpu = chart_texts(charts.gpu_chart(c.summary, "en"))
    assert "No data: GPU util mean (%), GPU memory peak (GB)" in gpu and "0.000000" not in gpu
    partly = chart_texts(charts.metric_chart(c.summary, ["output_tok_s", "total_tok_s"], "en"))
    assert "Metrics without data: Total tok/s" in partly
    empty_pareto = c.pareto.assign(interactivity=None)
    assert "No data: " in chart_texts(charts.pareto_chart(empty_pareto, "en"))
    empty_scaling = c.scaling.assign(efficiency=float("nan"), speedup=float("nan"))
    assert "No data: " in chart_texts(charts.scaling_chart(empty_scaling, "en", c.summary))


def test_exports_of_runs_with_missing_numbers_build() -> None:
    c = compared(imported_rows(), 1, [2], "en")
    back = read_csv(comparison_csv(c))
    assert back["run1 (#1) (imported) · Total tok/s"].isna().all()
    assert "| short | 1 |" in comparison_markdown(c)
    found = native_charts_of(comparison_deck(c, metrics=("output_tok_s", "total_tok_s"), chart_set=[]))
    scatter = found[1]
    assert [s.name for s in scatter.plots[0].series] == ["run1 (#1) (imported)"]  # run 2 has no TPOT
    for _title, chart in standard_charts(c):
        assert chart_texts(charts.with_footer(chart, c.caveat, export_head(c)))
