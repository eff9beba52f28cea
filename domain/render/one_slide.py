"""The default export of a comparison: one 16:9 slide a teammate can drop into a team deck.

Its title is the comparison's headline (the verdict and the change under test, from the
older run to the newer: :mod:`domain.results.headline`); below it, the chosen metrics as a
compact table (metrics as rows, runs as columns, each cell the value and its Δ against the
baseline, coloured only when beyond both the noise and the practical threshold) beside one
editable chart (output tok/s against concurrency); at the foot a two-line caveat ending in a
reference to the full report (the deck, CSV and Markdown, and the compare page).

Every text is set at a size at which it fits its box, measured with the slide's own font
(:mod:`domain.render.text_fit`); what does not fit legibly (more runs or metrics than
:data:`MAX_RUNS` / :data:`MAX_ROWS`) is left to the full report, and the caveat says so.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.text import MSO_ANCHOR, MSO_AUTO_SIZE
from pptx.util import Emu, Inches, Pt

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render import text_fit
from domain.render.pptx_charts import draw_native_chart, throughput_chart
from domain.render.slide_parts import SLIDE_H, SLIDE_W, set_run_font
from domain.render.tables import format_number
from domain.results import analysis, difference

DEFAULT_METRICS = ("output_tok_s", "ttft_p50", "tpot_p50")
MAX_RUNS = 5  # the baseline and four runs: more columns would not be legible from the back of a room
MAX_ROWS = 8
LEGEND_CHARS = 28
MARGIN = Inches(0.4)
TITLE_BOX = (MARGIN, Inches(0.3), SLIDE_W - 2 * MARGIN, Inches(1.3))
TABLE_BOX = (MARGIN, Inches(1.8), Inches(7.2), Inches(4.5))
CHART_BOX = (Inches(7.85), Inches(1.8), SLIDE_W - Inches(7.85) - MARGIN, Inches(4.5))
CAVEAT_BOX = (MARGIN, Inches(6.55), SLIDE_W - 2 * MARGIN, Inches(0.65))
TITLE_SIZES = (28.0, 26.0, 24.0, 22.0, 20.0, 18.0, 16.0, 14.0)
TABLE_SIZES = (16.0, 15.0, 14.0, 13.0, 12.0, 11.0, 10.0)
CAVEAT_SIZES = (11.0, 10.0, 9.0, 8.0, 7.0)
CELL_MARGIN = Inches(0.06)
LABEL_SHARE = 0.3  # the metric column's share of the table's width
VERDICT_COLOURS = {"better": RGBColor(0x1A, 0x7F, 0x37), "worse": RGBColor(0xCF, 0x22, 0x2E),
                   "changed": RGBColor(0x9A, 0x67, 0x00)}
TEXT_COLOUR = RGBColor(0x22, 0x22, 0x22)
CAVEAT_COLOUR = RGBColor(0x55, 0x55, 0x55)
SHAPE_NAMES = ("benchdeck-title", "benchdeck-table", "benchdeck-chart", "benchdeck-caveat")


@dataclass(frozen=True)
class Cell:
    """One table cell: its lines (a value cell: the value, then its Δ) and the Δ's verdict."""

    lines: tuple[str, ...]
    verdict: str = ""


def one_slide(c: Comparison, report_ref: str, metrics: Sequence[str] = DEFAULT_METRICS) -> bytes:
    """The slide as PPTX bytes; ``report_ref`` names where the full report is (a file name,
    the compare page's address)."""
    deck = Presentation()
    deck.slide_width, deck.slide_height = SLIDE_W, SLIDE_H
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    runs = [c.baseline_run_id, *c.run_ids][:MAX_RUNS]
    rows = table_rows(c, metrics, runs)
    _fitted_text(slide, TITLE_BOX, [slide_title(c)], TITLE_SIZES, SHAPE_NAMES[0], bold=True)
    _table(slide, rows + quality_cells(c, runs), SHAPE_NAMES[1])
    chart = throughput_chart(c, first_scenario(c), runs, {r: _legend_name(c, r) for r in runs})
    draw_native_chart(slide, chart, CHART_BOX, c.lang, size_pt=11)
    slide.shapes[-1].name = SHAPE_NAMES[2]
    _fitted_text(slide, CAVEAT_BOX, caveat_lines(c, report_ref, len(rows) - 1, len(runs)), CAVEAT_SIZES,
                 SHAPE_NAMES[3], colour=CAVEAT_COLOUR, one_line_each=True)
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def slide_title(c: Comparison) -> str:
    """The first compared run's headline; more runs are counted, their lines are in the report."""
    first = c.headline_lines[0] if c.headline_lines else t("compare.deck.title", c.lang)
    more = len(c.headline_lines) - 1
    return first + (t("slides.one.more_headlines", c.lang, n=more) if more > 0 else "")


def first_scenario(c: Comparison) -> object:
    scenarios = c.summary.loc[c.summary["run_id"] == c.baseline_run_id, "scenario"]
    return scenarios.iloc[0] if len(scenarios) else sorted(c.summary["scenario"].unique(), key=str)[0]


