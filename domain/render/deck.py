"""Chart images and the deck of a comparison: charts as PNG and SVG (vl-convert, no
browser), the standard slide set, and a one-click PPTX built from those.

Every image and slide carries the caveat footer of :func:`domain.compare.caveat.caveat_lines`
(the comparison holds it as ``caveat``); the images made by :func:`comparison_chart_png` /
:func:`comparison_chart_svg` and the deck's first slide also say what changed
(:func:`domain.render.tables.export_head`).  Beside the chart pictures the deck carries
native PowerPoint charts (throughput against concurrency, the Pareto of interactivity
against throughput per GPU) that a teammate can restyle; their embedded workbooks are
written with formulas off, so a run name such as ``=HYPERLINK(…)`` stays text.  The CSV
and Markdown tables are in :mod:`domain.render.tables`.
"""

from __future__ import annotations

import io
import math
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import pandas as pd
import vl_convert
from pptx import Presentation
from pptx.chart.data import CategoryChartData, XyChartData
from pptx.chart.xlsx import CategoryWorkbookWriter, XyWorkbookWriter
from pptx.dml.color import RGBColor
from pptx.enum.chart import XL_CHART_TYPE, XL_LEGEND_POSITION
from pptx.oxml.ns import qn
from pptx.text.text import _Run
from pptx.util import Emu, Inches, Pt
from xlsxwriter import Workbook

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.core.numbers import real_number
from domain.render import charts
from domain.render.charts import FONT, PAGE_FONT, AnyChart
from domain.render.tables import (
    comparison_estimates,
    export_head,
    flat_table,
    format_number,
    marked_label,
    run_label_of,
)
from domain.render.workload_charts import workload_charts
from domain.results import analysis, curve, curve_number, energy
from domain.results.scaling_gap import gap_sentences

PNG_SCALE = 2.0  # slides are projected large; 2× keeps text crisp


# -- charts --------------------------------------------------------------------------------------


def _export_spec(chart: AnyChart, caveat: Sequence[str], head: Sequence[str] = ()) -> dict[str, Any]:
    return charts.styled(charts.with_footer(chart, caveat, head)).to_dict()


def chart_png(chart: AnyChart, caveat: Sequence[str], scale: float = PNG_SCALE, head: Sequence[str] = ()) -> bytes:
    """The chart with ``head`` (what changed) and the caveat below it, as PNG."""
    return _png(_export_spec(chart, caveat, head), scale)


def _png(spec: dict[str, Any], scale: float) -> bytes:
    # allowed_base_urls=[]: the data is inline, so the renderer may fetch nothing.
    return bytes(vl_convert.vegalite_to_png(spec, scale=scale, allowed_base_urls=[]))


def chart_svg(chart: AnyChart, caveat: Sequence[str], head: Sequence[str] = ()) -> str:
    """The chart with ``head`` (what changed) and the caveat below it, as SVG."""
    return str(vl_convert.vegalite_to_svg(_export_spec(chart, caveat, head), allowed_base_urls=[]))


# The family a page's picture names: the face vl-convert measured its text in, then the faces
# with the same widths (Arial's; Helvetica's are close), then the browser's sans-serif, never
# its default serif.  A script those faces lack (Japanese) is drawn in the browser's own
# fallback face, as vl-convert measured it in its own.
PAGE_FONT_FAMILY = f"{PAGE_FONT}, Arial, Helvetica, sans-serif"


def page_spec(chart: AnyChart) -> dict[str, Any]:
    """The Vega-Lite spec of a chart as a page shows it in a picture: styled as the exports
    are but in :data:`charts.PAGE_FONT` (charts.py says why), without their footer (the page
    around it says what the footer says).  Made with Altair's process-wide data transformer
    and theme: a page takes Streamlit's lock around it (pages/parts/run_charts.py
    ``picture``)."""
    return charts.styled(chart, PAGE_FONT).to_dict()


def page_svg(spec: dict[str, Any]) -> str:
    """:func:`page_spec`'s spec as SVG, its text naming :data:`PAGE_FONT_FAMILY` (vl-convert
    writes the family as one attribute value, always the spec's one:
    tests/test_run_charts.py)."""
    svg = str(vl_convert.vegalite_to_svg(spec, allowed_base_urls=[]))
    return svg.replace(f'font-family="{PAGE_FONT}"', f'font-family="{PAGE_FONT_FAMILY}"')


