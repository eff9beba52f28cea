"""Short, locked DuckDB access.

DuckDB lets one process hold a read-write handle *or* many hold read-only ones, never
both, and it has no busy timeout: a second process fails at once with "Could not set
lock on file".  The app and the runner are separate processes, so every access here is
short — take one cross-process file lock, open, do, close — and nobody keeps a
connection while waiting on anything else.  A lock wait past ``lock_timeout_s`` raises
``DbBusy``, the only error the UI turns into "busy, retrying"; anything else surfaces as
itself.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import filelock

# Polls of the file lock are short and jittered so that a UI reader and a runner writer
# that collide do not retry in lock-step.
_POLL_MIN_S = 0.005
_POLL_MAX_S = 0.05
# A writer's marker older than this is stale (its process died while waiting).
_WRITER_MARK_FRESH_S = 0.5


class DbBusy(RuntimeError):
    """The database stayed locked by another process for longer than the lock timeout."""


class DbUnusable(RuntimeError):
    """DuckDB refused the database file itself: a WAL that will not replay, a damaged file.
    Its message is DuckDB's own."""


def lock_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def writer_waiting_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".writer-waiting")


def _writer_is_waiting(marker: Path) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < _WRITER_MARK_FRESH_S
    except FileNotFoundError:
        return False


def _acquire(lock: filelock.FileLock, timeout_s: float, *, marker: Path, writer: bool) -> None:
    """Poll the lock with jitter until ``timeout_s``.  The file lock is not fair: readers
    polling in a loop can starve a writer.  So a waiting writer keeps a marker file fresh,
    and readers let a fresh marker's writer go first (within their own timeout)."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if writer:
                marker.touch()
            if writer or not _writer_is_waiting(marker):
                try:
                    lock.acquire(timeout=0)
                    return
                except filelock.Timeout:
                    pass
            if time.monotonic() >= deadline:
                raise DbBusy(f"database busy for {timeout_s:.1f}s (lock {lock.lock_file})") from None
            time.sleep(random.uniform(_POLL_MIN_S, _POLL_MAX_S))  # noqa: S311 - jitter, not crypto
    finally:
        if writer:
            marker.unlink(missing_ok=True)


def _is_foreign_file_lock(exc: duckdb.IOException) -> bool:
    # A process that ignores our file lock (an ad-hoc `duckdb` shell, say) holds DuckDB's own lock.
    return "Could not set lock" in str(exc)


@contextmanager
def connect(
    db_path: Path, *, lock_timeout_s: float, read_only: bool = False, writer: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a connection held only for the ``with`` block, under the cross-process lock.
    ``writer=True`` (transactions) gets precedence over readers waiting at the same time."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_path_for(db_path)))
    _acquire(lock, lock_timeout_s, marker=writer_waiting_path(db_path), writer=writer)
    try:
        con = _open(db_path, lock_timeout_s=lock_timeout_s, read_only=read_only)
        try:
            yield con
        finally:
            con.close()
    finally:
        lock.release()


def _open(db_path: Path, *, lock_timeout_s: float, read_only: bool) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + lock_timeout_s
    while True:
        try:
            return duckdb.connect(str(db_path), read_only=read_only and db_path.exists())
        except duckdb.IOException as exc:
            if not _is_foreign_file_lock(exc) or time.monotonic() >= deadline:
                if _is_foreign_file_lock(exc):
                    raise DbBusy(f"database file locked by another program: {exc}") from exc
                raise
            time.sleep(random.uniform(_POLL_MIN_S, _POLL_MAX_S))  # noqa: S311


@contextmanager
def transaction(db_path: Path, *, lock_timeout_s: float) -> Iterator[duckdb.DuckDBPyConnection]:
    """One short read-write transaction: committed at the end, rolled back on any error."""
    with connect(db_path, lock_timeout_s=lock_timeout_s, writer=True) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
