"""An engine server's log, rotated by size without the server knowing.

Why a pipe and a copier thread rather than copy+truncate of a file the child appends to:
copy+truncate loses whatever the child writes between the copy and the truncate (the
known ``copytruncate`` gap), and there is no portable way to cut the head off a file the
child holds open.  With a pipe the runner owns the file: a thread reads the child's
output (stdout and stderr, one pipe, so their order is kept) and appends it to
``server.log``; at the size limit it renames ``server.log`` → ``.1`` → ``.2`` … and
opens a new one, always at a line boundary.  The child's file descriptor never changes.

The price: the child now depends on the reader.  The thread only does ``read`` and
``write`` (far faster than any server logs), so the 64 KiB pipe buffer never fills in
practice.  If the runner itself dies, the child's next write fails (EPIPE); that
server is an orphan the next runner kills anyway (``runner_lost``).
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

_CHUNK = 64 * 1024
# Rotation waits for a newline so that no line is split across two files; a child that
# writes this much without one (a runaway progress bar) is rotated mid-line all the same.
_LINE_SLACK = 1024 * 1024


class _LogSettings(Protocol):
    server_log_max_mb: float
    server_log_backups: int


@dataclass(frozen=True)
class LogRotation:
    max_bytes: int
    backups: int

    @classmethod
    def from_settings(cls, settings: _LogSettings) -> LogRotation:
        return cls(max(1, int(settings.server_log_max_mb * 1024 * 1024)), settings.server_log_backups)


# The settings' defaults (BENCHDECK_SERVER_LOG_MAX_MB=200, BENCHDECK_SERVER_LOG_BACKUPS=3).
DEFAULT_ROTATION = LogRotation(200 * 1024 * 1024, 3)


def backup_path(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


class RotatingLog:
    """Appends bytes to ``path``; at ``max_bytes`` shifts it to ``path.1`` (dropping the
    oldest past ``backups``) and starts a new one.  Written unbuffered, so a reader of the
    live file sees every byte as soon as the child wrote it."""

    def __init__(self, path: Path, rotation: LogRotation):
        self.path = path
        self.rotation = rotation
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = open(path, "ab", buffering=0)
        self._size = self._file.tell()
        self.rotations = 0

    def write(self, data: bytes) -> None:
        cut = data.rfind(b"\n") + 1
        self._put(data[:cut])
        if self._size >= self.rotation.max_bytes:
            self._rotate()
        self._put(data[cut:])
        if self._size >= self.rotation.max_bytes + _LINE_SLACK:
            self._rotate()

    def _put(self, data: bytes) -> None:
        if data:
            self._file.write(data)
            self._size += len(data)

    def _rotate(self) -> None:
        self._file.close()
        oldest = backup_path(self.path, self.rotation.backups)
        if self.rotation.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            oldest.unlink(missing_ok=True)
            for n in range(self.rotation.backups - 1, 0, -1):
                if backup_path(self.path, n).exists():
                    os.replace(backup_path(self.path, n), backup_path(self.path, n + 1))
            os.replace(self.path, backup_path(self.path, 1))
        self._file = open(self.path, "ab", buffering=0)
        self._size = 0
        self.rotations += 1

    def close(self) -> None:
        self._file.close()


class LogPump(threading.Thread):
    """Copies everything from the child's output pipe into a RotatingLog until EOF (every
    process holding the pipe's write end, the whole group, has exited)."""

    def __init__(self, fd: int, log: RotatingLog):
        super().__init__(name=f"log-pump {log.path}", daemon=True)
        self.fd = fd
        self.log = log
        self.last_write = time.monotonic()
        self._reading = False  # blocked in read(): everything read so far is in the file
        self.dropped_bytes = 0  # output that could not be written (disk full)

    def run(self) -> None:
        try:
            while True:
                self._reading = True
                chunk = os.read(self.fd, _CHUNK)
                self._reading = False
                if not chunk:
                    return
                try:
                    self.log.write(chunk)
                except OSError:
                    # Disk full (or the file went away): keep draining the pipe, or the
                    # server blocks on its next write and its requests hang for the whole
                    # point timeout.  The runner sees the full disk in its own checks.
                    self.dropped_bytes += len(chunk)
                self.last_write = time.monotonic()
        finally:
            self.log.close()
            os.close(self.fd)

    def _caught_up(self, quiet_s: float) -> bool:
        try:
            pending = struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:  # the thread closed the pipe at EOF meanwhile
            return True
        return self._reading and pending == 0 and time.monotonic() - self.last_write >= quiet_s

    def settle(self, *, quiet_s: float = 0.2, timeout_s: float = 2.0) -> None:
        """Wait until the file holds what the child wrote: EOF, or the pipe empty and
        quiet for ``quiet_s`` (processes of the group may outlive the leader)."""
        deadline = time.monotonic() + timeout_s
        while self.is_alive() and time.monotonic() < deadline and not self._caught_up(quiet_s):
            self.join(0.02)


def log_files(path: Path) -> list[Path]:
    """The live log and its backups, newest first."""
    files = [path]
    n = 1
    while backup_path(path, n).exists():
        files.append(backup_path(path, n))
        n += 1
    return files


def _read_tail(path: Path, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read()
    except FileNotFoundError:
        return b""


def tail(path: Path, max_bytes: int = 16_384) -> str:
    """The last ``max_bytes`` of the log across rotation: a live file that was just
    rotated is topped up from ``.1``, ``.2`` …  (A rotation between two reads can repeat
    or skip a stretch; fine for a tail.)"""
    parts: list[bytes] = []
    left = max_bytes
    for file in log_files(path):
        if left <= 0:
            break
        data = _read_tail(file, left)
        parts.append(data)
        left -= len(data)
    return b"".join(reversed(parts)).decode("utf-8", errors="replace")
