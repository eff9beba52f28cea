"""The arguments of the commands whose modules are heavy to import (Optuna, SciPy): ``tune``
and ``max-concurrency``.

``runner/cli.py`` registers them with a shim that imports the module only when its command
runs, so every other command (``check``, ``submit``, ``import``, ``status``, ``export``...)
starts without Optuna and SciPy: ``python -m runner --help`` took 4.5 s wall (2.9 s CPU)
with them imported at start-up.  The modules' own entry points (``python -m runner.tune``)
register the same arguments with their command directly, so the two parsers cannot drift.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from domain.core.settings import Settings

Command: TypeAlias = Callable[[argparse.Namespace, "Settings"], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def imported_when_run(module: str) -> Command:
    """``module.command``, imported the first time the command runs."""
    def run(args: argparse.Namespace, settings: Settings) -> int:
        command: Command = importlib.import_module(module).command
        return command(args, settings)
    return run


def add_tune(subparsers: Subparsers, command: Command) -> None:
    tune = subparsers.add_parser("tune", help="search a study's flags under its SLA, one queued run per trial")
    tune.add_argument("study", help="study YAML file (domain/tune/study.py)")
    tune.add_argument("--trials", type=int, help="the trial budget (default: the study's budget.trials)")
    tune.add_argument("--poll", type=float, default=2.0, help="seconds between looks at a trial's run")
    tune.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    tune.set_defaults(func=command)


def add_max_concurrency(subparsers: Subparsers, command: Command) -> None:
    cmd = subparsers.add_parser("max-concurrency",
                                help="bisect the highest concurrency a plan holds under a p99 SLA (queued runs)")
    cmd.add_argument("plan", help="plan YAML file (its concurrency list is replaced by the probes)")
    cmd.add_argument("--ttft-p99-ms", type=float, help="p99 TTFT limit (ms)")
    cmd.add_argument("--tpot-p99-ms", type=float, help="p99 TPOT limit (ms)")
    cmd.add_argument("--low", type=int, default=1, help="lowest concurrency probed (default 1)")
    cmd.add_argument("--high", type=int, default=256, help="highest concurrency probed (default 256)")
    cmd.add_argument("--resolution", type=int, default=1,
                     help="stop when the last passing and first failing concurrency are this close (default 1)")
    cmd.add_argument("--poll", type=float, default=2.0, help="seconds between looks at a probe's run")
    cmd.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    cmd.set_defaults(func=command)
