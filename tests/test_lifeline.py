"""runner/lifeline.py: a program started through it dies when its parent is killed outright,
even in its own session (which no group kill of the parent reaches)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from tests.support.app_server import ROOT

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from runner.lifeline import wrap
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    if sys.argv[1] == "lifeline":
        argv = wrap(argv)
    child = subprocess.Popen(argv, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def _orphan_after_parent_sigkill(mode: str) -> bool:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    time.sleep(0.5)  # the child has exec'd its program
    assert psutil.Process(child_pid).cmdline()[-1] == "import time; time.sleep(600)"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE:
            return False
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)  # clean up the orphan this test made on purpose
    return True


def test_a_child_started_through_the_lifeline_dies_with_its_parent() -> None:
    assert _orphan_after_parent_sigkill("lifeline") is False


def test_without_the_lifeline_the_same_child_is_orphaned() -> None:
    # The control: this is the leftover the lifeline exists to prevent.
    assert _orphan_after_parent_sigkill("plain") is True
