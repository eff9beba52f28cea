"""Exports of a comparison: tables as CSV and Markdown, charts as PNG and SVG (vl-convert,
no browser), and a one-click PPTX deck built from those.

Every export carries the caveat footer of :func:`caveat_lines`: the comparability key,
the fields that differ, the number of repeats, the noise rule, and whether any data is
emulated or imported.

* CSV keeps every number exactly as the frame holds it (pandas writes the shortest repr
  that round-trips); the caveat follows the table as ``# ``-prefixed lines after a blank
  line, and every text cell is quoted, so ``pd.read_csv(path, comment="#")`` reads the table
  back whole (a '#' inside a quoted name is kept).  UTF-8 with a BOM, so Excel shows Japanese.
* Markdown rounds numbers for reading (see :func:`format_number`) and says so in its footer.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
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
from domain.core.settings import Settings
from domain.results import analysis, comparability
from domain.slides import charts
from domain.slides.charts import FONT, AnyChart

CSV_ENCODING = "utf-8-sig"
CAVEAT_PREFIX = "# "
PNG_SCALE = 2.0  # slides are projected large; 2× keeps text crisp


# -- the caveat footer ---------------------------------------------------------------------------


def caveat_lines(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                 intended_to_differ: Collection[str] = frozenset(), checklist: pd.DataFrame | None = None) -> list[str]:
    """The footer every export carries, in the UI language.  ``checklist`` (the output of
    :func:`comparability.comparability_summary`) saves recomputing it when at hand."""
    summary = checklist
    if summary is None:
        matrix = comparability.comparability_matrix(frame, baseline_run_id, run_ids, intended_to_differ)
        summary = comparability.comparability_summary(matrix)
    lines = [t("compare.caveat.key", lang, run_id=baseline_run_id,
               key=comparability.key_summary(frame, baseline_run_id, lang))]
    lines += _differences(summary, lang) or [t("compare.caveat.all_match", lang)]
    lines.append(t("compare.caveat.repeats", lang, repeats=_repeats_text(frame, [baseline_run_id, *run_ids])) + " · "
                 + t("compare.caveat.noise", lang, noise=_noise_text(lang)))
    lines.append(_sources_text(frame, [baseline_run_id, *run_ids], lang))
    return lines


def _differences(summary: pd.DataFrame, lang: str) -> list[str]:
    lines = []
    for _, row in summary.iterrows():
        if row["verdict"] != "comparable" or row["intended"]:
            fields = comparability.summary_line(row, lang)
            if row["intended"]:
                intended = ", ".join(comparability.condition_label(c, lang) for c in row["intended"])
                fields += f" · {t('compare.verdict.changed', lang)}: {intended}"
            lines.append(t("compare.caveat.differs", lang, run_id=row["run_id"], fields=fields))
    return lines


def _repeats_text(frame: pd.DataFrame, run_ids: Sequence[int]) -> str:
    rows = frame[frame["run_id"].isin(run_ids)]
    counts = rows.groupby(["run_id", *analysis.POINT]).size()
    low, high = int(counts.min()), int(counts.max())
    return str(low) if low == high else f"{low}–{high}"


def _noise_text(lang: str) -> str:
    return t("compare.noise.default", lang, band=f"{analysis.DEFAULT_NOISE_BAND_PCT:g}",
             tail=f"{analysis.TAIL_NOISE_BAND_PCT:g}") + " / " + t("compare.noise.repeats", lang, n="≥2")


def _sources_text(frame: pd.DataFrame, run_ids: Sequence[int], lang: str) -> str:
    sources = set(frame.loc[frame["run_id"].isin(run_ids), "source"])
    notes = [t(f"compare.caveat.{s}", lang) for s in ("emulated", "imported") if s in sources]
    return " · ".join(notes) or t("compare.caveat.measured_only", lang)


# -- tables --------------------------------------------------------------------------------------


def flat_table(table: pd.DataFrame) -> pd.DataFrame:
    """Index levels become columns and multi-level headers are joined with ' · '."""
    out = table.reset_index() if _has_named_index(table) else table.copy()
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" · ".join(str(p) for p in col if str(p)) for col in out.columns]
    return out


def _has_named_index(table: pd.DataFrame) -> bool:
    return any(name is not None for name in table.index.names)


def table_csv(table: pd.DataFrame, caveat: Sequence[str]) -> bytes:
    """CSV with exact numbers, then the caveat as '# ' lines (see the module docstring)."""
    body = flat_table(table).to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    footer = "".join(f"{CAVEAT_PREFIX}{line}\n" for line in caveat)
    return (body + "\n" + footer).encode(CSV_ENCODING)


def format_number(value: object) -> str:
    """Rounded for reading: whole numbers as integers with separators; 1 decimal from 100,
    2 from 1, 3 below.  NaN/None as an empty cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    number = float(value)
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if number.is_integer():
        return f"{int(number):,}"
    decimals = 1 if abs(number) >= 100 else 2 if abs(number) >= 1 else 3
    return f"{number:,.{decimals}f}"


