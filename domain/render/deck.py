"""The deck of a comparison: the standard chart set, a table slide per metric and scenario,
and a one-click PPTX built from those with a title slide saying what changed, the editable
charts of :mod:`domain.render.pptx_charts`, a slide per chart picture
(:mod:`domain.render.pictures`) and the "why not N×?" slides of
:mod:`domain.render.gap_slides`.

Every slide carries the caveat footer of :func:`domain.compare.caveat.caveat_lines` (the
comparison holds it as ``caveat``).  The CSV and Markdown tables are in
:mod:`domain.render.tables`; the one slide in :mod:`domain.render.one_slide`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
from pptx import Presentation
from pptx.util import Inches

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render import charts
from domain.render.charts import AnyChart
from domain.render.gap_slides import GapSlide, add_gap_slides, scaling_gap_slides
from domain.render.pictures import slide_png
from domain.render.pptx_charts import NativeChart, native_chart_slide, native_charts
from domain.render.slide_parts import (
    BODY_PT,
    FOOTER_COLOUR,
    FOOTER_H,
    FOOTER_PT,
    MARGIN,
    SLIDE_H,
    SLIDE_W,
    TITLE_H,
    blank,
    fit_picture,
    set_run_font,
    slide_title,
    text_box,
)
from domain.render.tables import (
    comparison_estimates,
    export_head,
    flat_table,
    format_number,
    run_label_of,
)
from domain.render.workload_charts import workload_charts
from domain.results import analysis, curve_number, energy

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


ROWS_PER_TABLE_SLIDE = 12


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
        chart_images=[(title, slide_png(chart)) for title, chart in
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
    PNG bytes, e.g. from :func:`domain.render.pictures.slide_png`; editable charts from
    :func:`native_charts`; "why not N×?" slides from :func:`scaling_gap_slides`).
    Every run of text names :data:`domain.render.charts.FONT` for both Latin and East Asian
    script (:func:`domain.render.slide_parts.set_run_font`) so Japanese never falls back to
    a missing face."""
    deck = Presentation()
    deck.slide_width, deck.slide_height = SLIDE_W, SLIDE_H
    _title_slide(deck, title, subtitle, body, lang)
    for table_title, table in tables:
        for part_title, part in _table_parts(table_title, table, lang):
            _table_slide(deck, part_title, part)
    for native in native_charts:
        native_chart_slide(deck, native, lang)
    for chart_title, png in chart_images:
        _chart_slide(deck, chart_title, png)
    for gap in gap_slides:
        add_gap_slides(deck, gap, lang)
    for slide in deck.slides:
        _footer(slide, caveat)
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _title_slide(deck: Any, title: str, subtitle: str, body: Sequence[str], lang: str) -> None:
    slide = blank(deck)
    width = SLIDE_W - 2 * MARGIN
    text_box(slide, MARGIN, Inches(1.4), width, Inches(1.0), [title], 36, bold=True)
    text_box(slide, MARGIN, Inches(2.5), width, Inches(0.8), [subtitle], 18)
    generated = t("compare.deck.generated", lang, when=datetime.now().strftime("%Y-%m-%d %H:%M"))
    lines = [*body, "", generated]
    # The box holds about 12 lines at 14 pt; more lines get a smaller size rather than overflow.
    size = max(FOOTER_PT, min(BODY_PT + 2, (BODY_PT + 2) * 12 / len(lines)))
    text_box(slide, MARGIN, Inches(3.4), width, Inches(2.8), lines, size)


def _table_parts(title: str, table: pd.DataFrame, lang: str) -> list[tuple[str, pd.DataFrame]]:
    chunks = [table.iloc[i:i + ROWS_PER_TABLE_SLIDE] for i in range(0, max(len(table), 1), ROWS_PER_TABLE_SLIDE)]
    if len(chunks) == 1:
        return [(title, chunks[0])]
    return [(t("compare.deck.table_part", lang, title=title, part=i + 1, parts=len(chunks)), chunk)
            for i, chunk in enumerate(chunks)]


def _table_slide(deck: Any, title: str, table: pd.DataFrame) -> None:
    slide = blank(deck)
    slide_title(slide, title)
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
    slide = blank(deck)
    slide_title(slide, title)
    top = MARGIN + TITLE_H
    fit_picture(slide, png, MARGIN, top, SLIDE_W - 2 * MARGIN, SLIDE_H - top - FOOTER_H - MARGIN)


FOOTER_NAME = "benchdeck-caveat"


def _footer(slide: Any, caveat: Sequence[str]) -> None:
    top = SLIDE_H - FOOTER_H - Inches(0.1)
    text_box(slide, MARGIN, top, SLIDE_W - 2 * MARGIN, FOOTER_H, caveat, FOOTER_PT, colour=FOOTER_COLOUR)
    slide.shapes[-1].name = FOOTER_NAME  # tests and later edits find the footer by name
