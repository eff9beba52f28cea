"""The run page's charts as pictures (pages/parts/run_charts.py, domain/slides/deck.py
``page_svg``): what a visit of a finished run shows in each language, what a picture holds
when a name carries markup, and what the server draws before the page asks (AppTest against
a real DuckDB file with synthetic succeeded runs, bench/synthetic.py)."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from bench import synthetic
from db import Store
from domain.core.i18n import t
from domain.slides.charts import FONT, run_points_chart
from domain.slides.deck import page_svg, svg_width
from pages.parts import run_charts, run_gaps
from tests.support.calls import counted
from tests.support.pages import open_page

_SVG_URL = "data:image/svg+xml;base64,"


def _svg_of(url: str) -> str:
    assert url.startswith(_SVG_URL), url[:60]
    return base64.b64decode(url[len(_SVG_URL):]).decode("utf-8")


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_finished_run_shows_its_points_and_its_gaps_as_pictures(app_env: Path, lang: str) -> None:
    store = Store(app_env)
    synthetic.fill(store, runs=1, points_per_run=8)
    run = store.list_runs(limit=1)[0]
    at = open_page("run", run=str(run.id), lang=lang)
    assert not at.get("arrow_vega_lite_chart")  # no Vega chart left for the browser to draw
    pictures = {img.alt: _svg_of(img.url) for image in at.get("image") for img in image.proto.imgs}
    assert set(pictures) == {t("run.points_chart_alt", lang), t("run.gap_chart_alt", lang)}
    points, gaps = pictures[t("run.points_chart_alt", lang)], pictures[t("run.gap_chart_alt", lang)]
    assert ">output tok/s<" in points and ">TTFT p50 (ms)<" in points
    # The gap picture is in the visit's language: its causes' legend and its axis.
    assert f">{t('scaling_gap.cause_label.remaining', lang)}<" in gaps
    assert f">{t('scaling_gap.axis_cause', lang)}<" in gaps
    assert t("run.pictures_note", lang) in [c.value for c in at.caption]


def test_a_picture_keeps_a_name_with_markup_as_text_and_falls_back_to_a_sans_serif() -> None:
    name = '<b>&"負荷" s0</b>'
    data = pd.DataFrame({"scenario": [name, name], "concurrency": [1, 2], "metric": ["output tok/s"] * 2,
                         "value": [100.0, 190.0]})
    svg = page_svg(run_points_chart(data))
    root = ET.fromstring(svg)  # noqa: S314 - our own renderer's output; well-formed: the name stayed text
    texts = ["".join(node.itertext()) for node in root.iter("{http://www.w3.org/2000/svg}text")]
    assert name in texts
    families = {node.get("font-family") for node in root.iter() if node.get("font-family")}
    assert families == {f"{FONT}, sans-serif"}
    assert svg_width(svg) == round(float(root.get("width", "")))


def test_a_linked_runs_pictures_drawn_by_the_server_are_the_ones_the_page_shows(
        app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/page_warmup.py calls warm_run with a run link's query when the page's HTML is
    asked for: it draws the points' picture and the gaps' picture, and the page's first
    run draws neither again."""
    store = Store(app_env)
    synthetic.fill(store, runs=1, points_per_run=8)
    run = store.list_runs(limit=1)[0]
    drawn: list[str] = []
    monkeypatch.setattr(run_charts, "page_svg", counted(run_charts.page_svg, "points", drawn))
    monkeypatch.setattr(run_gaps, "page_svg", counted(run_gaps.page_svg, "gaps", drawn))
    run_gaps.warm_run({"run": [str(run.id)], "lang": ["ja"]})
    assert sorted(drawn) == ["gaps", "points"]
    at = open_page("run", run=str(run.id), lang="ja")
    assert len([img for image in at.get("image") for img in image.proto.imgs]) == 2
    assert sorted(drawn) == ["gaps", "points"]  # the page found both drawn
