"""How often a point's 95 % intervals cover the true value when its requests are correlated
as under a closed loop: synthetic points whose TTFT and TPOT are AR(1) series in log space
(lag-1 correlation ρ, in completion order), for ρ ∈ {0, 0.3, 0.6} and n ∈ {100, 240, 1000}
requests, 400 points each.  For the median and p90 TTFT and the median TPOT it prints the
coverage of the intervals benchdeck keeps (``requests.bootstrap_intervals``) and, beside
it, that of the i.i.d. percentile bootstrap over requests (each request resampled as if
independent: 1,000 resamples).  ``python -m bench interval_coverage`` (``--quick``: 100 points
a cell).  Below the table it says what chance alone does to a cell at that many points
(the binomial spread of a coverage of exactly 95 %), so a cell a point outside 93–97 % is
read against it.  tests/test_intervals.py runs a smaller table."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd

from domain.results import requests as req

RHOS = (0.0, 0.3, 0.6)
SIZES = (100, 240, 1000)
STATISTICS = ("ttft_p50", "ttft_p90", "tpot_p50")
# Log-normal marginals: TTFT median 200 ms, TPOT median 20 ms, log-sd 0.5 and 0.3.
_MEDIAN = {"ttft": 200.0, "tpot": 20.0}
_LOG_SD = {"ttft": 0.5, "tpot": 0.3}
OUTPUT_TOKENS = 128
CONFIDENCE = req.CONFIDENCE


def true_value(name: str) -> float:
    """The statistic of the process the points are drawn from."""
    from scipy import special

    latency, _, stat = name.rpartition("_")
    return _MEDIAN[latency] * math.exp(_LOG_SD[latency] * float(special.ndtri(req.QUANTILES[stat] / 100.0)))


def ar1(rng: np.random.Generator, n: int, rho: float, size: int = 1) -> np.ndarray:
    """``size`` stationary AR(1) series of unit variance: (size × n)."""
    shocks = rng.standard_normal((size, n)) * math.sqrt(1.0 - rho * rho)
    series = np.empty((size, n))
    series[:, 0] = rng.standard_normal(size)
    for i in range(1, n):
        series[:, i] = rho * series[:, i - 1] + shocks[:, i]
    return series


def closed_loop_points(rng: np.random.Generator, n: int, rho: float, count: int = 1,
                       scale: float = 1.0) -> list[pd.DataFrame]:
    """``count`` points' requests as the runner writes them (``requests.REQUEST_COLUMNS``),
    TTFT and TPOT log-AR(1) with correlation ``rho``, ``scale`` times the process's
    latencies; one request completes after the other (completion order = row order)."""
    ttft = scale * _MEDIAN["ttft"] * np.exp(_LOG_SD["ttft"] * ar1(rng, n, rho, count))
    tpot = scale * _MEDIAN["tpot"] * np.exp(_LOG_SD["tpot"] * ar1(rng, n, rho, count))
    return [_point(ttft[i], tpot[i]) for i in range(count)]


def _point(ttft: np.ndarray, tpot: np.ndarray) -> pd.DataFrame:
    n = ttft.size
    e2e = ttft + tpot * (OUTPUT_TOKENS - 1)
    return pd.DataFrame({
        "request_idx": np.arange(n), "success": True, "input_len": 512, "output_len": OUTPUT_TOKENS,
        "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "itl_ms": [None] * n,
        "start_s": np.arange(n) * 100.0,  # each ends before the next ends: completion order is row order
    })


def coverage_cell(n: int, rho: float, draws: int, seed: int) -> dict[str, tuple[float, float]]:
    """Per statistic: (benchdeck's coverage, the i.i.d. bootstrap's) in %, over ``draws`` points."""
    rng = np.random.default_rng(seed)
    hits = {name: [0, 0] for name in STATISTICS}
    truth = {name: true_value(name) for name in STATISTICS}
    for point in closed_loop_points(rng, n, rho, draws):
        kept = req.bootstrap_intervals(point, names=STATISTICS)
        naive = req.iid_bootstrap(point, names=STATISTICS, seed=int(rng.integers(2**31)))
        for name in STATISTICS:
            hits[name][0] += kept[name].low <= truth[name] <= kept[name].high
            hits[name][1] += naive[name].low <= truth[name] <= naive[name].high
    return {name: (100.0 * a / draws, 100.0 * b / draws) for name, (a, b) in hits.items()}


def coverage_table(draws: int, sizes: Sequence[int] = SIZES, rhos: Sequence[float] = RHOS, seed: int = 41,
                   workers: int = 1) -> list[tuple[int, float, dict[str, tuple[float, float]]]]:
    """Every (n, ρ) cell; each has its own seed, so a cell's figures do not depend on the others."""
    cells = [(n, rho, draws, seed + 1000 * i + j) for i, n in enumerate(sizes) for j, rho in enumerate(rhos)]
    if workers <= 1:
        return [(n, rho, coverage_cell(n, rho, d, s)) for n, rho, d, s in cells]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(coverage_cell, *zip(*cells, strict=True)))
    return [(n, rho, result) for (n, rho, _d, _s), result in zip(cells, results, strict=True)]