def svg_width(svg: str) -> int:
    """The width in CSS pixels that vl-convert gives a picture (its root element's ``width``)."""
    root = svg[svg.index("<svg"):]
    root = root[:root.index(">")]
    return round(float(root.split(' width="', 1)[1].split('"', 1)[0]))


def comparison_chart_png(c: Comparison, chart: AnyChart, scale: float = PNG_SCALE) -> bytes:
    """A chart of ``c`` as PNG, saying what changed and carrying the caveat."""
    return chart_png(chart, c.caveat, scale, head=export_head(c))


def comparison_chart_svg(c: Comparison, chart: AnyChart) -> str:
    """A chart of ``c`` as SVG, saying what changed and carrying the caveat."""
    return chart_svg(chart, c.caveat, head=export_head(c))


# -- the slide set ------------------------------------------------------------------------------

DECK_METRICS = ("output_tok_s", "ttft_p99", "tpot_p50", "e2e_p99")
CHART_METRICS = ("output_tok_s", "qps", "ttft_p50", "ttft_p99", "tpot_p50", "e2e_p99")


def standard_charts(c: Comparison) -> list[tuple[str, AnyChart]]:
    """The slide set: metrics, Pareto, tail latency, GPU, scaling — (title, chart).  The
    metric and latency charts carry each run's estimate, dashed, where it has one
    (:func:`domain.render.tables.comparison_estimates`)."""
    lang = c.lang
    estimates = comparison_estimates(c)
    return [
        (t("compare.chart.metrics_title", lang),
         charts.metric_chart(c.summary, CHART_METRICS, lang, saturation=c.saturation, columns=3,
                             estimates=estimates)),
        (t("compare.chart.pareto_title", lang), charts.pareto_chart(c.pareto, lang)),
        (t("compare.chart.latency_title", lang),
         charts.latency_vs_throughput_chart(c.summary, lang, estimates=estimates)),
        (t("compare.chart.gpu_title", lang), charts.gpu_chart(c.summary, lang, saturation=c.saturation)),
        (t("compare.chart.scaling_title", lang), charts.scaling_chart(c.scaling, lang, c.summary)),
        *workload_charts(c),  # a rate sweep's curve and knee, where the comparison has one
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
        delta = analysis.delta_text(row["delta_pct"], row["verdict"], c.lang, row["delta_low_pct"],
                                    row["delta_high_pct"])
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
                    chart_set: Sequence[tuple[str, AnyChart]] | None = None,
                    gaps: Mapping[int, pd.DataFrame] | None = None) -> bytes:
    """One-click deck: a title slide saying what changed (each run's verdict, the changed
    flags and the conditions under test) and each curve's one number
    (:func:`curve_number_lines`) and the runs without J/output token (:func:`energy_lines`),
    a table slide per metric and scenario (split when long; J/output token too when a run has it),
    native editable charts, a slide per chart picture, then a "why not N×?"
    slide per run that has a step to explain (``gaps``: run_id → the frame of
    :func:`domain.results.scaling_gap.explain_run`, e.g. from ``db.scaling_gap_inputs``;
    see :func:`scaling_gap_slides`) — caveat on every slide."""
    tables = [
        (t("compare.deck.table", c.lang, metric=analysis.metric_label(m, c.lang), scenario=s),
         metric_slide_table(c, m, s))
        for s in sorted(c.summary["scenario"].unique(), key=str) for m in metrics
    ]
    runs = ", ".join(run_label_of(c, r) for r in c.run_ids)
    return deck_pptx(
        title=t("compare.deck.title", c.lang),
        subtitle=t("compare.deck.subtitle", c.lang, baseline=run_label_of(c, c.baseline_run_id), runs=runs or "—"),
        body=[*export_head(c), *curve_number_lines(c), *energy_lines(c)],
        tables=[*tables, *energy_tables(c)],
        native_charts=native_charts(c),
        # The slide's own footer carries the caveat, so the images go without theirs.
        chart_images=[(title, _png(charts.styled(chart).to_dict(), PNG_SCALE)) for title, chart in
                      (chart_set if chart_set is not None else standard_charts(c))],
        gap_slides=scaling_gap_slides(c, gaps or {}),
        caveat=c.caveat, lang=c.lang,
    )


