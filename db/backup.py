"""Backup and restore of the DuckDB file while the app and the runner keep using it.

How the copy is made consistent: every process opens the DB only inside the
cross-process file lock (``db/connection.py``), so while the backup holds that lock nobody
else has the file open.  Under the lock we open it, ``CHECKPOINT`` (the WAL is merged
into the main file), close it, and copy the main file byte for byte.  That file is then
the complete committed state: every transaction committed before the lock was taken is
in it, none that started after.  We prefer this to ``ATTACH … COPY FROM DATABASE``
(also consistent, it reads one snapshot) because the lock is held for the whole copy
either way, and a file copy is far faster than DuckDB re-encoding every table (646 MB:
lock held 0.29 s against 13 s; docs/operations.md); the shorter the hold, the fewer runner
writes wait.  A program that ignores our lock (an ad-hoc
``duckdb`` shell) is still excluded: opening the file for the checkpoint takes DuckDB's
own lock, and we keep our lock until the copy is done.

The SQL here is read-only and used only by backup/restore, so it lives with them rather
than in ``db/queries.py``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import duckdb
import filelock

from db.clock import utcnow
from db.connection import _acquire, _open, lock_path_for, writer_waiting_path
from db.migrations import MIGRATIONS

# The tables a report counts, in this order; a table an older schema lacks is skipped.
MAIN_TABLES = ("runs", "attempts", "sweep_points", "telemetry_summaries", "request_samples", "configurations",
               "runners", "audit_log", "imports", "sglang_schemas", "schema_migrations")

TABLES_PRESENT = """
SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_type = 'BASE TABLE'
"""
APPLIED_MIGRATIONS = "SELECT number FROM schema_migrations"
# A runner is live while it heartbeats its row (every poll when idle) or holds an unexpired
# lease on an attempt (renewed every heartbeat_s while it executes one).
LIVE_RUNNER_ROWS = "SELECT id FROM runners WHERE heartbeat_at >= ?"
LIVE_LEASES = """
SELECT DISTINCT runner_id FROM attempts
WHERE status IN ('claimed', 'starting', 'benchmarking') AND lease_expires_at >= ?
"""


class BackupError(RuntimeError):
    """A refusal or a failed check; ``reason`` names it for the CLI's message catalogue."""

    def __init__(self, reason: str, detail: str = "", **params: object):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.params = params


@dataclass(frozen=True)
class BackupReport:
    path: Path
    size_bytes: int
    seconds: float
    lock_held_s: float
    row_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreReport:
    kept: Path | None  # the replaced file, renamed; None when there was no DB yet
    row_counts: dict[str, int] = field(default_factory=dict)


def wal_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".wal")


@contextmanager
def exclusive(db_path: Path, *, lock_timeout_s: float) -> Iterator[None]:
    """Hold the Store's cross-process lock with no connection open, as a writer would
    (ahead of polling readers).  Raises DbBusy past the timeout."""
    lock = filelock.FileLock(str(lock_path_for(db_path)))
    _acquire(lock, lock_timeout_s, marker=writer_waiting_path(db_path), writer=True)
    try:
        yield
    finally:
        lock.release()


def row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    present = {row[0] for row in con.execute(TABLES_PRESENT).fetchall()}
    counts = {}
    for table in MAIN_TABLES:
        if table in present:
            # The name comes from the fixed MAIN_TABLES tuple, never from input.
            counts[table] = int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])  # type: ignore[index]  # noqa: S608
    return counts


