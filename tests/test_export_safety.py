"""Exports of runs with hostile or Japanese names: no formula reaches a spreadsheet (CSV, the
native charts' embedded workbooks), Markdown keeps its columns and renders no HTML (checked
by rendering it with markdown-it-py, a CommonMark renderer with raw HTML on), the PPTX holds
the names as literal text with the East Asian font, and the PNG draws the Japanese.

The names are issue 15's: a Japanese name with a formula, a pipe, a tag and an emoji, and
the file stem an import takes as the run name (``=HYPERLINK("x","y")``).
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from markdown_it import MarkdownIt
from PIL import Image
from pptx import Presentation
from pptx.oxml.ns import qn

from domain.compare.comparison import Comparison, build_comparison
from domain.render import charts
from domain.render.charts import FONT
from domain.render.deck import comparison_deck
from domain.render.pictures import comparison_chart_png, comparison_chart_svg
from domain.render.tables import (
    FORMULA_TRIGGERS,
    comment_line,
    comparison_csv,
    comparison_markdown,
    marked_label,
    neutralise_formula,
    table_csv,
)
from tests.conftest import ROOT
from tests.test_analysis import frame, point
from tests.test_export import differing_pixels, ink, noncharacters, title_strip

JAPANESE_NAME = 'ベースライン =HYPERLINK("x") | <b>x</b> 🚀'
STEM_NAME = '=HYPERLINK("x","y")'
TAG_NAME = '<img src=x onerror=alert(1)> [link](javascript:alert(1)) @SUM(A1) -2+3'
PLAIN_NUMBER = re.compile(r"[+-]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?%?")


def hostile_rows() -> list[dict[str, Any]]:
    """Three measured runs, one flag apart; run 2 slower, so some deltas are negative."""
    rows = []
    for run_id, name, speed in ((1, JAPANESE_NAME, 1.0), (2, STEM_NAME, 0.9), (3, TAG_NAME, 1.1)):
        for c in (1, 2, 4, 8):
            rows.append(point(run_id, c, run_name=name, server_args={"max-running-requests": 64 * run_id},
                              output_throughput=100.0 * c * speed))
    return rows


@pytest.fixture(scope="module")
def hostile() -> Comparison:
    return build_comparison(frame(*hostile_rows()), 1, [2, 3], "ja")


# -- CSV -------------------------------------------------------------------------------------------


def spreadsheet_cells(text: str) -> list[str]:
    """Every cell a spreadsheet makes of the CSV: data rows by the CSV rules, '# ' lines
    split on either list separator (',' or ';', by locale)."""
    cells: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            cells += [piece.lstrip(' "') for piece in re.split(r"[,;]", line)]
        else:
            cells += next(csv.reader([line]), [])
    return cells


def is_formula(cell: str) -> bool:
    return cell.startswith(FORMULA_TRIGGERS) and not PLAIN_NUMBER.fullmatch(cell)


def test_csv_has_no_formula_cell(hostile: Comparison) -> None:
    text = comparison_csv(hostile).decode("utf-8-sig")
    cells = spreadsheet_cells(text)
    assert [cell for cell in cells if is_formula(cell)] == []
    assert sum(cell.startswith("'=HYPERLINK") for cell in cells) > 20  # the names are there, neutralised
    header = next(csv.reader([next(line for line in text.splitlines() if not line.startswith("#"))]))
    assert f"'{STEM_NAME} (#2) · 出力 tok/s" in header
    assert f"{JAPANESE_NAME} (#1) · 出力 tok/s" in header  # starts with a letter: left as it is


def test_numbers_stay_numbers_and_round_trip(hostile: Comparison) -> None:
    back = pd.read_csv(io.BytesIO(table_csv(hostile.compare, hostile.caveat)), comment="#", encoding="utf-8-sig")
    assert pd.api.types.is_float_dtype(back["delta_pct"]) and (back["delta_pct"] < 0).any()
    assert back["delta_pct"].tolist() == pytest.approx(hostile.compare["delta_pct"].tolist(), rel=0, abs=0,
                                                       nan_ok=True)
    assert set(back["run_name"]) == {JAPANESE_NAME, "'" + STEM_NAME, TAG_NAME}


def test_the_neutralising_rule() -> None:
    assert neutralise_formula('=HYPERLINK("x")') == '\'=HYPERLINK("x")'
    for text in ("+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        assert neutralise_formula(text) == "'" + text
    for text in ("-3.2", "+4.9%", "-1,234.5", "1e-3", "ベースライン", "a=b", ""):
        assert neutralise_formula(text) == text
    assert comment_line('x, =A1; "=B2\nnext') == "# x, '=A1; \"'=B2 next"


def test_head_and_caveat_stay_comment_lines(hostile: Comparison) -> None:
    text = comparison_csv(hostile).decode("utf-8-sig")
    lines = text.splitlines()
    head = len(hostile.verdict_lines) + len(hostile.changed_lines)
    assert all(line.startswith("# ") for line in lines[:head])
    assert not lines[head].startswith("#") and lines[-1].startswith("# ")
    assert len(pd.read_csv(io.StringIO(text), comment="#")) == 4  # one row per concurrency


# -- Markdown --------------------------------------------------------------------------------------


class Html(HTMLParser):
    """The rendered Markdown's tags, its text, and the cell count of every table row."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []
        self.row_cells: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.row_cells.append(0)
        elif tag in ("td", "th"):
            self.row_cells[-1] += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def rendered(markdown: str) -> Html:
    html = MarkdownIt("commonmark").enable("table").render(markdown)  # raw HTML on, as GitHub would not be
    parser = Html()
    parser.feed(html)
    return parser


