"""``python -m runner.lifeline -- PROGRAM ARGS...``: run a program that dies with its parent.

Engine servers and bench clients run in their own process groups (start_new_session), so
nothing reaches them when the process that started them is killed outright.  On one host
the runner reaps their recorded groups after a crash; on a Ray node there is no such
runner, and a node's worker dying (``kill -9``, OOM killer, node loss) would leave
servers holding GPUs.  This wrapper asks the kernel to SIGKILL the program when its parent
dies (``PR_SET_PDEATHSIG``, which survives ``execve``), then execs it: same PID, same
argv afterwards, no shell.

The death signal follows the parent *thread*: start children from a thread that lives as
long as they should (runner/ray_executor.py starts them from the attempt's own thread).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def wrap(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "runner.lifeline", "--", *argv]


def main(args: list[str]) -> int:
    if "--" not in args or args.index("--") == len(args) - 1:
        print("usage: python -m runner.lifeline -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    argv = args[args.index("--") + 1:]
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        print(f"lifeline: prctl failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    os.execvp(argv[0], argv)  # noqa: S606 - an argv list, never a shell
    return 1  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
