"""Run every benchmark and print its figures.  ``python -m bench [NAME ...]``."""

from __future__ import annotations

import argparse
import sys

from bench import db_lock

BENCHMARKS = {
    "db_lock": db_lock.run,
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="benchmarks to run (default: all)")
    args = parser.parse_args()
    for name in args.names or list(BENCHMARKS):
        print(f"== {name}", flush=True)
        BENCHMARKS[name]()
    return 0


sys.exit(main())