def shown_concurrencies(c: Comparison, scenario: object, runs: Sequence[int]) -> list[object]:
    """The lowest and highest concurrency every shown run measured in ``scenario`` (the
    baseline's when they share none)."""
    rows = c.summary[c.summary["scenario"] == scenario]
    sets = [set(rows.loc[rows["run_id"] == r, "concurrency"]) for r in runs]
    common = set.intersection(*sets) if sets and all(sets) else (sets[0] if sets else set())
    ordered = sorted(common)
    return list(dict.fromkeys([ordered[0], ordered[-1]])) if ordered else []


def table_rows(c: Comparison, metrics: Sequence[str], runs: Sequence[int]) -> list[list[Cell]]:
    """The header row (runs), then one row per (metric, concurrency), at most :data:`MAX_ROWS`."""
    scenario = first_scenario(c)
    concurrencies = shown_concurrencies(c, scenario, runs)
    header = [Cell((t("slides.one.col_metric", c.lang),)), *(Cell(_run_lines(c, r)) for r in runs)]
    rows = [header]
    for metric in metrics:
        for conc in concurrencies:
            if len(rows) > MAX_ROWS:
                return rows
            label = Cell((analysis.metric_label(metric, c.lang), t("slides.one.at", c.lang, scenario=scenario,
                                                                    c=format_number(conc))))
            rows.append([label, *(_value_cell(c, metric, scenario, conc, r) for r in runs)])
    return rows


def quality_cells(c: Comparison, runs: Sequence[int]) -> list[list[Cell]]:
    """The quality row (domain/results/quality_view.py) when a shown run was probed or
    pinned: each run's verdict, a faster-and-changed run marked as a trade-off (amber)."""
    if not c.quality_lines:
        return []
    by_run = {row.run_id: row for row in c.quality_rows}

    def cell(run_id: int) -> Cell:
        row = by_run.get(run_id)
        if row is None:
            return Cell(("—",))
        text = "—" if row.verdict == "baseline" else t(f"quality.verdict.{row.verdict}", c.lang)
        lines = (text, t("quality.slide.trade_off", c.lang)) if row.trade_off else (text,)
        pinned = (t("quality.slide.pinned", c.lang, pinned=row.pinned),) if row.pinned else ()
        return Cell((*lines, *pinned), "changed" if row.verdict == "changed" else "")
    return [[Cell((t("quality.slide.label", c.lang),)), *(cell(r) for r in runs)]]


def _run_lines(c: Comparison, run_id: int) -> tuple[str, ...]:
    mark = t("slides.one.baseline_mark", c.lang) if run_id == c.baseline_run_id else ""
    name = str(c.run_names[run_id][0]) if run_id in c.run_names else ""
    return (f"#{run_id}{mark}", name)


def _legend_name(c: Comparison, run_id: int) -> str:
    """"#id name", the name cut at :data:`LEGEND_CHARS`: five entries stay one line each."""
    name = str(c.run_names[run_id][0]) if run_id in c.run_names else ""
    name = name if len(name) <= LEGEND_CHARS else name[:LEGEND_CHARS - 1] + "…"
    return f"#{run_id} {name}".strip()


def _value_cell(c: Comparison, metric: str, scenario: object, conc: object, run_id: int) -> Cell:
    rows = c.compare[(c.compare["metric"] == metric) & (c.compare["scenario"] == scenario)
                     & (c.compare["concurrency"] == conc) & (c.compare["run_id"] == run_id)]
    if rows.empty or analysis.is_missing(rows.iloc[0]["value"]):
        return Cell(("—",))
    row = rows.iloc[0]
    # The difference's interval is left to the deck, the CSV and the Markdown: nine runs' cells have no room for it.
    delta = analysis.delta_text(row["delta_pct"], row["verdict"], c.lang)
    return Cell((format_number(row["value"]), *((delta,) if delta else ())), str(row["verdict"]))


def caveat_lines(c: Comparison, report_ref: str, rows_shown: int, runs_shown: int) -> list[str]:
    """Two lines: what the numbers are and how a Δ is judged; where the full report is (and
    what of the comparison it alone holds)."""
    repeats = pd.to_numeric(c.summary["repeats"], errors="coerce")
    low, high = int(repeats.min()), int(repeats.max())
    sources = [t(f"compare.caveat.{s}", c.lang) for s in ("emulated", "imported") if s in set(c.summary["source"])]
    rule = t("slides.one.rule", c.lang, sources=" · ".join(sources) or t("compare.caveat.measured_only", c.lang),
             repeats=str(low) if low == high else f"{low}–{high}", baseline=c.baseline_run_id,
             pct=f"{c.practical_threshold_pct:g}", small=t("stats.delta_small", c.lang, delta="").strip())
    hidden = len(c.run_ids) + 1 - runs_shown
    more = t("slides.one.more_runs", c.lang, n=hidden) if hidden > 0 else ""
    return [rule, t("slides.one.full_report", c.lang, ref=report_ref) + more]


