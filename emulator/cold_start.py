"""The emulated cold start's options (``--emulate-cold-start-s``, ``--emulate-cold-start-factor``,
or their ``BENCHDECK_EMULATE_*`` variables), taken off the command line before an engine
personality parses its own flags: the SGLang one (emulator/launch.py) and the vLLM one
(emulator/vllm_launch.py) read them the same way.  What they do: emulator/launch.py's
docstring and emulator/step_loop.py ``ColdStart``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from emulator.flags import PROG
from emulator.step_loop import DEFAULT_COLD_FACTOR, ColdStart

COLD_OPTIONS = {"--emulate-cold-start-s": "COLD_START_S", "--emulate-cold-start-factor": "COLD_START_FACTOR"}


def take_option(argv: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` / ``flag=VALUE`` from ``argv``; its value (the last one given)."""
    value, i = None, 0
    while i < len(argv):
        if argv[i] == flag:
            if i + 1 >= len(argv):
                usage_error(f"argument {flag}: expected one argument")
            value = argv[i + 1]
            del argv[i:i + 2]
        elif argv[i].startswith(flag + "="):
            value = argv.pop(i).split("=", 1)[1]
        else:
            i += 1
    return value


def usage_error(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)  # argparse's wording and status
    raise SystemExit(2)


def cold_start_options(argv: Sequence[str]) -> tuple[ColdStart | None, list[str]]:
    """The emulated cold start the command line (or environment) asks for, and the argv left
    for :func:`emulator.flags.parse_flags`.  None when ``--emulate-cold-start-s`` is absent or 0."""
    rest = list(argv)
    raw = {flag: take_option(rest, flag) or os.environ.get("BENCHDECK_EMULATE_" + env) or None
           for flag, env in COLD_OPTIONS.items()}
    try:
        seconds = float(raw["--emulate-cold-start-s"] or 0.0)
        factor = float(raw["--emulate-cold-start-factor"] or DEFAULT_COLD_FACTOR)
        cold = ColdStart(seconds, factor)
    except ValueError as exc:
        usage_error(f"argument --emulate-cold-start-s/--emulate-cold-start-factor: {exc}")
    return (cold if cold.seconds > 0 else None), rest
