"""A page of the app opened in AppTest, as a link opens it: the frame (app.py) first with
the link's query, then the page."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT


def open_page(name: str, **query: str) -> AppTest:
    """``pages/NAME.py`` run once with ``query`` in the URL; fails on an exception shown."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(f"pages/{name}.py").run()
    assert not at.exception, at.exception
    return at
