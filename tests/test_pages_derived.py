"""What the compare page derives from a comparison (pages/parts/selection.py ``derived``) is
built once even when two threads ask at once, as the server's warm-up of a linked page and
the page's first run do: the second waits for the first's value instead of building it
beside it (on two cores, a second build slowed both), and builds its own when the first
failed or was stopped."""

from __future__ import annotations

import threading
import time
from typing import cast

import pytest

from domain.compare.comparison import Comparison
from pages.parts.selection import derived


class _Comparison:
    """Stands in for a comparison: ``derived`` only keys by the instance."""


def _slow_build(calls: list[str], started: threading.Event, value: object) -> object:
    calls.append("built")
    started.set()
    time.sleep(0.3)
    return value


def test_a_second_caller_waits_for_the_value_being_built() -> None:
    c = cast(Comparison, _Comparison())
    calls: list[str] = []
    started = threading.Event()
    value = object()
    first: list[object] = []
    builder = threading.Thread(target=lambda: first.append(derived(c, "k", lambda: _slow_build(calls, started, value))))
    builder.start()
    assert started.wait(5)
    second = derived(c, "k", lambda: calls.append("built again"))
    builder.join(5)
    assert calls == ["built"] and second is value and first == [value]


def test_a_caller_builds_its_own_when_the_first_build_fails() -> None:
    c = cast(Comparison, _Comparison())
    started, release = threading.Event(), threading.Event()

    def failing() -> object:
        started.set()
        release.wait(5)
        raise RuntimeError("stopped")

    errors: list[BaseException] = []

    def first_caller() -> None:
        try:
            derived(c, "k", failing)
        except RuntimeError as exc:
            errors.append(exc)

    builder = threading.Thread(target=first_caller)
    builder.start()
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    assert derived(c, "k", lambda: "mine") == "mine"
    builder.join(5)
    assert [str(e) for e in errors] == ["stopped"]
    assert derived(c, "k", lambda: pytest.fail("built twice")) == "mine"