def curve_number_lines(c: Comparison) -> list[str]:
    """The title slide's one number per curve (domain/results/curve_number.py): each run and
    scenario's output tok/s per GPU at the stated interactivity with its interval, and the
    area under its curve over the range every compared curve measured."""
    numbers = curve_number.curve_numbers(c.summary, c.lang, c.interactivity_target)
    return [curve_number.number_line(n, c.lang) for n in numbers]


def energy_lines(c: Comparison) -> list[str]:
    """The title slide's word on energy: the runs without J/output token and why (the table
    slide per scenario carries the figures where there are some)."""
    line = energy.energy_absence_line(c.frame, c.lang)
    return [] if line is None else [line]


def energy_tables(c: Comparison) -> list[tuple[str, pd.DataFrame]]:
    """A J/output token table slide per scenario, when a compared run has the figure."""
    if len(energy.runs_without_energy(c.frame, c.lang)) == len(set(c.frame["run_id"])):
        return []
    return [(t("compare.deck.table", c.lang, metric=analysis.metric_label("j_per_token", c.lang), scenario=s),
             metric_slide_table(c, "j_per_token", s)) for s in sorted(c.summary["scenario"].unique(), key=str)]


def deck_pptx(*, title: str, subtitle: str, body: Sequence[str], tables: Sequence[tuple[str, pd.DataFrame]],
              chart_images: Sequence[tuple[str, bytes]], caveat: Sequence[str], lang: str,
              native_charts: Sequence[NativeChart] = (), gap_slides: Sequence[GapSlide] = ()) -> bytes:
    """A 16:9 deck from ready-made parts (texts already in the UI language; chart images as
    PNG bytes, e.g. from :func:`chart_png`; editable charts from :func:`native_charts`;
    "why not N×?" slides from :func:`scaling_gap_slides`).
    Every run of text names :data:`FONT` for both Latin and East Asian script so Japanese
    never falls back to a missing face."""
    deck = Presentation()
    deck.slide_width, deck.slide_height = SLIDE_W, SLIDE_H
    _title_slide(deck, title, subtitle, body, lang)
    for table_title, table in tables:
        for part_title, part in _table_parts(table_title, table, lang):
            _table_slide(deck, part_title, part)
    for native in native_charts:
        _native_chart_slide(deck, native, lang)
    for chart_title, png in chart_images:
        _chart_slide(deck, chart_title, png)
    for gap in gap_slides:
        _gap_slides(deck, gap, lang)
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
    east_asian_font(run._r.get_or_add_rPr())


def east_asian_font(rpr: Any) -> None:
    """Name :data:`FONT` as the East Asian typeface (``a:ea``) of text properties whose
    Latin typeface is already set (``a:latin``, which python-pptx's font.name writes)."""
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
    lines = [*body, "", generated]
    # The box holds about 12 lines at 14 pt; more lines get a smaller size rather than overflow.
    size = max(FOOTER_PT, min(BODY_PT + 2, (BODY_PT + 2) * 12 / len(lines)))
    _text_box(slide, MARGIN, Inches(3.4), width, Inches(2.8), lines, size)


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
    _fit_picture(slide, png, MARGIN, top, SLIDE_W - 2 * MARGIN, SLIDE_H - top - FOOTER_H - MARGIN)


FOOTER_NAME = "benchdeck-caveat"


def _footer(slide: Any, caveat: Sequence[str]) -> None:
    top = SLIDE_H - FOOTER_H - Inches(0.1)
    _text_box(slide, MARGIN, top, SLIDE_W - 2 * MARGIN, FOOTER_H, caveat, FOOTER_PT, colour=FOOTER_COLOUR)
    slide.shapes[-1].name = FOOTER_NAME  # tests and later edits find the footer by name


# -- native (editable) charts --------------------------------------------------------------------


