"""The run page's charts as pictures (pages/parts/run_charts.py, domain/render/pictures.py
``page_svg``): what a visit of a finished run shows in each language, what a picture holds
when a name carries markup, and what the server draws before the page asks (AppTest against
a real DuckDB file with synthetic succeeded runs, bench/synthetic.py)."""

from __future__ import annotations

import base64
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from bench import synthetic
from db import Store
from domain.core.i18n import t
from domain.render.charts import PAGE_FONT, run_points_chart
from domain.render.pictures import PAGE_FONT_FAMILY, page_spec, svg_width
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


def test_a_picture_keeps_a_name_with_markup_as_text_and_names_the_face_it_was_measured_in() -> None:
    name = '<b>&"負荷" s0</b>'
    data = pd.DataFrame({"scenario": [name, name], "concurrency": [1, 2], "metric": ["output tok/s"] * 2,
                         "value": [100.0, 190.0]})
    svg = run_charts.picture(run_points_chart(data))
    root = ET.fromstring(svg)  # noqa: S314 - our own renderer's output; well-formed: the name stayed text
    texts = ["".join(node.itertext()) for node in root.iter("{http://www.w3.org/2000/svg}text")]
    assert name in texts
    families = {node.get("font-family") for node in root.iter() if node.get("font-family")}
    # Laid out in PAGE_FONT; the viewer draws it there, or in a face of the same widths, or at
    # worst in its sans-serif, never its default serif.
    assert page_spec(run_points_chart(data))["config"]["font"] == PAGE_FONT
    assert families == {PAGE_FONT_FAMILY}
    assert PAGE_FONT_FAMILY.startswith(f"{PAGE_FONT}, ") and PAGE_FONT_FAMILY.endswith(", sans-serif")
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
    monkeypatch.setattr(run_charts, "page_svg", counted(run_charts.page_svg, "picture", drawn))
    run_gaps.warm_run({"run": [str(run.id)], "lang": ["ja"]})
    assert drawn == ["picture", "picture"]  # the points' and the gaps'
    at = open_page("run", run=str(run.id), lang="ja")
    assert len([img for image in at.get("image") for img in image.proto.imgs]) == 2
    assert drawn == ["picture", "picture"]  # the page found both drawn


def test_a_pictures_spec_waits_for_streamlits_altair_lock() -> None:
    """Streamlit swaps Altair's process-wide data transformer and theme under this lock while
    it converts any session's st.altair_chart; a spec made meanwhile carried no data and drew
    an empty chart.  The picture waits for the lock, then carries its data."""
    from streamlit.elements.vega_charts import _altair_globals_lock

    data = pd.DataFrame({"scenario": ["s0", "s0"], "concurrency": [1, 2], "metric": ["output tok/s"] * 2,
                         "value": [123.0, 456.0]})
    done: list[str] = []
    with _altair_globals_lock:
        worker = threading.Thread(target=lambda: done.append(run_charts.picture(run_points_chart(data))))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not done  # held back while Streamlit would be converting
    worker.join(timeout=30)
    assert done and 'class="mark-line' in done[0]  # drawn with its line
    assert done[0] == run_charts.picture(run_points_chart(data))  # as drawn with nobody else at Altair
