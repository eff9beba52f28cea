"""Keeps one real bench_serving client warm for a whole sweep.

Run with the SGLang interpreter (``<sglang python> runner/sglang_side/bench_driver.py``), never with
the app's: it imports sglang, and nothing of benchdeck (it must run in SGLang's own
environment).  One start of the 0.5.23 client costs about 8.6 s, mostly imports; a sweep
that started it per point would idle that long between points.  So this process imports
the client once, captures its own argument parser, and then runs one benchmark per
request read from stdin — the same ``run_benchmark(args)`` that ``python -m
sglang.benchmark.serving`` calls, with argv parsed by the client's own parser.

Protocol (JSON lines).  In, on stdin: ``{"id": str, "argv": [...]}``.  Out, on the
original stdout (everything the client prints goes to stderr instead):
``{"event": "ready", "module", "version", "flags": [the client's option strings]}``, then per request
``warmup_start``, ``flush_start`` and ``measure_start`` events (``{"event", "id", "t"}``,
t = wall clock) as the point moves through its phases, and ``{"event": "done", "id", "ok",
"error", "t"}``.
Exit code 3 with ``{"event": "unsupported", "error"}`` means this client version cannot
be driven in-process; the runner then falls back to one process per point.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")
EXIT_UNSUPPORTED = 3


class _ParserCaptured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser captured")
        self.parser = parser


def _capture_parser(cli_main: Any) -> argparse.ArgumentParser:
    """Run the client's own CLI set-up up to ``parse_args`` and keep its parser."""
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _ParserCaptured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        cli_main()
    except _ParserCaptured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    raise RuntimeError("the client's cli_main never parsed arguments")


def _load_client() -> tuple[Any, argparse.ArgumentParser]:
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "run_benchmark") and hasattr(module, "cli_main"):
            return module, _capture_parser(module.cli_main)
    raise RuntimeError(f"no in-process entry point (run_benchmark + cli_main) in {MODULES}")


def _emit(channel: Any, **message: Any) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _hook_phases(module: Any, channel: Any, current: dict[str, str]) -> None:
    """Mark the phases of a point: ``warmup_start`` when the client's ``benchmark()``
    coroutine begins (dataset and tokenizer are ready), ``flush_start`` when the warmup is
    over, and ``measure_start`` once the cache is flushed.  Telemetry before
    ``measure_start`` is warmup; the idle-gap benchmark subtracts the warmup phase."""
    flush = getattr(module, "flush_server_cache", None)
    bench = getattr(module, "benchmark", None)
    if flush is not None:
        def flush_then_mark(*args: Any, **kwargs: Any) -> Any:
            _emit(channel, event="flush_start", id=current.get("id"), t=time.time())
            result = flush(*args, **kwargs)
            _emit(channel, event="measure_start", id=current.get("id"), t=time.time())
            return result

        module.flush_server_cache = flush_then_mark
    if bench is not None:
        async def mark_then_benchmark(*args: Any, **kwargs: Any) -> Any:
            _emit(channel, event="warmup_start", id=current.get("id"), t=time.time())
            return await bench(*args, **kwargs)

        module.benchmark = mark_then_benchmark


def _run_one(module: Any, parser: argparse.ArgumentParser, argv: list[str]) -> None:
    args = parser.parse_args(argv)
    validate = getattr(module, "_validate_parsed_gsp_args", None)
    if validate is not None:
        validate(parser, args)
    module.run_benchmark(args)


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the client's own prints go to the log, not the protocol channel
    sys.stdout = sys.stderr
    try:
        module, parser = _load_client()
    except Exception as exc:
        _emit(channel, event="unsupported", error=f"{type(exc).__name__}: {exc}")
        return EXIT_UNSUPPORTED
    version = getattr(importlib.import_module("sglang"), "__version__", None)
    current: dict[str, str] = {}
    _hook_phases(module, channel, current)
    flags = sorted(option for action in parser._actions for option in action.option_strings)
    _emit(channel, event="ready", module=module.__name__, version=version, flags=flags)
    for line in sys.stdin:
        request = json.loads(line)
        current["id"] = request["id"]
        try:
            _run_one(module, parser, request["argv"])
        except BaseException as exc:  # SystemExit from parser.error too: report, keep serving
            traceback.print_exc()
            _emit(channel, event="done", id=request["id"], ok=False, error=f"{type(exc).__name__}: {exc}",
                  t=time.time())
        else:
            _emit(channel, event="done", id=request["id"], ok=True, error=None, t=time.time())
    return 0


if __name__ == "__main__":
    sys.exit(main())
