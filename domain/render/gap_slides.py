"""The deck's "why not N×?" slides: per run with a concurrency step to explain, the stacked
bars of :func:`domain.render.charts.scaling_gap_chart` beside the sentences of
:func:`domain.results.scaling_gap.gap_sentences`; sentences that do not fit go on text-only
slides after it.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pptx.util import Emu, Inches, Pt

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.render import charts
from domain.render.pictures import slide_png
from domain.render.slide_parts import (
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
from domain.render.tables import run_label_of
from domain.results.scaling_gap import gap_sentences

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
        png = slide_png(charts.scaling_gap_chart(frame, c.lang))
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


def add_gap_slides(deck: Any, gap: GapSlide, lang: str) -> None:
    """The chart and its method note on the left, the sentences on the right; sentences that
    do not fit go on text-only slides after it, titled "(2/N)"."""
    top = MARGIN + TITLE_H
    height = SLIDE_H - top - FOOTER_H - MARGIN
    text_left = MARGIN + GAP_PICTURE_W + GAP_GUTTER
    first_w, full_w = SLIDE_W - MARGIN - text_left, SLIDE_W - 2 * MARGIN
    pages = _gap_pages(gap.steps, [first_w, full_w], height)
    for number, steps in enumerate(pages, start=1):
        slide = blank(deck)
        title = gap.title if len(pages) == 1 else t("compare.deck.table_part", lang, title=gap.title, part=number,
                                                    parts=len(pages))
        slide_title(slide, title)
        if number == 1:
            fit_picture(slide, gap.png, MARGIN, top, GAP_PICTURE_W, height - GAP_METHOD_H)
            text_box(slide, MARGIN, top + height - GAP_METHOD_H, GAP_PICTURE_W, GAP_METHOD_H, [gap.method],
                     FOOTER_PT, colour=FOOTER_COLOUR)
            _gap_text(slide, text_left, top, first_w, height, steps)
        else:
            _gap_text(slide, MARGIN, top, full_w, height, steps)


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
