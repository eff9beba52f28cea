"""Start the real app (``streamlit run app.py``) on a free loopback port, and a browser.

Browser tests use Debian's chromium through Playwright's Python package: Playwright
cannot download its own browser here.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update",
]
ARTIFACTS = ROOT / "test-artifacts"
# Playwright's 30 s default for actions: a page's first, cold render (every import of the
# app's first script run) took 8 s on an idle 2-core machine and past 30 s in CI beside
# the other worker's end-to-end runs.  Pages and contexts made by the tests wait this long.
ACTION_TIMEOUT_MS = 90_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_app(
    env: dict[str, str], *, timeout_s: float = 60, port: int | None = None, extra_args: Sequence[str] = (),
    command: Sequence[str] = (sys.executable, "scripts/serve_app.py"),
) -> Iterator[str]:
    """The app (or ``command``, a ``streamlit run`` of another script taking the same
    options) on ``port``, its output in ``streamlit-<port>.log`` beside the work dir."""
    port = port or free_port()
    log = open(Path(env["BENCHDECK_WORK_DIR"]).parent / f"streamlit-{port}.log", "w")
    proc = subprocess.Popen(
        [*command, "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", *extra_args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, timeout_s)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            if requests.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError("streamlit did not become healthy")


def screenshot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def grid_text(grid: Any) -> str:
    """The text of a data grid (its accessible table, as screen readers see it)."""
    grid.scroll_into_view_if_needed()
    return " ".join(grid.locator("th, td").all_inner_texts())


def grid_with(page: Any, needle: str) -> str:
    """The text of the first data grid on the page that shows ``needle``."""
    grids = page.get_by_test_id("stDataFrame")
    for index in range(grids.count()):
        text = grid_text(grids.nth(index))
        if needle in text:
            return text
    raise AssertionError(f"no table shows {needle!r}")


def full_screenshot(page: Any, name: str) -> Path:
    """The whole page: Streamlit scrolls inside its own container, so the viewport is made as
    tall as the content first."""
    height = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(int(height) + 100, 16_000)})
    page.wait_for_timeout(1500)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# The build page's own "Queued run #N." line, not the toast that repeats it with a link
# ("Queued run #N: open run #N."): both are on the page while the toast lasts.
QUEUED_LINE = re.compile(r"^Queued run #(\d+)\.$")


def queued_line(page: Any, run_id: int | None = None) -> Any:
    """The page's own line for ``run_id`` (any run when None); see ``QUEUED_LINE``."""
    if run_id is None:
        return page.get_by_text(QUEUED_LINE)
    return page.get_by_text(re.compile(rf"^Queued run #{run_id}\.$"))
