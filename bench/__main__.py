"""Run every benchmark and print its figures.  ``python -m bench [NAME ...]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import (
    client_start,
    compare_fresh,
    compare_queries,
    compare_samples,
    curve_knee,
    db_lock,
    estimate_accuracy,
    interval_coverage,
    pages_browser,
    prompt_duplicates,
    ray_dispatch,
    runner_gaps,
    tuner,
    watch_history,
)

BENCHMARKS: dict[str, Callable[..., None]] = {
    "db_lock": db_lock.run,
    "runner_gaps": runner_gaps.run,
    "compare_queries": compare_queries.run,
    "compare_samples": compare_samples.run,
    "compare_fresh": compare_fresh.run,
    "ray_dispatch": ray_dispatch.run,
    "prompt_duplicates": prompt_duplicates.run,
    "curve_knee": curve_knee.run,
    "estimate_accuracy": estimate_accuracy.run,
    "interval_coverage": interval_coverage.run,
    "pages_browser": pages_browser.run,
    "tuner": tuner.run,
    "watch_history": watch_history.run,
    "client_start": client_start.run,
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast look (not for quoting)")
    args = parser.parse_args()
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    for name in args.names or list(BENCHMARKS):
        print(f"== {name}", flush=True)
        BENCHMARKS[name](quick=args.quick)
    return 0


sys.exit(main())
