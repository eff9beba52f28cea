"""Upgrades of the database file (docs/host.md, step 10): a verified backup is taken
automatically before any pending migration runs on a database that already holds data, and
a database written by newer code (migrations this code does not know) is refused before
anything is changed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from db.backup import backup
from db.connection import DbUnusable, connect
from db.migrations import MIGRATIONS, applied_numbers

log = logging.getLogger("benchdeck.db")


class DatabaseTooNew(DbUnusable):
    """The file records migrations this code does not have: newer code wrote it."""


def _applied(db_path: Path, lock_timeout_s: float) -> set[int]:
    with connect(db_path, lock_timeout_s=lock_timeout_s) as con:
        return applied_numbers(con)


def check_and_back_up(db_path: Path, *, lock_timeout_s: float) -> Path | None:
    """Refuse a newer database; back up a used one that has migrations pending.  Returns
    the backup written, if any (``<db>.before-migration-<n>-<UTC time>.duckdb`` beside it)."""
    if not db_path.is_file():
        return None
    done = _applied(db_path, lock_timeout_s)
    known = {step.number for step in MIGRATIONS}
    unknown = sorted(done - known)
    if unknown:
        raise DatabaseTooNew(
            f"{db_path} records migrations {unknown} that this benchdeck does not know (it knows up to "
            f"{max(known)}): newer code wrote it. Update the code (docs/host.md, step 10), or restore a backup "
            "taken before that upgrade; nothing was changed.")
    pending = sorted(known - done)
    if not done or not pending:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    dest = db_path.with_name(f"{db_path.stem}.before-migration-{pending[0]}-{stamp}{db_path.suffix}")
    report = backup(db_path, dest, lock_timeout_s=lock_timeout_s)
    log.warning("migrations %s pending: the database was backed up first to %s", pending, report.path)
    return report.path
