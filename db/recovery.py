"""After an unclean shutdown: a WAL left beside the database file, and a file DuckDB refuses.

Every access in db/connection.py closes its connection or, kept, has its commits
checkpointed by the keeping process's watcher within a fraction of a second (once the
connection sits unused), and a clean close checkpoints and deletes the WAL, so a WAL
found under the cross-process lock is a leftover of a process that died inside a DB
access or just after one.  DuckDB replays it on the next open and deletes it; a torn or
damaged WAL is replayed only up to the damage, without an error (DuckDB 2.0.1: a WAL cut
in half lost the committed rows after the cut).  So the runner keeps a copy before
anything opens the file and says so (a warning and a ``wal_recovered`` audit row):
nothing is lost silently.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import duckdb

from db.backup import exclusive
from db.connection import DbUnusable
from db.store import Store


def wal_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".wal")


def keep_leftover_wal(db_path: Path, lock_timeout_s: float) -> Path | None:
    """Copy a leftover WAL aside before anything opens the file; return the copy's path,
    or None when there is no WAL."""
    wal = wal_path_for(db_path)
    if not wal.exists():
        return None
    # As a waiting writer (db/backup.py exclusive), so that a process keeping or serving the
    # file lets go at once, closing it (which checkpoints its WAL away) instead of holding the
    # lock until its idle limit: a WAL found after that was left by a process that died.
    with exclusive(db_path, lock_timeout_s=lock_timeout_s):
        if not wal.exists():
            return None
        kept = wal.with_name(f"{wal.name}.kept-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        shutil.copy2(wal, kept)
    return kept


def open_and_migrate(store: Store) -> list[int]:
    """Open the file (DuckDB replays a leftover WAL here) and apply pending migrations;
    return the migrations applied.  Whatever DuckDB refuses on the way raises
    ``DbUnusable``, so that a caller outside db/ need not know DuckDB's error types."""
    try:
        return store.migrate()
    except duckdb.Error as exc:
        raise DbUnusable(str(exc)) from exc