# -- drawing -------------------------------------------------------------------------------------


def _fitted_text(slide: Any, box: tuple[int, int, int, int], lines: Sequence[str], sizes: tuple[float, ...],
                 name: str, *, bold: bool = False, colour: RGBColor = TEXT_COLOUR, one_line_each: bool = False) -> None:
    left, top, width, height = box
    size = text_fit.fitting_size(list(lines), Emu(width).pt, Emu(height).pt, sizes, bold=bold,
                                 one_line_each=one_line_each)
    shape = slide.shapes.add_textbox(left, top, width, height)
    shape.name = name
    frame = shape.text_frame
    frame.word_wrap, frame.auto_size, frame.vertical_anchor = True, MSO_AUTO_SIZE.NONE, MSO_ANCHOR.TOP
    frame.margin_left = frame.margin_right = frame.margin_top = frame.margin_bottom = 0
    for i, line in enumerate(lines):
        paragraph = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
        paragraph.line_spacing = _spacing(size)
        set_run_font(paragraph.add_run(), size, bold=bold, colour=colour)
        paragraph.runs[-1].text = line


def _spacing(size: float) -> Pt:
    """Exact line spacing, the one text_fit counts: Noto CJK's own single spacing is about
    1.45 × the size, and renderers differ in how they read it."""
    return Pt(size * text_fit.LINE_SPACING)


def column_widths(columns: int, width: int) -> list[int]:
    """The metric column takes :data:`LABEL_SHARE`; the runs share the rest equally."""
    label = int(width * LABEL_SHARE) if columns > 1 else width
    rest = (width - label) // max(columns - 1, 1)
    return [label, *([rest] * (columns - 1))]


def table_size(rows: list[list[Cell]], widths: Sequence[int], height: int) -> float:
    """The largest table size at which every cell's lines stay one line each within its
    column and all rows fit ``height``; the runs' names are left out of the measure (they
    are shortened to fit: :func:`clipped_header`)."""
    measured = [[Cell(cell.lines[:1]) for cell in rows[0]], *rows[1:]]
    for size in TABLE_SIZES:
        fits = all(_cell_fits(cell, size, width) for row in measured for cell, width in zip(row, widths, strict=True))
        if fits and row_height(rows, size) * len(rows) <= height:
            return size
    return TABLE_SIZES[-1]


def clipped_header(cell: Cell, size: float, width: int) -> Cell:
    """A run's header with its name cut to the column's width ("…" at the cut); the id and
    the legend of the chart beside it keep the run named in full."""
    room = Emu(width - 2 * CELL_MARGIN).pt * text_fit.SAFETY
    return Cell(tuple(_clip(line, size, room) for line in cell.lines), cell.verdict)


def _clip(text: str, size: float, room: float) -> str:
    if text_fit.text_width_pt(text, size, bold=True) <= room:
        return text
    while text and text_fit.text_width_pt(text + "…", size, bold=True) > room:
        text = text[:-1]
    return text + "…"


def _cell_fits(cell: Cell, size: float, width: int) -> bool:
    room = Emu(width - 2 * CELL_MARGIN).pt * text_fit.SAFETY
    # Measured bold: headers, labels and judged deltas are set bold, and bold is the wider.
    return all(text_fit.text_width_pt(line, size, bold=True) <= room for line in cell.lines)


def row_height(rows: list[list[Cell]], size: float) -> int:
    """One height for every row: the tallest cell's lines at ``size`` and the cell margins."""
    lines = max(len(cell.lines) for row in rows for cell in row)
    return int(Pt(text_fit.height_pt(lines, size))) + 2 * CELL_MARGIN


def _table(slide: Any, rows: list[list[Cell]], name: str) -> None:
    left, top, width, height = TABLE_BOX
    widths = column_widths(len(rows[0]), width)
    size = table_size(rows, widths, height)
    shape = slide.shapes.add_table(len(rows), len(widths), left, top, width, row_height(rows, size) * len(rows))
    shape.name = name
    grid = shape.table
    for index, column_width in enumerate(widths):
        grid.columns[index].width = column_width
    for r, row in enumerate(rows):
        grid.rows[r].height = row_height(rows, size)
        for col, cell in enumerate(row):
            shown = clipped_header(cell, size, widths[col]) if r == 0 else cell
            _fill(grid.cell(r, col), shown, size, bold=r == 0 or col == 0)


def _fill(target: Any, cell: Cell, size: float, *, bold: bool) -> None:
    target.margin_left = target.margin_right = target.margin_top = target.margin_bottom = CELL_MARGIN
    frame = target.text_frame
    frame.word_wrap = True
    for i, line in enumerate(cell.lines):
        paragraph = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
        paragraph.line_spacing = _spacing(size)
        judged = i > 0 and cell.verdict in difference.JUDGED
        colour = VERDICT_COLOURS.get(cell.verdict) if judged else TEXT_COLOUR
        set_run_font(paragraph.add_run(), size, bold=bold or judged, colour=colour)
        paragraph.runs[-1].text = line
