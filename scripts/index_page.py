"""Tell Streamlit's page where its server is, so a deep link does not probe for it first.

Streamlit serves the same ``index.html`` for every page URL.  Opened at ``/compare``, its
script does not know whether the server's root is ``/compare`` or ``/``, so it asks
``/compare/_stcore/health`` first, gets a 404, waits, then asks ``/_stcore/health``:
0.15-0.25 s before the websocket opens, on every fresh-tab visit of a page other than the
first (``python -m bench pages_browser``).  The page skips that probe when
``window.__streamlit.BACKEND_BASE_URL`` is set before its script runs (Streamlit's own
embedding hook).

:class:`ServerBaseInHtml` adds, to each page's HTML, a small script that sets it: the
request path the server saw, less Streamlit's ``server.baseUrlPath``, is the page's part of
the address; the browser's address less that part is the server's root, however a proxy in
between prefixed the path.  Where the two do not end alike (a proxy that rewrote the page
part), or the path is not a plain page name, nothing is added and Streamlit probes as
before: the script can only save a round trip, never point the page elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# st.navigation's url paths are one segment of letters, digits, '-' and '_' ("" for the default page).
_PAGE_PART = re.compile(r"/[A-Za-z0-9_-]*")
_HEAD = b"<head>"
# Validators of the file on disk: the page sent is not that file any more, so the browser
# must not revalidate it against them (the HTML is a few kB and never cached long anyway).
_DROPPED_HEADERS = frozenset({b"content-length", b"etag", b"last-modified"})


def page_part(path: str, base_url_path: str) -> str | None:
    """The page's part of a request path (``/compare``, ``/`` for the root) under
    Streamlit's ``server.baseUrlPath``; None where it is not one plain page name."""
    prefix = "/" + base_url_path.strip("/") if base_url_path.strip("/") else ""
    if not path.startswith(prefix):
        return None
    part = path[len(prefix):] or "/"
    return part if _PAGE_PART.fullmatch(part) else None


def base_script(part: str) -> bytes:
    """The script that sets ``window.__streamlit.BACKEND_BASE_URL`` from the browser's address
    when it ends with ``part`` (a plain page name: nothing in it needs escaping beyond JSON)."""
    return (
        "<script>(function(){var part=" + json.dumps(part) + ","
        "p=location.pathname.replace(/\\/+$/,'')||'/';"
        "if(p.slice(-part.length)===part){"
        "window.__streamlit={BACKEND_BASE_URL:location.origin+p.slice(0,p.length-part.length)};"
        "}})();</script>"
    ).encode("ascii")


def with_base_script(html: bytes, part: str) -> bytes:
    """``html`` with :func:`base_script` first in its head (unchanged without a ``<head>``)."""
    at = html.find(_HEAD)
    if at < 0:
        return html
    at += len(_HEAD)
    return html[:at] + base_script(part) + html[at:]


class ServerBaseInHtml:
    """ASGI middleware: each page's HTML (a 200 ``text/html`` answer to a GET of a plain
    page path) gets :func:`base_script`; every other request passes untouched."""

    def __init__(self, app: ASGIApp, base_url_path: Callable[[], str]) -> None:
        self.app = app
        self.base_url_path = base_url_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        part = (page_part(scope.get("path", ""), self.base_url_path())
                if scope["type"] == "http" and scope.get("method") == "GET" else None)
        if part is None:
            await self.app(scope, receive, send)
            return
        # The body must come through send() to be rewritten: no zero-copy file send.
        extensions = {k: v for k, v in (scope.get("extensions") or {}).items() if k != "http.response.pathsend"}
        await self.app({**scope, "extensions": extensions}, receive, _Rewriting(send, part).send)


class _Rewriting:
    """The ``send`` of one response: holds an HTML page's start and body until the body is
    complete, then sends them with the script in; passes anything else through."""

    def __init__(self, send: Send, part: str) -> None:
        self._send = send
        self._part = part
        self._start: Message | None = None
        self._body: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and _is_html_page(message):
            self._start = message
            return
        if message["type"] != "http.response.body" or self._start is None:
            await self._send(message)
            return
        self._body.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = with_base_script(b"".join(self._body), self._part)
        headers = [(k, v) for k, v in self._start.get("headers", []) if k.lower() not in _DROPPED_HEADERS]
        await self._send({**self._start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await self._send({"type": "http.response.body", "body": body})


def _is_html_page(start: Message) -> bool:
    if start.get("status") != 200:
        return False
    types = [v for k, v in start.get("headers", []) if k.lower() == b"content-type"]
    return bool(types) and types[0].split(b";")[0].strip().lower() == b"text/html"


def base_url_path() -> str:
    """Streamlit's ``server.baseUrlPath``, read per request (its config may be reloaded)."""
    from streamlit import config

    return str(config.get_option("server.baseUrlPath") or "")


def add_innermost(middleware: Any) -> None:
    """Add a ``starlette.middleware.Middleware`` innermost to those Streamlit builds for its
    server: after its gzip, so a page's HTML is still plain when the middleware sees it."""
    from streamlit.web.server.starlette import starlette_app

    streamlit_middleware = starlette_app.create_streamlit_middleware
    starlette_app.create_streamlit_middleware = lambda: [*streamlit_middleware(), middleware]


def install() -> None:
    """Add :class:`ServerBaseInHtml` to Streamlit's server."""
    from starlette.middleware import Middleware

    add_innermost(Middleware(ServerBaseInHtml, base_url_path=base_url_path))
