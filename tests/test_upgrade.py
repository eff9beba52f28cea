"""Upgrades (docs/host.md, step 10; issue 40): a used database is backed up before a
pending migration runs, a database newer than the code is refused with nothing changed,
and a restore run as root leaves the file owned by the service user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from db import Store
from db import migrations as m
from db.backup import backup, restore
from db.upgrade import DatabaseTooNew
from tests.conftest import ROOT


def _migrations(db_path: Path) -> list[int]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return [row[0] for row in con.execute("SELECT number FROM schema_migrations ORDER BY number").fetchall()]
    finally:
        con.close()


def test_a_used_database_is_backed_up_before_a_pending_migration(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = tmp_path / "benchdeck.duckdb"
    older = m.MIGRATIONS[:-1]  # the code before the newest migration
    monkeypatch.setattr(m, "MIGRATIONS", older)
    Store(db_path, lock_timeout_s=10).migrate()
    monkeypatch.undo()
    assert Store(db_path, lock_timeout_s=10).migrate() == [m.MIGRATIONS[-1].number]
    [kept] = tmp_path.glob(f"benchdeck.before-migration-{m.MIGRATIONS[-1].number}-*.duckdb")
    assert _migrations(kept) == [step.number for step in older]  # the state before the upgrade
    assert Store(db_path, lock_timeout_s=10).migrate() == []
    assert len(list(tmp_path.glob("*.before-migration-*"))) == 1  # nothing pending: no new copy
    Store(tmp_path / "fresh.duckdb", lock_timeout_s=10).migrate()
    assert not list(tmp_path.glob("fresh.before-migration-*"))  # a new file has nothing to lose


def test_a_database_newer_than_the_code_is_refused_unchanged(store: Store, db_path: Path,
                                                            env: dict[str, str]) -> None:
    con = duckdb.connect(str(db_path))
    con.execute("INSERT INTO schema_migrations VALUES (9999, 'from the future', now()::TIMESTAMP)")
    con.close()
    before = db_path.read_bytes()
    with pytest.raises(DatabaseTooNew, match=r"migrations \[9999\]"):
        store.migrate()
    done = subprocess.run([sys.executable, "-m", "runner", "status"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1 and "newer code wrote it" in done.stderr and "Traceback" not in done.stderr
    assert db_path.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a file another user's")
def test_a_restore_run_as_root_keeps_the_service_users_ownership(store: Store, db_path: Path,
                                                                 tmp_path: Path) -> None:
    nobody = 65534
    backup(db_path, tmp_path / "copy.duckdb", lock_timeout_s=10)
    os.chown(db_path, nobody, nobody)
    restore(db_path, tmp_path / "copy.duckdb", lock_timeout_s=10, live_window_s=60)
    assert (db_path.stat().st_uid, db_path.stat().st_gid) == (nobody, nobody)
