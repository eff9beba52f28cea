"""The deck's editable PowerPoint charts: output tok/s against concurrency and the Pareto of
interactivity against throughput per GPU, per scenario, which a teammate can restyle.  Their
embedded workbooks are written with formulas off, so a run name such as ``=HYPERLINK(…)``
stays text (python-pptx's chart-data classes with a literal workbook writer).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import pandas as pd
from pptx.chart.data import CategoryChartData, XyChartData
from pptx.chart.xlsx import CategoryWorkbookWriter, XyWorkbookWriter
from pptx.enum.chart import XL_CHART_TYPE, XL_LEGEND_POSITION
from pptx.util import Inches, Pt
from xlsxwriter import Workbook

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.core.numbers import real_number
from domain.render.charts import FONT
from domain.render.slide_parts import (
    BODY_PT,
    FOOTER_H,
    MARGIN,
    SLIDE_H,
    SLIDE_W,
    TITLE_H,
    blank,
    east_asian_font,
    set_run_font,
    slide_title,
    text_box,
)
from domain.render.tables import marked_label
from domain.results import analysis, curve


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


def native_chart_slide(deck: Any, native: NativeChart, lang: str) -> None:
    """A slide holding ``native`` under its title, filling the space above the footer."""
    slide = blank(deck)
    slide_title(slide, native.title)
    top = MARGIN + TITLE_H
    draw_native_chart(slide, native, (MARGIN, top, SLIDE_W - 2 * MARGIN, SLIDE_H - top - FOOTER_H - MARGIN), lang)


def draw_native_chart(slide: Any, native: NativeChart, box: tuple[int, int, int, int], lang: str,
                      size_pt: float = BODY_PT) -> None:
    """``native`` as an editable chart in ``box`` (left, top, width, height), legend below;
    a line saying there is no data when it has none."""
    left, top, width, height = box
    if native.data is None:
        text_box(slide, left, top, width, Inches(1), [t("slides.no_data", lang, what=native.title)], size_pt + 4)
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
