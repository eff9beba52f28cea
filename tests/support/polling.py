"""Waiting in a test for what another thread or process does next."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], seconds: float = 10) -> bool:
    """Poll ``condition`` every 10 ms for at most ``seconds``; its last answer."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()
