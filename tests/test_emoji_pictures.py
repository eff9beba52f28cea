"""Emoji in run names are drawn in colour in the server-drawn pictures (vl-convert's PNG,
the deck's chart pictures): the set-up installs Debian's fonts-noto-color-emoji
(scripts/lib.sh), and vl-convert reads the system's fonts.  A missing emoji font draws a
grey box (tofu) or nothing: no saturated pixel at all."""

from __future__ import annotations

import io

import altair as alt
import numpy as np
import pandas as pd
from PIL import Image

from domain.render.pictures import chart_png
from tests.support.app_server import ARTIFACTS


def _saturated_pixels(png: bytes) -> int:
    """Pixels whose colour is far from grey (text and axes are grey, the palette's points are few)."""
    hsv = np.asarray(Image.open(io.BytesIO(png)).convert("HSV"))
    return int(((hsv[..., 1] > 120) & (hsv[..., 2] > 120)).sum())


def _title_png(title: str) -> bytes:
    chart = alt.Chart(pd.DataFrame({"x": [0]})).mark_text().encode(x="x:Q").properties(
        title=title, width=40, height=20)
    return chart_png(chart, [], scale=2)


def test_emoji_in_a_picture_are_drawn_in_colour() -> None:
    with_emoji = _title_png("run 🚀🔥✅ qwen3")
    without = _title_png("run qwen3")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "emoji-picture.png").write_bytes(with_emoji)
    # Three colour emoji at 2× are hundreds of saturated pixels; the plain title has none.
    assert _saturated_pixels(without) < 20
    assert _saturated_pixels(with_emoji) > 300, _saturated_pixels(with_emoji)