def table_text(rows: list[tuple[int, float, dict[str, tuple[float, float]]]], draws: int) -> str:
    head = "     n   rho  " + "  ".join(f"{name:>18}" for name in STATISTICS)
    lines = [f"95% interval coverage over {draws} synthetic points per cell (benchdeck / i.i.d. bootstrap), %",
             head]
    for n, rho, cell in rows:
        lines.append(f"{n:6d}  {rho:4.1f}  " + "  ".join(f"{cell[s][0]:8.1f} / {cell[s][1]:6.1f} " for s in STATISTICS))
    return "\n".join(lines)


def chance_note(draws: int, cells: int, band: tuple[float, float] = (93.0, 97.0)) -> str:
    """What chance alone does to a cell: the Monte-Carlo standard error of a coverage of
    exactly 95 % over ``draws`` points, and how many of ``cells`` such cells fall outside
    ``band`` (binomial), so a miss by a point or two reads against it."""
    from scipy import stats

    inside = stats.binom.cdf(math.floor(band[1] * draws / 100.0 + 1e-9), draws, CONFIDENCE) - stats.binom.cdf(
        math.ceil(band[0] * draws / 100.0 - 1e-9) - 1, draws, CONFIDENCE)
    error = 100.0 * math.sqrt(CONFIDENCE * (1.0 - CONFIDENCE) / draws)
    return (f"  chance alone: a coverage of exactly 95 % reads 95 ± {error:.1f} (1 s.e.) over {draws} points; "
            f"{100.0 * (1.0 - inside):.1f} % of such cells fall outside {band[0]:.0f}–{band[1]:.0f} %, "
            f"{cells * (1.0 - inside):.1f} of {cells} expected, "
            f"all {cells} inside {100.0 * inside ** cells:.0f} % of the time")


def run(quick: bool = False) -> None:
    # Half the CPUs: a shared development machine stays usable while it runs.
    report(100 if quick else 400, max(1, (os.cpu_count() or 1) // 2))


def report(draws: int, workers: int) -> None:
    """Print the table over ``draws`` points per cell, the chance line and the time it took."""
    started = time.perf_counter()
    rows = coverage_table(draws, workers=min(len(SIZES) * len(RHOS), workers))
    print(table_text(rows, draws), flush=True)
    print(chance_note(draws, len(rows) * len(STATISTICS)), flush=True)
    print(f"  ({time.perf_counter() - started:.0f} s wall, {os.cpu_count()} CPUs)", flush=True)


def main() -> None:
    """``python -m bench.interval_coverage [--draws N] [--workers N]``: the same table with more
    draws per cell, where a coverage must be read closer than the 400-draw table's chance spread."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.interval_coverage")
    parser.add_argument("--draws", type=int, default=400, help="synthetic points per cell (default 400)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1) // 2), help="processes")
    args = parser.parse_args()
    report(args.draws, args.workers)


if __name__ == "__main__":
    main()