def test_markdown_keeps_its_columns_and_renders_no_html(hostile: Comparison) -> None:
    markdown = comparison_markdown(hostile)
    parser = rendered(markdown)
    assert parser.tags.count("table") >= 2  # a table per metric, and the per-point section: each checked below
    assert not {"b", "img", "a", "script"} & set(parser.tags)
    starts = [i for i, tag in enumerate(parser.tags) if tag == "table"]
    rows_by_table = [parser.tags[start:end].count("tr") for start, end in zip(starts, [*starts[1:], None],
                                                                              strict=True)]
    cells = iter(parser.row_cells)
    for rows in rows_by_table:
        widths = {next(cells) for _ in range(rows)}
        assert len(widths) == 1  # every row as wide as the header: no '|' split a cell
    text = "".join(parser.text)
    for name in (JAPANESE_NAME, STEM_NAME, TAG_NAME):
        assert name in text  # shown literally, tag and link syntax included


def test_markdown_head_lines_are_literal_list_items(hostile: Comparison) -> None:
    parser = rendered(comparison_markdown(hostile))
    head = len(hostile.verdict_lines) + len(hostile.changed_lines)
    assert parser.tags[:2] == ["ul", "li"] and parser.tags.count("li") == head
    assert not {"h1", "h2", "blockquote"} & set(parser.tags[:2 * head + 1])


# -- PPTX ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deck(hostile: Comparison) -> Any:
    return Presentation(io.BytesIO(comparison_deck(hostile, metrics=("output_tok_s",), chart_set=[])))


def test_pptx_table_cells_hold_the_names_literally(deck: Any, hostile: Comparison) -> None:
    table = next(shape.table for shape in deck.slides[1].shapes if shape.has_table)
    header = [cell.text for cell in table.rows[0].cells]
    assert header[1:] == [marked_label(hostile, r) for r in (1, 2, 3)]
    assert header[2].startswith(STEM_NAME)  # text in a PPTX cell is never a formula: kept as typed
    subtitle = " ".join(shape.text_frame.text for shape in deck.slides[0].shapes if shape.has_text_frame)
    assert JAPANESE_NAME in subtitle and STEM_NAME in subtitle


def test_native_charts_keep_names_as_text_in_their_workbooks(deck: Any, hostile: Comparison) -> None:
    found = [shape.chart for slide in deck.slides for shape in slide.shapes if shape.has_chart]
    assert len(found) == 2
    for chart in found:
        assert [s.name for s in chart.plots[0].series] == [marked_label(hostile, r) for r in (1, 2, 3)]
        with zipfile.ZipFile(io.BytesIO(chart.part.chart_workbook.xlsx_part.blob)) as book:
            sheet = book.read("xl/worksheets/sheet1.xml").decode()
            strings = book.read("xl/sharedStrings.xml").decode()
        assert "<f>" not in sheet and "<f " not in sheet  # no formula cell
        assert "=HYPERLINK(&quot;x&quot;,&quot;y&quot;)" in strings or '=HYPERLINK("x","y")' in strings


def test_pptx_runs_with_japanese_name_the_east_asian_font(deck: Any) -> None:
    checked = 0
    for slide in deck.slides:
        for shape in slide.shapes:
            frames = [shape.text_frame] if shape.has_text_frame else []
            if shape.has_table:
                frames += [cell.text_frame for row in shape.table.rows for cell in row.cells]
            for run in (r for f in frames for p in f.paragraphs for r in p.runs if "ベースライン" in r.text):
                assert run._r.find(qn("a:rPr")).find(qn("a:ea")).get("typeface") == FONT
                checked += 1
    assert checked >= 3  # subtitle, title-slide lines, table header


# -- PNG -------------------------------------------------------------------------------------------

ARTIFACT = ROOT / "test-artifacts" / "export-japanese-name.png"


def test_png_draws_the_japanese_name(hostile: Comparison) -> None:
    chart = charts.metric_chart(hostile.summary, ["output_tok_s", "ttft_p99"], "ja", saturation=hostile.saturation)
    png = comparison_chart_png(hostile, chart, scale=1)
    Path(ARTIFACT).parent.mkdir(exist_ok=True)
    Path(ARTIFACT).write_bytes(png)  # for a person to look at
    assert Image.open(io.BytesIO(png)).format == "PNG"
    svg = comparison_chart_svg(hostile, chart)
    assert "ベースライン =HYPERLINK(&quot;x&quot;) | &lt;b&gt;x&lt;/b&gt; 🚀 (#1)" in svg  # the legend, as text
    assert f'font-family="{FONT}"' in svg or FONT in svg
    # The renderer draws the name's Japanese with real glyphs: not the tofu of the same length.
    japanese = title_strip(JAPANESE_NAME)
    tofu = title_strip(JAPANESE_NAME.replace("ベースライン", noncharacters(0, len("ベースライン"))))
    assert differing_pixels(japanese, tofu) > 0.1 * ink(japanese)


@pytest.mark.parametrize("command", [
    "python -m sglang.launch_server --served-model-name 'a `b` ``c``'",
    "`starts and ends with backticks`",
    "--x '<b>bold</b> **strong** [link](http://x) $x^2$ :red[red] :smile: &amp; \\\\ | ~~s~~'",
    "=HYPERLINK(\"x\",\"y\") 日本語の名前 🚀",
])
def test_a_command_as_a_code_span_renders_as_exactly_its_text(command: str) -> None:
    """md_code (the build page's commands): one <code> whose text is the command, character
    for character: no tag, emphasis, link or entity read inside it (CommonMark, raw HTML on)."""
    from domain.core.markdown import md_code

    html = MarkdownIt("commonmark", {"html": True}).render(md_code(command))
    match = re.fullmatch(r"<p><code>(.*)</code></p>\n", html, re.DOTALL)
    assert match, html
    assert match.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace(
        "&amp;", "&") == command
