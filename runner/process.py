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

from runner.server_log import LogPump, LogRotation, RotatingLog
from runner.server_log import tail as tail  # rotation-aware; re-exported for callers of this module


@dataclass
class Child:
    """A started child: its process and group, when it started, where its log goes."""

    popen: subprocess.Popen[bytes]
    pgid: int
    started_at: float  # psutil create_time: with the pgid, identifies this group across a PID reuse
    log_path: Path
    pump: LogPump | None = None  # copies a rotated log's pipe into log_path

    def settle_log(self, timeout_s: float = 2.0) -> None:
        """Return once the log file holds what the group wrote (at most ``timeout_s``)."""
        if self.pump is not None:
            self.pump.settle(timeout_s=timeout_s)

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
    rotation: LogRotation | None = None,
) -> Child:
    """Start ``argv`` (a list, no shell) in a new session; stdout/stderr go to ``log_path``
    unless ``stdout`` says otherwise (stderr always goes to the log).  With ``rotation``
    both go through a pipe into a size-rotated log (runner/server_log.py says why)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if rotation is not None:
        return _start_piped(argv, log_path=log_path, env=env, cwd=cwd, stdin=stdin, rotation=rotation)
    with open(log_path, "ab") as log:
        popen = _popen(argv, stdin=stdin, stdout=log if stdout is None else stdout, stderr=log, env=env, cwd=cwd)
    return Child(popen=popen, pgid=popen.pid, started_at=_create_time(popen), log_path=log_path)


def _start_piped(
    argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None, cwd: Path | None, stdin: int | None,
    rotation: LogRotation,
) -> Child:
    log = RotatingLog(log_path, rotation)  # opened first: a log we cannot write must not leave a child behind
    read_end, write_end = os.pipe()  # both close-on-exec: only the child's dup'ed 1 and 2 hold the write end
    try:
        popen = _popen(argv, stdin=stdin, stdout=write_end, stderr=write_end, env=env, cwd=cwd)
    except BaseException:
        os.close(read_end)
        log.close()
        raise
    finally:
        os.close(write_end)  # ours must go, or the pump never sees EOF
    pump = LogPump(read_end, log)
    pump.start()
    return Child(popen=popen, pgid=popen.pid, started_at=_create_time(popen), log_path=log_path, pump=pump)


def _popen(
    argv: Sequence[str], *, stdin: int | None, stdout: int | IO[bytes], stderr: int | IO[bytes],
    env: dict[str, str] | None, cwd: Path | None,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - argv is a list built by the runner, never a shell string
        list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True,
    )


def _create_time(popen: subprocess.Popen[bytes]) -> float:
    try:
        return float(psutil.Process(popen.pid).create_time())
    except psutil.NoSuchProcess:
        return time.time()


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