def verify(path: Path) -> dict[str, int]:
    """Open ``path`` read-only; it must be a DuckDB file with benchdeck's migration ledger,
    from no newer schema than this code knows.  Return its row counts."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise BackupError("not_a_database", str(exc), path=path) from exc
    try:
        try:
            applied = {int(row[0]) for row in con.execute(APPLIED_MIGRATIONS).fetchall()}
        except duckdb.Error as exc:
            raise BackupError("no_schema", str(exc), path=path) from exc
        unknown = applied - {m.number for m in MIGRATIONS}
        if unknown:
            raise BackupError("newer_schema", f"migrations {sorted(unknown)}", path=path)
        return row_counts(con)
    finally:
        con.close()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _checkpoint(db_path: Path, *, lock_timeout_s: float) -> dict[str, int]:
    """Merge the WAL into the main file and count rows; call with the lock held."""
    con = _open(db_path, lock_timeout_s=lock_timeout_s, read_only=False)
    try:
        con.execute("CHECKPOINT")
        return row_counts(con)
    finally:
        con.close()


def _snapshot(db_path: Path, tmp: Path, *, lock_timeout_s: float) -> tuple[dict[str, int], float]:
    """Copy the checkpointed file to ``tmp`` under the lock; return the source's row
    counts (taken in the same hold) and how long the lock was held."""
    with exclusive(db_path, lock_timeout_s=lock_timeout_s):
        held = time.monotonic()
        counts = _checkpoint(db_path, lock_timeout_s=lock_timeout_s)
        if wal_path_for(db_path).exists():
            # A clean close leaves no WAL; one here means the main file alone is not the state.
            raise BackupError("wal_left", str(wal_path_for(db_path)))
        shutil.copyfile(db_path, tmp)
        return counts, time.monotonic() - held


def _publish(tmp: Path, dest: Path, *, force: bool) -> None:
    """Move the finished copy into place atomically; without ``force`` a link, which
    fails rather than replace a file that appeared meanwhile."""
    if force:
        os.replace(tmp, dest)
    else:
        try:
            os.link(tmp, dest)
        except FileExistsError:
            raise BackupError("dest_exists", str(dest), path=dest) from None
        tmp.unlink()
    _fsync_dir(dest.parent)


def backup(db_path: Path, dest: Path, *, lock_timeout_s: float, force: bool = False) -> BackupReport:
    """Write a consistent, verified copy of ``db_path`` to ``dest`` (temp file + rename)."""
    if not db_path.is_file():
        raise BackupError("no_database", str(db_path), path=db_path)
    if dest.exists() and not force:
        raise BackupError("dest_exists", str(dest), path=dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    start = time.monotonic()
    try:
        source_counts, held = _snapshot(db_path, tmp, lock_timeout_s=lock_timeout_s)
        _fsync_file(tmp)
        copy_counts = verify(tmp)
        if copy_counts != source_counts:
            raise BackupError("count_mismatch", f"source {source_counts}, copy {copy_counts}")
        _publish(tmp, dest, force=force)
    finally:
        tmp.unlink(missing_ok=True)
    return BackupReport(dest, dest.stat().st_size, time.monotonic() - start, held, copy_counts)


def _live_runners(con: duckdb.DuckDBPyConnection, *, window_s: float) -> list[str]:
    now = utcnow()
    rows = con.execute(LIVE_RUNNER_ROWS, [now - timedelta(seconds=window_s)]).fetchall()
    rows += con.execute(LIVE_LEASES, [now]).fetchall()
    return sorted({str(row[0]) for row in rows})


def _retire_current(db_path: Path, *, lock_timeout_s: float, window_s: float, force: bool) -> Path:
    """With the lock held: refuse if a runner is live (unless ``force``), checkpoint, and
    rename the current file (and any WAL, which belongs to it) aside."""
    try:
        con = _open(db_path, lock_timeout_s=lock_timeout_s, read_only=False)
    except duckdb.Error as exc:
        if not force:
            raise BackupError("current_unreadable", str(exc), path=db_path) from exc
    else:
        try:
            live = _live_runners(con, window_s=window_s)
            if live and not force:
                raise BackupError("runner_live", ", ".join(live), runners=", ".join(live), window_s=window_s)
            con.execute("CHECKPOINT")
        finally:
            con.close()
    kept = db_path.with_name(f"{db_path.name}.before-restore-{utcnow():%Y%m%dT%H%M%SZ}")
    os.replace(db_path, kept)
    # A WAL left beside the restored file would be replayed into it: it must go with its file.
    if wal_path_for(db_path).exists():
        os.replace(wal_path_for(db_path), wal_path_for(kept))
    return kept


def _service_owner(db_path: Path) -> tuple[int, int]:
    """Who the restored file must belong to: the file it replaces, else its directory's owner
    (the service user's, docs/host.md step 2)."""
    stat = (db_path if db_path.exists() else db_path.parent).stat()
    return stat.st_uid, stat.st_gid


def _keep_owner(path: Path, owner: tuple[int, int]) -> None:
    """A restore run as root would leave a root-owned file the runner cannot open (it would
    then restart in a loop): hand it back to the owner.  Only root can, and needs to."""
    if os.geteuid() == 0 and (path.stat().st_uid, path.stat().st_gid) != owner:
        os.chown(path, *owner)


def restore(db_path: Path, src: Path, *, lock_timeout_s: float, live_window_s: float,
            force: bool = False) -> RestoreReport:
    """Replace ``db_path`` with the verified backup ``src``; the old file is kept as
    ``<db>.before-restore-<UTC timestamp>``."""
    if not src.is_file():
        raise BackupError("no_source", str(src), path=src)
    counts = verify(src)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(f".{db_path.name}.restore-{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)  # outside the lock: the copy can be slow, the swap is not
        _fsync_file(tmp)
        with exclusive(db_path, lock_timeout_s=lock_timeout_s):
            kept = None
            owner = _service_owner(db_path)
            if db_path.exists():
                kept = _retire_current(db_path, lock_timeout_s=lock_timeout_s, window_s=live_window_s, force=force)
            os.replace(tmp, db_path)
            _keep_owner(db_path, owner)
            _fsync_dir(db_path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return RestoreReport(kept, counts)
