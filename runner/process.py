"""Child processes: each in its own process group, never through a shell, killed as a group.

SGLang spawns schedulers and a detokenizer that can be reparented to PID 1, so walking a
parent→child tree misses them; a process group catches them all (SGLang's own CI does
the same).  Stopping is SIGTERM to the group, a grace period, then SIGKILL to the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil


@dataclass
class Child:
    """A started child: its process and group, when it started, where its log goes."""

    popen: subprocess.Popen[bytes]
    pgid: int
    started_at: float  # psutil create_time: with the pgid, identifies this group across a PID reuse
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()


def start_child(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | IO[bytes] | None = None,
) -> Child:
    """Start ``argv`` (a list, no shell) in a new session; stdout/stderr go to ``log_path``
    unless ``stdout`` says otherwise (stderr always goes to the log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(  # noqa: S603 - argv is a list built by the runner, never a shell string
            list(argv),
            stdin=stdin,
            stdout=log if stdout is None else stdout,
            stderr=log,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    try:
        started_at = psutil.Process(popen.pid).create_time()
    except psutil.NoSuchProcess:
        started_at = time.time()
    return Child(popen=popen, pgid=popen.pid, started_at=started_at, log_path=log_path)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_group(pgid: int, *, grace_s: float, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL it; return when it is gone."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if popen is not None:
            popen.poll()  # reap our direct child so the group can empty
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:
        if popen is not None:
            popen.poll()
        time.sleep(0.05)


def kill_recorded_group(pgid: int, started_at: float | None, *, grace_s: float) -> bool:
    """Kill a group recorded by a runner that is gone, if it still exists and is the same
    group (its leader's start time matches, so a reused PID is left alone)."""
    if not group_alive(pgid):
        return False
    if started_at is not None:
        try:
            if abs(psutil.Process(pgid).create_time() - started_at) > 1.0:
                return False
        except psutil.NoSuchProcess:
            pass  # leader gone, group members remain: still ours
    stop_group(pgid, grace_s=grace_s)
    return True


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_free_port(low: int, high: int, *, exclude: set[int] | None = None) -> int:
    """A free port in [low, high], starting from a per-process offset so that runners on one
    host rarely race for the same one (the server's bind is the final check)."""
    span = high - low + 1
    start = os.getpid() % span
    for i in range(span):
        port = low + (start + i) % span
        if (not exclude or port not in exclude) and port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def tail(path: Path, max_bytes: int = 16_384) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