@dataclass(frozen=True)
class NativeChart:
    """One editable PowerPoint chart: its slide title, chart type, data (None when there is
    none: the slide says so) and axis titles."""

    title: str
    chart_type: XL_CHART_TYPE
    data: CategoryChartData | XyChartData | None
    x_title: str
    y_title: str


class _LiteralWorkbook:
    """The chart's embedded workbook with text kept as text: xlsxwriter's ``write`` makes
    a formula of text starting with '=' and a link of a URL unless told not to, and a
    run's name is a series name there."""

    @contextmanager
    def _open_worksheet(self, xlsx_file: IO[bytes]) -> Iterator[tuple[Any, Any]]:
        workbook = Workbook(xlsx_file, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False,
                                        "strings_to_numbers": False})
        worksheet = workbook.add_worksheet()
        yield workbook, worksheet
        workbook.close()


class _LiteralCategoryWriter(_LiteralWorkbook, CategoryWorkbookWriter):
    pass


class _LiteralXyWriter(_LiteralWorkbook, XyWorkbookWriter):
    pass


class LiteralCategoryChartData(CategoryChartData):
    """:class:`CategoryChartData` whose workbook keeps text literal (:class:`_LiteralWorkbook`)."""

    @property
    def _workbook_writer(self) -> CategoryWorkbookWriter:
        return _LiteralCategoryWriter(self)


class LiteralXyChartData(XyChartData):
    """:class:`XyChartData` whose workbook keeps text literal (:class:`_LiteralWorkbook`)."""

    @property
    def _workbook_writer(self) -> XyWorkbookWriter:
        return _LiteralXyWriter(self)


def native_charts(c: Comparison) -> list[NativeChart]:
    """Per scenario: output tok/s against concurrency (a line per run, the summary's mean
    over repeats) and interactivity against throughput per GPU (the Pareto frame's points,
    a series per run)."""
    scenarios = sorted(c.summary["scenario"].unique(), key=str)
    return [*(throughput_chart(c, s) for s in scenarios), *(_pareto_chart(c, s) for s in scenarios)]


def _pairs(rows: pd.DataFrame, run_id: int, x: str, y: str) -> list[tuple[float | None, float | None]]:
    of_run = rows[rows["run_id"] == run_id]
    # None for a missing or non-numeric cell (imported runs may lack a metric); a chart has no place for NaN.
    return [(real_number(a, text=True, finite=True), real_number(b, text=True, finite=True))
            for a, b in zip(of_run[x], of_run[y], strict=True)]


def throughput_chart(c: Comparison, scenario: object, runs: Sequence[int] | None = None,
                     labels: Mapping[int, str] | None = None) -> NativeChart:
    """Output tok/s against concurrency, a line per run (``runs``, by default every run of
    the comparison), named by ``labels`` or :func:`marked_label` (the deck's and the one slide's)."""
    metric = curve.DEFAULT_THROUGHPUT_METRIC
    rows = c.summary[c.summary["scenario"] == scenario]
    concurrencies = sorted({x for x in (real_number(v, text=True, finite=True) for v in rows["concurrency"])
                            if x is not None})
    data = LiteralCategoryChartData(number_format="General")
    data.categories = [int(x) if x.is_integer() else x for x in concurrencies]
    for run_id in runs if runs is not None else [c.baseline_run_id, *c.run_ids]:
        of_run = dict(_pairs(rows, run_id, "concurrency", metric))
        values = [of_run.get(x) for x in concurrencies]
        if any(v is not None for v in values):
            data.add_series((labels or {}).get(run_id) or marked_label(c, run_id), values)
    label = analysis.metric_label(metric, c.lang)
    return NativeChart(t("slides.native.throughput", c.lang, metric=label, scenario=scenario),
                       XL_CHART_TYPE.LINE_MARKERS, data if len(data) else None,
                       t("compare.chart.concurrency", c.lang), label)


def _pareto_chart(c: Comparison, scenario: object) -> NativeChart:
    rows = c.pareto[c.pareto["scenario"] == scenario]
    data = LiteralXyChartData(number_format="General")
    for run_id in [c.baseline_run_id, *c.run_ids]:
        points = [(x, y) for x, y in _pairs(rows, run_id, "interactivity", "throughput_per_gpu")
                  if x is not None and y is not None]
        if points:
            series = data.add_series(marked_label(c, run_id))
            for x, y in points:
                series.add_data_point(x, y)
    return NativeChart(t("slides.native.pareto", c.lang, scenario=scenario), XL_CHART_TYPE.XY_SCATTER,
                       data if len(data) else None, t("compare.chart.interactivity", c.lang),
                       t("compare.chart.throughput_per_gpu", c.lang))


