"""The run page's charts of its points and of "Why not N×?" as pictures the server draws
(pages/run.py).

In a fresh tab the browser spent about 0.6 s drawing the run page's two Vega charts: eight
app starts with them and eight without, settled 2.04 s and 1.42 s median (the cold visit of
``bench/pages_browser.py``, 10,000 runs).  Most of it is Vega's code running for the first
time in the tab, which the first chart pays whatever its size, so one chart fewer saved
little.  A picture drawn by vl-convert, as the exports are (``domain.render.pictures``), costs
the browser next to nothing: eight starts of each, interleaved, settled 2.02 s with the Vega
charts, 1.88 s with PNG pictures (drawn at 2×: 0.25-0.5 s of the server each) and 1.65 s
with SVG pictures (0.2 s each), so SVG.  The server draws each picture once, cached by the
data it shows; vl-convert's runtime is started at start-up (``scripts/serve_app.py``), and a
run's link draws its pictures before its page asks (``run_gaps.warm_run``).  A picture has
no tooltips: the table above the points holds every number, the list under "Why not N×?"
every cause's sentence.  The telemetry stays a Vega chart (pages/run.py says why), so a run
with telemetry still pays Vega's first chart.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.elements.vega_charts import _altair_globals_lock

from db.rows import PointRow
from domain.render.charts import AnyChart, run_points_chart
from domain.render.pictures import page_spec, page_svg, svg_width

# The points chart's metrics: (the point's field, the name the page's table gives it).
CHARTED = (("output_throughput", "output tok/s"), ("ttft_median_ms", "TTFT p50 (ms)"))


def points_chart_data(points: list[PointRow]) -> pd.DataFrame:
    """The points as the chart draws them: scenario, concurrency, metric, value (long form),
    built the same way by the page and by the warm-up, so both key one picture."""
    wide = pd.DataFrame({"scenario": [p.scenario for p in points], "concurrency": [p.concurrency for p in points],
                         **{name: [getattr(p, field) for p in points] for field, name in CHARTED}})
    return wide.melt(id_vars=["scenario", "concurrency"], value_vars=[name for _, name in CHARTED],
                     var_name="metric")


def picture(chart: AnyChart) -> str:
    """The chart as SVG.  Its spec is made under Streamlit's lock of Altair's process-wide
    data transformer and theme (a private name of Streamlit 1.67, which a test checks):
    Streamlit swaps both while it converts any session's ``st.altair_chart``, and a spec
    made in that window names its data without carrying it, which vl-convert draws as an
    empty chart (a review of this change reproduced it); cached, it would stay empty."""
    with _altair_globals_lock:
        spec = page_spec(chart)
    return page_svg(spec)


@st.cache_data(show_spinner=False, max_entries=64)
def points_picture(chart_data: pd.DataFrame) -> str:
    """:func:`run_points_chart` as SVG, keyed by the points: a point that lands is a new picture."""
    return picture(run_points_chart(chart_data))


def show_picture(svg: str, alt: str) -> None:
    """A chart's picture at its own size (one wider than the column is shrunk to fit it)."""
    st.image(svg, width=svg_width(svg), alt=alt)
