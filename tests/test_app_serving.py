"""How the app is served (scripts/serve_app.py, index_page.py, page_warmup.py, and
.streamlit/config.toml): each page's HTML names the server's root for Streamlit's script
(tests/test_browser_app.py: a deep link's first visit asks nothing of another origin nor
under the page), a linked comparison is started while the browser loads
(tests/test_pages_apptest.py: the pages then use it), and magic is off without any page
noticing."""

from __future__ import annotations

import ast
import os
import threading
import time
import tomllib
from collections.abc import Mapping
from typing import Any

import pytest

from scripts.index_page import ServerBaseInHtml, base_script, page_part, with_base_script
from scripts.page_warmup import WarmOnPageRequest, allowed_peer
from tests.conftest import ROOT

PAGE = b"<!DOCTYPE html><html><head><title>t</title></head><body></body></html>"


@pytest.mark.parametrize(("path", "base", "part"), [
    ("/", "", "/"),
    ("/compare", "", "/compare"),
    ("/queue_plan", "", "/queue_plan"),
    ("/bd/compare", "bd", "/compare"),
    ("/bd", "/bd/", "/"),
    ("/static/js/index.js", "", None),  # not a page
    ("/favicon.png", "", None),
    ("/a/b", "", None),
    ("/compare", "bd", None),  # outside the base path
    ("/<script>", "", None),
])
def test_only_a_plain_page_path_has_a_page_part(path: str, base: str, part: str | None) -> None:
    assert page_part(path, base) == part


def test_the_script_goes_first_in_the_head_and_nowhere_without_one() -> None:
    assert with_base_script(PAGE, "/compare") == PAGE.replace(b"<head>", b"<head>" + base_script("/compare"))
    assert with_base_script(b"<html><body></body></html>", "/x") == b"<html><body></body></html>"


def _client(files: dict[str, tuple[int, str, bytes]]) -> Any:
    """A Starlette app answering ``files`` (path → status, type, body), behind the middleware."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def serve(request: Request) -> Response:
        status, kind, body = files[request.url.path]
        return Response(body, status_code=status, media_type=kind, headers={"etag": '"file"'})

    app = Starlette(routes=[Route(p, serve, methods=["GET", "HEAD"]) for p in files],
                    middleware=[Middleware(ServerBaseInHtml, base_url_path=lambda: "")])
    return TestClient(app)


def test_the_middleware_rewrites_html_pages_only() -> None:
    client = _client({"/compare": (200, "text/html", PAGE), "/x.js": (200, "application/javascript", b"<head>"),
                      "/gone": (404, "text/html", PAGE)})
    page = client.get("/compare?baseline=1")
    assert page.content == with_base_script(PAGE, "/compare")
    assert int(page.headers["content-length"]) == len(page.content)
    assert "etag" not in page.headers  # the file's validator no longer describes what was sent
    assert client.get("/x.js").content == b"<head>"
    assert client.get("/gone").content == PAGE
    assert client.head("/compare").headers["etag"] == '"file"'


@pytest.mark.browser
@pytest.mark.parametrize(("address", "part", "expected"), [
    ("http://bench.test/compare", "/compare", "http://bench.test"),
    ("http://bench.test/compare/?baseline=1", "/compare", "http://bench.test"),
    ("http://bench.test/team/benchdeck/compare", "/compare", "http://bench.test/team/benchdeck"),
    ("http://bench.test/", "/", "http://bench.test"),
    # The browser's address does not end with what the server saw (a proxy rewrote it):
    # nothing is set, and Streamlit probes for its server as it does without the script.
    ("http://bench.test/team/", "/", None),
    ("http://bench.test/runs", "/compare", None),
])
def test_the_script_finds_the_servers_root_behind_any_prefix(browser_page, address: str, part: str,
                                                              expected: str | None) -> None:
    page = browser_page
    page.route("**/*", lambda route: route.fulfill(body=with_base_script(PAGE, part), content_type="text/html"))
    page.goto(address)
    assert page.evaluate("window.__streamlit ? window.__streamlit.BACKEND_BASE_URL : null") == expected


def test_no_page_relies_on_magic() -> None:
    """.streamlit/config.toml turns magic off: no page has an expression statement magic
    would have written to the page (anything but a call, a docstring, ``await``, ``yield``)."""
    assert tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))["runner"][
        "magicEnabled"] is False
    shown = []
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            body = getattr(node, "body", None)
            for i, stmt in enumerate(body if isinstance(body, list) else []):
                if isinstance(stmt, ast.Expr) and not _never_magic(stmt.value, first=i == 0):
                    shown.append(f"{path.relative_to(ROOT)}:{stmt.lineno}")
    assert shown == []


def _never_magic(value: ast.expr, *, first: bool) -> bool:
    docstring = first and isinstance(value, ast.Constant) and isinstance(value.value, str)
    return docstring or isinstance(value, ast.Call | ast.Await | ast.Yield | ast.YieldFrom)



def _warming_client(allowed: bool = True) -> tuple[Any, list[dict[str, list[str]]], threading.Event]:
    """A Starlette app behind WarmOnPageRequest whose one warmer records its query and then
    waits for the returned event (so a test can hold it running)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    started: list[dict[str, list[str]]] = []
    release = threading.Event()

    def warmer(query: Mapping[str, list[str]]) -> None:
        started.append(dict(query))
        release.wait(10)

    async def page(request: object) -> PlainTextResponse:
        return PlainTextResponse("page")

    app = Starlette(routes=[Route("/compare", page), Route("/runs", page)],
                    middleware=[Middleware(WarmOnPageRequest, warmers={"/compare": warmer},
                                           base_url_path=lambda: "", allowed=lambda peer: allowed)])
    return TestClient(app), started, release


