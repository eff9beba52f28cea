"""Arrivals: closed-loop concurrency, or open-loop Poisson rates under a concurrency cap.

bench_serving draws open-loop arrivals itself (``--request-rate``: exponential gaps,
``get_request`` in sglang/benchmark/serving.py) and caps what is in flight with
``--max-concurrency``.  What benchdeck adds is the sweep over rates: one point per rate,
each under the plan's one concurrency cap.  Each rate's point gets a scenario name of its
own (``short.rate4``), so everything keyed by (scenario, concurrency) keeps rates apart,
and a point's ``arrival`` ("closed-loop" or "poisson", a fatal condition of the
comparability key) keeps a rate point from ever being compared with a concurrency point.
"""

from __future__ import annotations

import math

RATE_SEPARATOR = ".rate"


def rate_scenario_name(base: str, rate: float) -> str:
    return f"{base}{RATE_SEPARATOR}{rate:g}"


def rate_sweep_problem(rates: list[float] | None, request_rate: float | str,
                       concurrency: list[int]) -> tuple[str, str] | None:
    """Why a plan's rate sweep cannot run as written (None: it can, or there is none)."""
    if rates is None:
        return None
    if len(set(rates)) != len(rates):
        return ("rates_distinct", "request_rates lists a rate twice")
    if request_rate != "inf":
        return ("rates_and_rate", "a plan sweeps request_rates or sets one request_rate, not both")
    if len(concurrency) != 1:
        return ("rates_one_cap", "a rate sweep runs under one concurrency cap: give concurrency one value")
    return None


def arrival_of(request_rate: object) -> str | None:
    """A point's arrival process from its request rate: inf is closed-loop (every request
    sent at once, held at the concurrency), a finite rate Poisson; None: unknown."""
    if request_rate is None:
        return None
    if isinstance(request_rate, str):
        return "closed-loop" if request_rate.strip().lower() in ("inf", "infinity", "+inf") else None
    if isinstance(request_rate, int | float) and not isinstance(request_rate, bool):
        return "closed-loop" if math.isinf(request_rate) else ("poisson" if request_rate > 0 else None)
    return None
