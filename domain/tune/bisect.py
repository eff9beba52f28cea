""""How much load does one configuration hold?": bisection on concurrency under an SLA.

The measured quantity is the highest concurrency whose p99 latencies meet the SLA.  Each
probe measures one concurrency and returns its SLA margin (``score.concurrency_margins``:
the worst over the scenarios of (limit − measured) / limit, > 0 passes).  The probes
follow ``score.next_concurrency`` (the lowest, the highest, then halves of the gap
between the last passing and the first failing concurrency) until the gap is at most
``resolution``; the answer is ``score.max_concurrency_under_sla`` over every margin
measured: the crossing of their monotone fit, interpolated between the last passing and
the first failing concurrency.  Who measures a probe is the caller's business (the
runner queues a run; bench/tuner.py's tests ask the estimator).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from domain.tune.score import max_concurrency_under_sla, next_concurrency

MAX_PROBES = 32  # 2^32 concurrencies: more than any plan allows; a guard against a probe that repeats


@dataclass(frozen=True)
class Bisection:
    """Where the search ended: ``max_concurrency`` None when the lowest concurrency already
    fails; ``margins`` every probe in the order measured."""

    low: int
    high: int
    resolution: int
    margins: tuple[tuple[int, float], ...]
    max_concurrency: float | None

    @property
    def passed(self) -> list[int]:
        return sorted(c for c, m in self.margins if m > 0)

    @property
    def failed(self) -> list[int]:
        return sorted(c for c, m in self.margins if not m > 0)

    @property
    def at_least(self) -> bool:
        """The highest concurrency of the range passed: the configuration holds at least
        ``high``, and the answer is the range's end, not a boundary found."""
        return bool(self.margins) and not self.failed


def bisect_max_concurrency(probe: Callable[[int], float], low: int, high: int, *,
                           resolution: int = 1) -> Bisection:
    """Probe concurrencies in [``low``, ``high``] until the SLA boundary is found to
    ``resolution``; a probe that returns NaN (nothing measured) counts as failing."""
    if not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got low={low}, high={high}")
    if resolution < 1:
        raise ValueError(f"resolution must be at least 1, got {resolution}")
    margins: dict[int, float] = {}
    for _ in range(MAX_PROBES):
        concurrency = next_concurrency({c: m > 0 for c, m in margins.items()}, low, high, resolution=resolution)
        if concurrency is None:
            break
        margin = probe(concurrency)
        margins[concurrency] = -math.inf if math.isnan(margin) else margin
    measured = tuple(margins.items())
    return Bisection(low, high, resolution, measured, max_concurrency_under_sla(measured))