def _native_chart_slide(deck: Any, native: NativeChart, lang: str) -> None:
    slide = _blank(deck)
    _slide_title(slide, native.title)
    top = MARGIN + TITLE_H
    draw_native_chart(slide, native, (MARGIN, top, SLIDE_W - 2 * MARGIN, SLIDE_H - top - FOOTER_H - MARGIN), lang)


def draw_native_chart(slide: Any, native: NativeChart, box: tuple[int, int, int, int], lang: str,
                      size_pt: float = BODY_PT) -> None:
    """``native`` as an editable chart in ``box`` (left, top, width, height), legend below;
    a line saying there is no data when it has none."""
    left, top, width, height = box
    if native.data is None:
        _text_box(slide, left, top, width, Inches(1), [t("slides.no_data", lang, what=native.title)], size_pt + 4)
        return
    chart = slide.shapes.add_chart(native.chart_type, left, top, width, height, native.data).chart
    chart.has_legend = True
    chart.legend.position = XL_LEGEND_POSITION.BOTTOM
    chart.legend.include_in_layout = False
    chart.font.name, chart.font.size = FONT, Pt(size_pt)
    east_asian_font(chart.font._rPr)  # legend and tick labels: series names may be Japanese
    for axis, title in ((chart.category_axis, native.x_title), (chart.value_axis, native.y_title)):
        axis.has_title = True
        paragraph = axis.axis_title.text_frame.paragraphs[0]
        set_run_font(paragraph.add_run(), size_pt, bold=False)
        paragraph.runs[-1].text = title


# -- "why not N×?" slides of the deck ------------------------------------------------------------

GAP_PT = 11  # the sentences: as many as fit beside the chart, still readable when projected
GAP_SPACE_PT = 4  # space above each step's summary line
GAP_PICTURE_W = Inches(6.9)  # the chart's column; the sentences take the rest of the width
GAP_GUTTER = Inches(0.25)
GAP_METHOD_H = Inches(1.25)  # the method note below the chart, at the footer's size
EM_PER_CELL = 0.55  # a conservative mean advance of a Latin character (a CJK character: 2 cells)


@dataclass(frozen=True)
class GapSlide:
    """One run's "why not N×?" slide: its title (the run named as legends name it), the
    stacked bars as PNG (no footer: the slide's own carries the caveat), the sentences of
    each concurrency step (its summary first, then its causes', largest first) and the note
    saying how the split is measured."""

    title: str
    png: bytes
    steps: tuple[tuple[str, ...], ...]
    method: str


def scaling_gap_slides(c: Comparison, gaps: Mapping[int, pd.DataFrame]) -> list[GapSlide]:
    """A :class:`GapSlide` per run of ``c`` (baseline first, then in ``c.run_ids``' order)
    whose frame in ``gaps`` has a step: runs measured at one concurrency per scenario, and
    runs absent from ``gaps``, get none."""
    out = []
    for run_id in dict.fromkeys([c.baseline_run_id, *c.run_ids]):
        frame = gaps.get(run_id)
        if frame is None or frame.empty:
            continue
        title = t("deck_gap.title", c.lang, title=t("scaling_gap.title", c.lang), run=run_label_of(c, run_id))
        png = _png(charts.styled(charts.scaling_gap_chart(frame, c.lang)).to_dict(), PNG_SCALE)
        out.append(GapSlide(title, png, gap_steps(frame, c.lang), t("scaling_gap.method", c.lang)))
    return out


def gap_steps(frame: pd.DataFrame, lang: str) -> tuple[tuple[str, ...], ...]:
    """Per scenario and step of an explained frame: the step's summary, headed by its scenario
    (the summary itself names only the concurrencies), then the sentences of
    :func:`domain.results.scaling_gap.gap_sentences`."""
    out = []
    for (scenario, _, _), step in frame.groupby(["scenario", "c_from", "c_to"], sort=True):
        summary, *causes = gap_sentences(step, lang)
        out.append((t("deck_gap.step", lang, scenario=scenario, summary=summary), *causes))
    return tuple(out)


