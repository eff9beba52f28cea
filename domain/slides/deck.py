"""Chart images and the deck of a comparison: charts as PNG and SVG (vl-convert, no
browser), the standard slide set, and a one-click PPTX built from those.

Every image and slide carries the caveat footer of :func:`domain.results.caveat.caveat_lines`
(the comparison holds it as ``caveat``); the CSV and Markdown tables are in
:mod:`domain.slides.tables`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import vl_convert
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.oxml.ns import qn
from pptx.text.text import _Run
from pptx.util import Inches, Pt

from domain.core.i18n import t
from domain.results import analysis, comparability
from domain.results.comparison import Comparison
from domain.slides import charts
from domain.slides.charts import FONT, AnyChart
from domain.slides.tables import flat_table, format_number

PNG_SCALE = 2.0  # slides are projected large; 2× keeps text crisp


# -- charts --------------------------------------------------------------------------------------


def _export_spec(chart: AnyChart, caveat: Sequence[str]) -> dict[str, Any]:
    return charts.styled(charts.with_footer(chart, caveat)).to_dict()


def chart_png(chart: AnyChart, caveat: Sequence[str], scale: float = PNG_SCALE) -> bytes:
    return _png(_export_spec(chart, caveat), scale)


def _png(spec: dict[str, Any], scale: float) -> bytes:
    # allowed_base_urls=[]: the data is inline, so the renderer may fetch nothing.
    return bytes(vl_convert.vegalite_to_png(spec, scale=scale, allowed_base_urls=[]))


def chart_svg(chart: AnyChart, caveat: Sequence[str]) -> str:
    return str(vl_convert.vegalite_to_svg(_export_spec(chart, caveat), allowed_base_urls=[]))


# -- the slide set ------------------------------------------------------------------------------

DECK_METRICS = ("output_tok_s", "ttft_p99", "tpot_p50", "e2e_p99")
CHART_METRICS = ("output_tok_s", "qps", "ttft_p50", "ttft_p99", "tpot_p50", "e2e_p99")


def standard_charts(c: Comparison) -> list[tuple[str, AnyChart]]:
    """The slide set: metrics, Pareto, tail latency, GPU, scaling — (title, chart)."""
    lang = c.lang
    return [
        (t("compare.chart.metrics_title", lang),
         charts.metric_chart(c.summary, CHART_METRICS, lang, saturation=c.saturation, columns=3)),
        (t("compare.chart.pareto_title", lang), charts.pareto_chart(c.pareto, lang)),
        (t("compare.chart.latency_title", lang), charts.latency_vs_throughput_chart(c.summary, lang)),
        (t("compare.chart.gpu_title", lang), charts.gpu_chart(c.summary, lang, saturation=c.saturation)),
        (t("compare.chart.scaling_title", lang), charts.scaling_chart(c.scaling, lang, c.summary)),
    ]


def metric_slide_table(c: Comparison, metric: str, scenario: object) -> pd.DataFrame:
    """One metric of one scenario: rows = concurrency, one column per run, cells "value (Δ)";
    a run that is not comparable says so in its header."""
    rows = c.compare[(c.compare["metric"] == metric) & (c.compare["scenario"] == scenario)]
    not_comparable = set(c.checklist.loc[c.checklist["verdict"] == "not_comparable", "run_id"])
    table: dict[str, dict[object, str]] = {}
    for _, row in rows.iterrows():
        label = analysis.run_label(row["run_id"], row["run_name"], row["source"], c.lang)
        if row["run_id"] in not_comparable:  # its deltas are shown, but flagged in the header
            label += t("compare.deck.not_comparable", c.lang)
        delta = analysis.delta_text(row["delta_pct"], row["verdict"])
        table.setdefault(label, {})[row["concurrency"]] = format_number(row["value"]) + (f" ({delta})" if delta
                                                                                          else "")
    out = pd.DataFrame(table).sort_index()
    out.index.name = t("compare.col.concurrency", c.lang)
    return out.fillna("")


# -- the deck ------------------------------------------------------------------------------------

SLIDE_W, SLIDE_H = Inches(13.333), Inches(7.5)
MARGIN = Inches(0.4)
FOOTER_H = Inches(0.85)
TITLE_H = Inches(0.8)
ROWS_PER_TABLE_SLIDE = 12
FOOTER_PT, BODY_PT, TITLE_PT = 9, 12, 26
FOOTER_COLOUR = RGBColor(0x55, 0x55, 0x55)


def comparison_deck(c: Comparison, metrics: Sequence[str] = DECK_METRICS,
                    chart_set: Sequence[tuple[str, AnyChart]] | None = None) -> bytes:
    """One-click deck: a title slide (with each run's comparability line), a table slide
    per metric and scenario (split when long), a slide per chart — caveat on every slide."""
    tables = [
        (t("compare.deck.table", c.lang, metric=analysis.metric_label(m, c.lang), scenario=s),
         metric_slide_table(c, m, s))
        for s in sorted(c.summary["scenario"].unique(), key=str) for m in metrics
    ]
    runs = ", ".join(_label_of(c, r) for r in c.run_ids)
    return deck_pptx(
        title=t("compare.deck.title", c.lang),
        subtitle=t("compare.deck.subtitle", c.lang, baseline=_label_of(c, c.baseline_run_id), runs=runs or "—"),
        body=[f"#{row['run_id']}: {comparability.summary_line(row, c.lang)}" for _, row in c.checklist.iterrows()],
        tables=tables,
        # The slide's own footer carries the caveat, so the images go without theirs.
        chart_images=[(title, _png(charts.styled(chart).to_dict(), PNG_SCALE)) for title, chart in
                      (chart_set if chart_set is not None else standard_charts(c))],
        caveat=c.caveat, lang=c.lang,
    )


def _label_of(c: Comparison, run_id: int) -> str:
    row = c.summary[c.summary["run_id"] == run_id].iloc[0]
    return analysis.run_label(run_id, row["run_name"], row["source"], c.lang)


def deck_pptx(*, title: str, subtitle: str, body: Sequence[str], tables: Sequence[tuple[str, pd.DataFrame]],
              chart_images: Sequence[tuple[str, bytes]], caveat: Sequence[str], lang: str) -> bytes:
    """A 16:9 deck from ready-made parts (texts already in the UI language; chart images as
    PNG bytes, e.g. from :func:`chart_png`).  Every run of text names :data:`FONT` for both
    Latin and East Asian script so Japanese never falls back to a missing face."""
    deck = Presentation()
    deck.slide_width, deck.slide_height = SLIDE_W, SLIDE_H
    _title_slide(deck, title, subtitle, body, lang)
    for table_title, table in tables:
        for part_title, part in _table_parts(table_title, table, lang):
            _table_slide(deck, part_title, part)
    for chart_title, png in chart_images:
        _chart_slide(deck, chart_title, png)
    for slide in deck.slides:
        _footer(slide, caveat)
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _blank(deck: Any) -> Any:
    return deck.slides.add_slide(deck.slide_layouts[6])  # layout 6 of the default template: blank


def set_run_font(run: _Run, size_pt: float, *, bold: bool = False, colour: RGBColor | None = None) -> None:
    """Latin and East Asian typeface both :data:`FONT` (python-pptx's font.name sets only Latin)."""
    run.font.name, run.font.size, run.font.bold = FONT, Pt(size_pt), bold
    if colour is not None:
        run.font.color.rgb = colour
    rpr = run._r.get_or_add_rPr()
    ea = rpr.find(qn("a:ea"))
    if ea is None:
        ea = rpr.makeelement(qn("a:ea"), {})
        latin = rpr.find(qn("a:latin"))
        latin.addnext(ea)  # schema order: latin, ea, cs
    ea.set("typeface", FONT)


def _text_box(slide: Any, left: int, top: int, width: int, height: int, lines: Sequence[str], size_pt: float, *,
              bold: bool = False, colour: RGBColor | None = None) -> None:
    frame = slide.shapes.add_textbox(left, top, width, height).text_frame
    frame.word_wrap = True
    for i, line in enumerate(lines):
        paragraph = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
        run = paragraph.add_run()
        run.text = line
        set_run_font(run, size_pt, bold=bold, colour=colour)


def _title_slide(deck: Any, title: str, subtitle: str, body: Sequence[str], lang: str) -> None:
    slide = _blank(deck)
    width = SLIDE_W - 2 * MARGIN
    _text_box(slide, MARGIN, Inches(1.4), width, Inches(1.0), [title], 36, bold=True)
    _text_box(slide, MARGIN, Inches(2.5), width, Inches(0.8), [subtitle], 18)
    generated = t("compare.deck.generated", lang, when=datetime.now().strftime("%Y-%m-%d %H:%M"))
    _text_box(slide, MARGIN, Inches(3.4), width, Inches(2.8), [*body, "", generated], BODY_PT + 2)


def _slide_title(slide: Any, title: str) -> None:
    _text_box(slide, MARGIN, Inches(0.25), SLIDE_W - 2 * MARGIN, TITLE_H, [title], TITLE_PT, bold=True)


def _table_parts(title: str, table: pd.DataFrame, lang: str) -> list[tuple[str, pd.DataFrame]]:
    chunks = [table.iloc[i:i + ROWS_PER_TABLE_SLIDE] for i in range(0, max(len(table), 1), ROWS_PER_TABLE_SLIDE)]
    if len(chunks) == 1:
        return [(title, chunks[0])]
    return [(t("compare.deck.table_part", lang, title=title, part=i + 1, parts=len(chunks)), chunk)
            for i, chunk in enumerate(chunks)]


def _table_slide(deck: Any, title: str, table: pd.DataFrame) -> None:
    slide = _blank(deck)
    _slide_title(slide, title)
    flat = flat_table(table)
    top = MARGIN + TITLE_H
    height = SLIDE_H - top - FOOTER_H - MARGIN
    shape = slide.shapes.add_table(len(flat) + 1, len(flat.columns), MARGIN, top, SLIDE_W - 2 * MARGIN,
                                   min(height, Inches(0.4) * (len(flat) + 1)))
    grid = shape.table
    for col, name in enumerate(flat.columns):
        _cell(grid.cell(0, col), str(name), bold=True)
    for row_no, row in enumerate(flat.itertuples(index=False), start=1):
        for col, value in enumerate(row):
            _cell(grid.cell(row_no, col), format_number(value))


def _cell(cell: Any, text: str, *, bold: bool = False) -> None:
    paragraph = cell.text_frame.paragraphs[0]
    run = paragraph.add_run()
    run.text = text
    set_run_font(run, BODY_PT, bold=bold)


def _chart_slide(deck: Any, title: str, png: bytes) -> None:
    slide = _blank(deck)
    _slide_title(slide, title)
    top = MARGIN + TITLE_H
    box_w, box_h = SLIDE_W - 2 * MARGIN, SLIDE_H - top - FOOTER_H - MARGIN
    picture = slide.shapes.add_picture(io.BytesIO(png), MARGIN, top)
    # Fit inside the box, keeping the aspect ratio, centred horizontally.
    ratio = min(box_w / picture.width, box_h / picture.height)
    picture.width, picture.height = int(picture.width * ratio), int(picture.height * ratio)
    picture.left = int(MARGIN + (box_w - picture.width) / 2)


FOOTER_NAME = "benchdeck-caveat"


def _footer(slide: Any, caveat: Sequence[str]) -> None:
    top = SLIDE_H - FOOTER_H - Inches(0.1)
    _text_box(slide, MARGIN, top, SLIDE_W - 2 * MARGIN, FOOTER_H, caveat, FOOTER_PT, colour=FOOTER_COLOUR)
    slide.shapes[-1].name = FOOTER_NAME  # tests and later edits find the footer by name