def _settles(started: list[Any], count: int) -> bool:
    deadline = time.monotonic() + 10
    while len(started) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(started) == count


def test_a_page_request_starts_its_warmer_once_at_a_time() -> None:
    client, started, release = _warming_client()
    assert client.get("/compare?baseline=1&runs=2%2C3&intended=flag%3Atp-size").text == "page"
    assert _settles(started, 1)
    assert started == [{"baseline": ["1"], "runs": ["2,3"], "intended": ["flag:tp-size"]}]
    client.get("/compare?baseline=4&runs=5")  # while the first runs: none started, the page still served
    client.get("/runs?baseline=1&runs=2")  # a page without a warmer
    release.set()
    time.sleep(0.2)
    assert started == [{"baseline": ["1"], "runs": ["2,3"], "intended": ["flag:tp-size"]}]
    client.get("/compare?baseline=6&runs=7")
    assert _settles(started, 2) and started[-1] == {"baseline": ["6"], "runs": ["7"]}


def test_a_link_warmed_lately_is_not_warmed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from scripts import page_warmup

    client, started, release = _warming_client()
    release.set()
    client.get("/compare?baseline=1&runs=2")
    assert _settles(started, 1)
    time.sleep(0.1)  # the first warm-up has ended
    client.get("/compare?baseline=1&runs=2")  # a reload: its analysis is cached
    client.get("/compare?baseline=1&runs=3")  # another link
    assert _settles(started, 2) and started[-1] == {"baseline": ["1"], "runs": ["3"]}
    time.sleep(0.1)
    monkeypatch.setattr(page_warmup, "WARM_AGAIN_AFTER_S", 0.0)  # later: warmed again
    client.get("/compare?baseline=1&runs=2")
    assert _settles(started, 3) and started[-1] == {"baseline": ["1"], "runs": ["2"]}


def test_a_peer_not_let_in_starts_nothing() -> None:
    client, started, release = _warming_client(allowed=False)
    release.set()
    assert client.get("/compare?baseline=1&runs=2").text == "page"
    time.sleep(0.2)
    assert started == []


@pytest.mark.parametrize(("mode", "peer", "allowed"), [
    ("local", "127.0.0.1", True),
    ("proxy", "10.0.0.5", True),
    ("proxy", "10.0.0.9", False),
    ("oidc", "127.0.0.1", False),
])
def test_who_may_start_a_warm_up(mode: str, peer: str, allowed: bool) -> None:
    assert allowed_peer(mode, ["10.0.0.5"])(peer) is allowed


def test_the_server_opens_the_store_and_imports_the_parts_before_the_first_visit(tmp_path) -> None:
    """Started as ``make run`` starts it, with no page visited: by the time the server says
    its warm-up is done, the database exists with every migration applied (the first page
    no longer checks the schema on its path), and its output carries no warning (the
    warm-up's thread has no session, and Streamlit would say so)."""
    import duckdb

    from bench.pages_browser import _await_warm_up
    from db.migrations import MIGRATIONS
    from tests.support.app_server import free_port, running_app

    db, port = tmp_path / "bd.duckdb", free_port()
    env = {**os.environ, "BENCHDECK_DB": str(db), "BENCHDECK_WORK_DIR": str(tmp_path / "runs"),
           "BENCHDECK_AUTH_MODE": "local", "PYTHONPATH": str(ROOT)}
    log = tmp_path / f"streamlit-{port}.log"
    with running_app(env, timeout_s=120, port=port):
        _await_warm_up(log, timeout_s=120)
    with duckdb.connect(str(db), read_only=True) as con:
        applied = {row[0] for row in con.execute("SELECT number FROM schema_migrations").fetchall()}
    assert applied == {m.number for m in MIGRATIONS}
    output = log.read_text(encoding="utf-8")
    assert "missing ScriptRunContext" not in output
    assert "Traceback" not in output