def table_markdown(table: pd.DataFrame, caveat: Sequence[str], lang: str) -> str:
    """A GitHub Markdown table, numbers rounded (:func:`format_number`), then the caveat
    and a note that the values are rounded."""
    flat = flat_table(table)
    header = [_md_cell(c) for c in flat.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(_md_align(flat[c]) for c in flat.columns) + "|"]
    for row in flat.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(format_number(v)) for v in row) + " |")
    notes = [*caveat, t("compare.caveat.rounded", lang)]
    return "\n".join(lines) + "\n\n" + "\n".join(f"> {note}  " for note in notes) + "\n"


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _md_align(column: pd.Series) -> str:
    return " ---: " if pd.api.types.is_numeric_dtype(column) else " --- "


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


# -- one comparison, everything the page and the exports need ------------------------------------

DECK_METRICS = ("output_tok_s", "ttft_p99", "tpot_p50", "e2e_p99")
CHART_METRICS = ("output_tok_s", "qps", "ttft_p50", "ttft_p99", "tpot_p50", "e2e_p99")


@dataclass
class Comparison:
    """A baseline and runs compared in one language, with every derived frame."""

    frame: pd.DataFrame
    baseline_run_id: int
    run_ids: list[int]
    lang: str
    intended_to_differ: frozenset[str]
    summary: pd.DataFrame  # analysis.summarise_points
    compare: pd.DataFrame  # analysis.compare_table (long)
    saturation: pd.DataFrame
    scaling: pd.DataFrame
    pareto: pd.DataFrame
    badges: pd.DataFrame
    matrix: pd.DataFrame  # comparability.comparability_matrix
    checklist: pd.DataFrame  # comparability.comparability_summary
    caveat: list[str] = field(default_factory=list)


def build_comparison(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str, *,
                     intended_to_differ: Collection[str] = frozenset(),
                     gain_threshold_pct: float = analysis.DEFAULT_SATURATION_GAIN_PCT,
                     sla_metric: str | None = None, sla_threshold_ms: float | None = None) -> Comparison:
    others = [r for r in dict.fromkeys(run_ids) if r != baseline_run_id]
    selected = frame[frame["run_id"].isin([baseline_run_id, *others])]
    summary = analysis.summarise_points(selected)
    matrix = comparability.comparability_matrix(selected, baseline_run_id, others, intended_to_differ)
    checklist = comparability.comparability_summary(matrix)
    return Comparison(
        frame=selected, baseline_run_id=baseline_run_id, run_ids=others, lang=lang,
        intended_to_differ=frozenset(intended_to_differ), summary=summary,
        compare=analysis.compare_table(selected, baseline_run_id, [baseline_run_id, *others]),
        saturation=analysis.saturation_points(summary, gain_threshold_pct=gain_threshold_pct, sla_metric=sla_metric,
                                              sla_threshold_ms=sla_threshold_ms),
        scaling=analysis.scaling_efficiency(summary), pareto=analysis.pareto_points(summary),
        badges=analysis.validity_badges(selected), matrix=matrix,
        checklist=checklist,
        caveat=caveat_lines(selected, baseline_run_id, others, lang, intended_to_differ, checklist),
    )


def comparison_with_settings(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                             settings: Settings, *, intended_to_differ: Collection[str] = frozenset()) -> Comparison:
    """build_comparison with the saturation rule and p99 SLA taken from the settings, as
    both the compare page and ``runner export`` use it."""
    return build_comparison(frame, baseline_run_id, run_ids, lang, intended_to_differ=intended_to_differ,
                            gain_threshold_pct=settings.saturation_gain_pct,
                            sla_metric=settings.sla_metric if settings.sla_ms else None,
                            sla_threshold_ms=settings.sla_ms)


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
