"""The parts every benchdeck slide is built of: the 16:9 page's geometry and type sizes, a
blank slide, text boxes and runs whose Latin and East Asian typeface are both
:data:`charts.FONT` (so Japanese never falls back to a missing face), a slide title and a
picture fitted into a box.  The deck (:mod:`domain.render.deck`), its editable charts
(:mod:`domain.render.pptx_charts`), its "why not N×?" slides (:mod:`domain.render.gap_slides`)
and the one slide (:mod:`domain.render.one_slide`) draw with these.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from pptx.dml.color import RGBColor
from pptx.oxml.ns import qn
from pptx.text.text import _Run
from pptx.util import Inches, Pt

from domain.render.charts import FONT

SLIDE_W, SLIDE_H = Inches(13.333), Inches(7.5)
MARGIN = Inches(0.4)
FOOTER_H = Inches(0.85)
TITLE_H = Inches(0.8)
FOOTER_PT, BODY_PT, TITLE_PT = 9, 12, 26
FOOTER_COLOUR = RGBColor(0x55, 0x55, 0x55)


def blank(deck: Any) -> Any:
    """A new blank slide at the end of ``deck``."""
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


def text_box(slide: Any, left: int, top: int, width: int, height: int, lines: Sequence[str], size_pt: float, *,
             bold: bool = False, colour: RGBColor | None = None) -> None:
    """A word-wrapped text box in the box (left, top, width, height), a paragraph per line."""
    frame = slide.shapes.add_textbox(left, top, width, height).text_frame
    frame.word_wrap = True
    for i, line in enumerate(lines):
        paragraph = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
        run = paragraph.add_run()
        run.text = line
        set_run_font(run, size_pt, bold=bold, colour=colour)


def slide_title(slide: Any, title: str) -> None:
    """The slide's title across the top, in bold."""
    text_box(slide, MARGIN, Inches(0.25), SLIDE_W - 2 * MARGIN, TITLE_H, [title], TITLE_PT, bold=True)


def fit_picture(slide: Any, png: bytes, left: int, top: int, width: int, height: int) -> None:
    """The picture inside the box, keeping its aspect ratio, centred horizontally."""
    picture = slide.shapes.add_picture(io.BytesIO(png), left, top)
    ratio = min(width / picture.width, height / picture.height)
    picture.width, picture.height = int(picture.width * ratio), int(picture.height * ratio)
    picture.left = int(left + (width - picture.width) / 2)
