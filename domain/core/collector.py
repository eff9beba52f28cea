"""The garbage collector around a process's imports.

A process's modules, and the objects its imports make, live as long as the process.  With
the cyclic collector on while they load, each pass rescans what the imports made so far;
once loaded, every full collection scans them all again, a pause of whatever the process
is doing then (an event loop that times requests or paces emulated steps, a script run
that waits to send its last messages).  :func:`paused_then_frozen` keeps the collector off
while a block loads modules, then moves everything made so far out of its reach
(``gc.freeze``); objects made later are collected as usual.

Stdlib only: entry points call it before their heavy imports.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_then_frozen() -> Iterator[None]:
    """The collector off for the block, then on again with everything made so far frozen."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.freeze()
