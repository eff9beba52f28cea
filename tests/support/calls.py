"""Counting a function's calls in a test: ``monkeypatch.setattr(owner, "f", counted(owner.f, "f", calls))``
appends ``"f"`` to ``calls`` on each call and returns what the function returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def counted(function: Callable[..., Any], name: str, calls: list[str]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return function(*args, **kwargs)
    return wrapper
