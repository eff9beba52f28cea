"""How much room a line of slide text takes, measured with the font the slides name
(:data:`domain.render.charts.FONT`, Noto Sans CJK, the file Debian's ``fonts-noto-cjk``
installs), so the one-slide export can pick a size at which every box holds its text.

Where the font file is missing, a conservative estimate stands in: a Latin character
0.6 em wide, a wide (CJK) character 1 em, which is wider than Noto's own advances.
"""

from __future__ import annotations

import functools
import unicodedata
from pathlib import Path

from PIL import ImageFont

FONT_FILE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
BOLD_FONT_FILE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc")
LINE_SPACING = 1.2  # PowerPoint's single spacing: about 1.2 × the font size
PT_PER_INCH = 72
EMU_PER_PT = 12_700
MEASURE_PX = 100  # the size the font is loaded at; widths scale linearly from it
# A box is filled to this share of its width: renderers space glyphs a little differently
# (LibreOffice wrapped a line PIL measured at 98 % of its box).
SAFETY = 0.95


@functools.cache
def _font(bold: bool) -> ImageFont.FreeTypeFont | None:
    path = BOLD_FONT_FILE if bold else FONT_FILE
    return ImageFont.truetype(str(path), MEASURE_PX) if path.exists() else None


def text_width_pt(text: str, size_pt: float, *, bold: bool = False) -> float:
    """The advance width of ``text`` set at ``size_pt``, in points."""
    font = _font(bold)
    if font is None:
        ems = sum(1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.6 for ch in text)
        return ems * size_pt
    return float(font.getlength(text)) * size_pt / MEASURE_PX


def wrap(text: str, size_pt: float, width_pt: float, *, bold: bool = False) -> list[str]:
    """``text`` broken into lines no wider than ``width_pt``, after a space or between any
    two wide characters (Japanese has no spaces), as PowerPoint wraps it."""
    lines: list[str] = []
    line = ""
    for piece in _pieces(text):
        if line and text_width_pt(line + piece, size_pt, bold=bold) > width_pt:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line += piece
    return [*lines, line.rstrip()] if line.strip() or not lines else lines


def _pieces(text: str) -> list[str]:
    """Words with their trailing space, and each wide character on its own."""
    pieces: list[str] = []
    word = ""
    for ch in text:
        if unicodedata.east_asian_width(ch) in "WF":
            pieces += [word, ch] if word else [ch]
            word = ""
        else:
            word += ch
            if ch == " ":
                pieces.append(word)
                word = ""
    return [*pieces, word] if word else pieces


def height_pt(lines: int, size_pt: float) -> float:
    return lines * size_pt * LINE_SPACING


def fitting_size(texts: list[str], width_pt: float, height_pt_: float, sizes: tuple[float, ...], *,
                 bold: bool = False, one_line_each: bool = False) -> float:
    """The largest of ``sizes`` (largest first) at which ``texts``, one paragraph each, fit
    the box (each on one line, with ``one_line_each``); the smallest when none does."""
    for size in sizes:
        wrapped = [len(wrap(text, size, width_pt * SAFETY, bold=bold)) for text in texts]
        if one_line_each and max(wrapped, default=1) > 1:
            continue
        if height_pt(sum(wrapped), size) <= height_pt_:
            return size
    return sizes[-1]
