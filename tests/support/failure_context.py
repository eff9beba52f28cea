"""What a failed browser test leaves for its report: the page's address and visible text,
and the tail of each app log the test wrote (``running_app`` keeps them beside the work dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PAGE_TEXT_CHARS = 3000
LOG_TAIL_CHARS = 3000


def failure_context(item: pytest.Item) -> Iterator[tuple[str, str]]:
    """(title, text) sections: the browser page's state and the app logs' tails."""
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    page = funcargs.get("browser_page")
    if page is not None:
        yield "page at failure", _page_state(page)
    tmp_path = funcargs.get("tmp_path")
    if isinstance(tmp_path, Path):
        for log in sorted(tmp_path.glob("streamlit-*.log")):
            yield f"tail of {log.name}", log.read_text(errors="replace")[-LOG_TAIL_CHARS:]


def _page_state(page: Any) -> str:
    try:
        text = page.evaluate("document.body ? document.body.innerText : ''")
    except Exception as exc:  # the page or its browser may be gone: say so instead
        return f"(the page could not be read: {exc})"
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return f"{page.url}\n" + " / ".join(lines)[-PAGE_TEXT_CHARS:]
