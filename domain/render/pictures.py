"""Chart pictures: a chart as PNG or SVG, drawn by vl-convert (no browser).

An exported picture carries what changed (:func:`domain.render.tables.export_head`) above
the caveat footer of :func:`domain.compare.caveat.caveat_lines` (the comparison holds it
as ``caveat``); a slide's picture goes without them (:func:`slide_png`: the slide's own
footer carries the caveat); a page's picture is drawn in :data:`charts.PAGE_FONT`
without a footer (:func:`page_spec`, :func:`page_svg`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import vl_convert

from domain.compare.comparison import Comparison
from domain.render import charts
from domain.render.charts import PAGE_FONT, AnyChart
from domain.render.tables import export_head

PNG_SCALE = 2.0  # slides are projected large; 2× keeps text crisp


def _export_spec(chart: AnyChart, caveat: Sequence[str], head: Sequence[str] = ()) -> dict[str, Any]:
    return charts.styled(charts.with_footer(chart, caveat, head)).to_dict()


def chart_png(chart: AnyChart, caveat: Sequence[str], scale: float = PNG_SCALE, head: Sequence[str] = ()) -> bytes:
    """The chart with ``head`` (what changed) and the caveat below it, as PNG."""
    return _png(_export_spec(chart, caveat, head), scale)


def _png(spec: dict[str, Any], scale: float) -> bytes:
    # allowed_base_urls=[]: the data is inline, so the renderer may fetch nothing.
    return bytes(vl_convert.vegalite_to_png(spec, scale=scale, allowed_base_urls=[]))


def slide_png(chart: AnyChart) -> bytes:
    """The chart styled as the exports are but without their head and footer (a slide's own
    footer carries the caveat), as PNG."""
    return _png(charts.styled(chart).to_dict(), PNG_SCALE)


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
