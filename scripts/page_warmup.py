"""Start a linked page's analysis when its page's HTML is asked for.

A fresh tab spends 0.7-1.0 s loading Streamlit's scripts and opening its websocket before
the page's script runs (``python -m bench pages_browser``).  For a link that names a
comparison (``/compare?baseline=1&runs=2,3``, the checklist likewise) or a run
(``/run?run=N``: the picture of its points; a finished run's "Why not N×?"), the server
knows from the HTML request alone what the script will compute first.  :class:`WarmOnPageRequest`
starts that in a background thread through the page's own cached functions
(``pages/parts/selection.py`` ``warm_comparison``, with the compare page's first tables
``pages/parts/compare_tables.py`` ``warm_compare``; ``pages/parts/run_gaps.py``
``warm_run``), so the script's first run finds it done or waits for it: Streamlit holds a
second caller of a key being computed until the first has stored it, so nothing is
computed twice and nothing stale is shown (a comparison is keyed by its points; a run's
split by its succeeded attempt, whose points no longer change).

Only where reaching the server already means being let in: local mode (loopback), or proxy
mode for a request from a trusted proxy (which authenticated the user).  With OIDC the HTML
is served before sign-in, so nothing is started.  One warm-up at a time: a request that
comes while one runs starts none, and its page computes its own, as without this.  A link
warmed in the last ``WARM_AGAIN_AFTER_S`` is not warmed again (its analysis is cached; a
reload would pay the points' read and the key's hashing, 0.15 s of a core here, for
nothing, while the browser needs the cores): should points have landed since, the page
computes the new analysis itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import parse_qs

from domain.core.access import is_trusted_proxy
from scripts.index_page import ASGIApp, Receive, Scope, Send, add_innermost, base_url_path, page_part

Query = Mapping[str, list[str]]
Warmer = Callable[[Query], None]
_LOG = logging.getLogger("benchdeck.page_warmup")
WARM_AGAIN_AFTER_S = 30.0


class WarmOnPageRequest:
    """ASGI middleware: a GET of a page in ``warmers`` starts its warmer with the query."""

    def __init__(self, app: ASGIApp, warmers: Mapping[str, Warmer], base_url_path: Callable[[], str],
                 allowed: Callable[[str | None], bool]) -> None:
        self.app = app
        self.warmers = warmers
        self.base_url_path = base_url_path
        self.allowed = allowed
        self._idle = threading.Semaphore(1)
        self._warmed_at: dict[tuple[Warmer, str], float] = {}  # (warmer, query string) → monotonic time

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET":
            warmer = self.warmers.get(page_part(scope.get("path", ""), self.base_url_path()) or "")
            peer = (scope.get("client") or (None,))[0]
            if warmer is not None and self.allowed(peer):
                self.start(warmer, scope.get("query_string", b"").decode("ascii", "replace"))
        await self.app(scope, receive, send)

    def start(self, warmer: Warmer, query: str) -> bool:
        """Run ``warmer`` with the parsed ``query`` in a thread, unless one is running or
        this query was warmed lately; True when started."""
        now = time.monotonic()
        self._warmed_at = {k: at for k, at in self._warmed_at.items() if now - at < WARM_AGAIN_AFTER_S}
        if (warmer, query) in self._warmed_at or not self._idle.acquire(blocking=False):
            return False
        self._warmed_at[(warmer, query)] = now
        threading.Thread(target=self._run, args=(warmer, parse_qs(query)), name="benchdeck-warm", daemon=True).start()
        return True

    def _run(self, warmer: Warmer, query: Query) -> None:
        try:
            warmer(query)
        except Exception:  # the page computes the same itself and shows its own error
            _LOG.debug("warm-up of %s failed", dict(query), exc_info=True)
        finally:
            self._idle.release()


def allowed_peer(auth_mode: str, trusted_proxies: list[str]) -> Callable[[str | None], bool]:
    """Which peers may start a warm-up: any in local mode (the app listens on loopback),
    a trusted proxy in proxy mode, none with OIDC."""
    if auth_mode == "local":
        return lambda peer: True
    if auth_mode == "proxy":
        return lambda peer: is_trusted_proxy(peer or "127.0.0.1", trusted_proxies)
    return lambda peer: False


def warm_comparison(query: Query) -> None:
    """The selection pages' warmer (imported when first used: the pages' modules belong to
    the running server, whose caches they fill)."""
    from pages.parts.selection import warm_comparison as warm

    warm(query)


def warm_run(query: Query) -> None:
    """The run page's warmer: the picture of a run's points and a succeeded run's "Why not
    N×?" (pages/parts/run_gaps.py)."""
    from pages.parts.run_gaps import warm_run as warm

    warm(query)


def warm_compare(query: Query) -> None:
    """The compare page's warmer: the analysis, then its first screen's tables
    (pages/parts/compare_tables.py)."""
    from pages.parts.compare_tables import warm_compare as warm

    warm(query)


WARMERS: dict[str, Warmer] = {"/compare": warm_compare, "/checklist": warm_comparison, "/run": warm_run}


def install(auth_mode: str, trusted_proxies: list[str]) -> None:
    """Add :class:`WarmOnPageRequest` for the pages in :data:`WARMERS` to Streamlit's server."""
    from starlette.middleware import Middleware

    add_innermost(Middleware(WarmOnPageRequest, warmers=WARMERS, base_url_path=base_url_path,
                             allowed=allowed_peer(auth_mode, trusted_proxies)))
