"""The one-slide export (domain/render/one_slide.py), opened with python-pptx: one 16:9
slide whose title is the headline, and no text that overflows its box, in either language,
for two runs and for nine with long, Japanese and emoji names."""

from __future__ import annotations

import io
from typing import Any

import pytest
from pptx import Presentation
from pptx.util import Emu

from domain.compare.comparison import Comparison, build_comparison
from domain.render import one_slide, text_fit
from tests.test_analysis import frame, point

REF = "benchdeck-compare-1-2-deck.pptx · /compare?baseline=1&runs=2"
NAMES = ("qwen3-235b-a22b-fp8-8xh200-baseline-with-a-very-long-name 🚀", "カーネル選択を変えた実行・長い名前の例です",
         "mrr-128", "x" * 80, "🔥🔥 hot", "tp8-ep8", "dp-attention on", "chunked 8192", "cuda graph bs 256")


def runs_frame(count: int) -> Any:
    rows = []
    for run_id in range(1, count + 1):
        for conc in (1, 2, 4, 8, 16, 32, 64, 128):
            for repeat, offset in enumerate((-1.0, 0.0, 1.0)):
                rows.append(point(run_id, conc, repeat_idx=repeat, run_name=NAMES[run_id - 1],
                                  server_args={"max-running-requests": 64 * run_id},
                                  output_throughput=12345.678 * conc * (1 + 0.031 * run_id) + offset,
                                  ttft_median_ms=1234.5 * (1 + 0.05 * run_id) + offset))
    return frame(*rows)


def slide_of(c: Comparison) -> Any:
    deck = Presentation(io.BytesIO(one_slide.one_slide(c, REF, ("output_tok_s", "ttft_p50", "tpot_p50", "e2e_p99"))))
    assert len(deck.slides) == 1
    assert (deck.slide_width, deck.slide_height) == (one_slide.SLIDE_W, one_slide.SLIDE_H)
    assert abs(deck.slide_width / deck.slide_height - 16 / 9) < 0.01
    return deck.slides[0]


@pytest.fixture(scope="module", params=[(lang, count) for lang in ("en", "ja") for count in (2, 9)],
                ids=lambda p: f"{p[0]}-{p[1]}runs")
def slide(request: pytest.FixtureRequest) -> tuple[Comparison, Any]:
    lang, count = request.param
    c = build_comparison(runs_frame(count), 1, list(range(2, count + 1)), lang)
    return c, slide_of(c)


def shapes(slide: Any) -> dict[str, Any]:
    return {shape.name: shape for shape in slide.shapes}


def test_the_title_is_the_headline_naming_the_changed_flag(slide: tuple[Comparison, Any]) -> None:
    c, found = slide
    title = shapes(found)["benchdeck-title"].text_frame.text
    assert title.startswith(c.headline_lines[0])
    assert "--max-running-requests 64 → 128" in title


def _lines_needed(paragraph: Any, width_pt: float) -> tuple[int, float]:
    size = paragraph.runs[0].font.size.pt
    bold = bool(paragraph.runs[0].font.bold)
    return len(text_fit.wrap(paragraph.text, size, width_pt, bold=bold)), size


def test_every_text_box_holds_its_text(slide: tuple[Comparison, Any]) -> None:
    _, found = slide
    for name in ("benchdeck-title", "benchdeck-caveat"):
        shape = shapes(found)[name]
        frame_ = shape.text_frame
        width = Emu(shape.width - frame_.margin_left - frame_.margin_right).pt
        height = sum(text_fit.height_pt(*_lines_needed(p, width)) for p in frame_.paragraphs)
        assert height <= Emu(shape.height).pt, (name, frame_.text)
        assert min(p.runs[0].font.size.pt for p in frame_.paragraphs) >= 7, name  # still legible
    caveat = shapes(found)["benchdeck-caveat"]
    lines = [_lines_needed(p, Emu(caveat.width).pt)[0] for p in caveat.text_frame.paragraphs]
    assert lines == [1, 1] and REF in caveat.text_frame.paragraphs[1].text  # two lines, no more


def test_every_table_cell_holds_its_text_on_one_line_per_paragraph(slide: tuple[Comparison, Any]) -> None:
    c, found = slide
    shape = shapes(found)["benchdeck-table"]
    table = shape.table
    for r, row in enumerate(table.rows):
        for col, cell in enumerate(row.cells):
            room = Emu(table.columns[col].width - cell.margin_left - cell.margin_right).pt
            for paragraph in cell.text_frame.paragraphs:
                lines, size = _lines_needed(paragraph, room)
                assert lines == 1 and size >= 10, (r, col, paragraph.text)
        needed = sum(text_fit.height_pt(1, p.runs[0].font.size.pt) for p in row.cells[1].text_frame.paragraphs)
        assert Emu(row.height).pt >= needed, r
    assert sum(row.height for row in table.rows) <= one_slide.TABLE_BOX[3]
    assert len(table.columns) == min(1 + len(c.run_ids) + 1, one_slide.MAX_RUNS + 1)


def test_the_boxes_stay_on_the_slide_and_apart(slide: tuple[Comparison, Any]) -> None:
    _, found = slide
    boxes = [(s.name, s.left, s.top, s.left + s.width, s.top + s.height) for s in found.shapes]
    assert {name for name, *_ in boxes} == set(one_slide.SHAPE_NAMES)
    for name, left, top, right, bottom in boxes:
        assert 0 <= left and 0 <= top and right <= one_slide.SLIDE_W and bottom <= one_slide.SLIDE_H, name
    for i, (a, al, at, ar, ab) in enumerate(boxes):
        for b, bl, bt, br, bb in boxes[i + 1:]:
            assert ar <= bl or br <= al or ab <= bt or bb <= at, (a, b)


def test_runs_left_out_are_named_in_the_caveat(slide: tuple[Comparison, Any]) -> None:
    c, found = slide
    caveat = shapes(found)["benchdeck-caveat"].text_frame.text
    hidden = len(c.run_ids) + 1 - one_slide.MAX_RUNS
    assert (str(hidden) in caveat) == (hidden > 0)


def test_markdown_stays_readable_at_nine_runs() -> None:
    """One table per metric, runs as columns: at nine runs no table is wider than its
    scenario, concurrency and nine run columns."""
    from domain.render.tables import comparison_markdown

    c = build_comparison(runs_frame(9), 1, list(range(2, 10)), "en")
    text = comparison_markdown(c)
    widths = [line.count(" | ") + 1 for line in text.splitlines() if line.startswith("| ")]
    assert widths and max(widths) <= 11, max(widths)
    assert "### Output tok/s" in text and "### TTFT p50 (ms)" in text