def _cells(text: str) -> int:
    """Width in Latin-character cells: wide and full-width characters (Japanese) take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _text_lines(text: str, width: int) -> int:
    """How many lines ``text`` wraps to in a box ``width`` EMU wide at :data:`GAP_PT`."""
    per_line = max(1, int(Emu(width).pt / (GAP_PT * EM_PER_CELL)))
    return max(1, math.ceil(_cells(text) / per_line))


def _step_lines(step: Sequence[str], width: int) -> float:
    return GAP_SPACE_PT / (GAP_PT * 1.2) + sum(_text_lines(f"• {line}", width) for line in step)


def _gap_pages(steps: Sequence[Sequence[str]], widths: Sequence[int], height: int) -> list[list[Sequence[str]]]:
    """The steps laid out on pages: a step never splits unless it alone overflows a page.
    ``widths``: the text width of the first page, then of every further page."""
    capacity = Emu(height).pt / (GAP_PT * 1.2)
    pages: list[list[Sequence[str]]] = [[]]
    used = 0.0
    for step in steps:
        width = widths[min(len(pages) - 1, len(widths) - 1)]
        need = _step_lines(step, width)
        if pages[-1] and used + need > capacity:
            pages.append([])
            used = 0.0
            need = _step_lines(step, widths[min(len(pages) - 1, len(widths) - 1)])
        pages[-1].append(step)
        used += need
    return pages


def _gap_slides(deck: Any, gap: GapSlide, lang: str) -> None:
    """The chart and its method note on the left, the sentences on the right; sentences that
    do not fit go on text-only slides after it, titled "(2/N)"."""
    top = MARGIN + TITLE_H
    height = SLIDE_H - top - FOOTER_H - MARGIN
    text_left = MARGIN + GAP_PICTURE_W + GAP_GUTTER
    first_w, full_w = SLIDE_W - MARGIN - text_left, SLIDE_W - 2 * MARGIN
    pages = _gap_pages(gap.steps, [first_w, full_w], height)
    for number, steps in enumerate(pages, start=1):
        slide = _blank(deck)
        title = gap.title if len(pages) == 1 else t("compare.deck.table_part", lang, title=gap.title, part=number,
                                                    parts=len(pages))
        _slide_title(slide, title)
        if number == 1:
            _fit_picture(slide, gap.png, MARGIN, top, GAP_PICTURE_W, height - GAP_METHOD_H)
            _text_box(slide, MARGIN, top + height - GAP_METHOD_H, GAP_PICTURE_W, GAP_METHOD_H, [gap.method],
                      FOOTER_PT, colour=FOOTER_COLOUR)
            _gap_text(slide, text_left, top, first_w, height, steps)
        else:
            _gap_text(slide, MARGIN, top, full_w, height, steps)


def _fit_picture(slide: Any, png: bytes, left: int, top: int, width: int, height: int) -> None:
    """The picture inside the box, keeping its aspect ratio, centred horizontally."""
    picture = slide.shapes.add_picture(io.BytesIO(png), left, top)
    ratio = min(width / picture.width, height / picture.height)
    picture.width, picture.height = int(picture.width * ratio), int(picture.height * ratio)
    picture.left = int(left + (width - picture.width) / 2)


def _gap_text(slide: Any, left: int, top: int, width: int, height: int, steps: Sequence[Sequence[str]]) -> None:
    """Each step: its summary in bold, then a bullet per cause."""
    frame = slide.shapes.add_textbox(left, top, width, height).text_frame
    frame.word_wrap = True
    first = True
    for step in steps:
        for index, line in enumerate(step):
            paragraph = frame.paragraphs[0] if first else frame.add_paragraph()
            first = False
            if index == 0:
                paragraph.space_before = Pt(GAP_SPACE_PT)
            run = paragraph.add_run()
            run.text = line if index == 0 else f"• {line}"
            set_run_font(run, GAP_PT, bold=index == 0)
