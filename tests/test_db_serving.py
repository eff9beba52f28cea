"""A serving holder (db/serving.py, ``keep_open(..., serve=True)``) runs other processes'
accesses on its own connection, with real DuckDB files and real processes: the client's
reads and writes land without the file changing hands, a transaction is as atomic as a
local one (a client killed inside one leaves nothing), DuckDB's errors arrive as
themselves, and a process that waits for the lock itself still gets the file.  A read
access runs beside the holder's writes, in one read-only snapshot, and the holder closes
its connection only after the reads on it have ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import duckdb
import filelock
import pytest

from db import DbBusy, Store, connection, serving
from db.recovery import wal_path_for
from tests.conftest import ROOT
from tests.support.actors import admin
from tests.support.line_peer import LinePeer
from tests.support.polling import until

# The holder: keeps and serves, and answers one line (JSON) per command from stdin:
# "write X" audits X itself, "beat" updates its runner's row, "state" says whether it holds and serves, and which
# connection it holds (the same id means the file never changed hands).
_HOLDER = """
import json, sys
from pathlib import Path
from db import Store, connection
connection.keep_open(0.5, serve=True)
db = Path(sys.argv[1])
store = Store(db, lock_timeout_s=10)
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "write":
        store.audit("holder", arg, None, {})
    if command == "beat":  # an update, as a runner's heartbeat is
        if not store.list_runners():
            store.register_runner("r", host="h", gpu_type="H200", gpu_count=8, sglang_version=None,
                                  healthy=True, unhealthy_reason=None, info={})
        store.runner_heartbeat("r", healthy=True, unhealthy_reason=None)
    holder = connection._holder_for(db)
    with holder.mutex:
        state = {"holds": holder.con is not None, "serves": holder.server is not None,
                 "con": id(holder.con) if holder.con is not None else None}
    print(json.dumps(state), flush=True)
"""


class Holder(LinePeer):
    def __init__(self, db: Path) -> None:
        super().__init__(_HOLDER, str(db))


@pytest.fixture
def holder(store: Store, db_path: Path) -> Iterator[Holder]:
    store.migrate()
    holding = Holder(db_path)
    try:
        state = holding.ask("write first")
        assert state["holds"] and state["serves"], state
        yield holding
    finally:
        holding.close()


def _actions(store: Store) -> list[str]:
    return sorted(e.action for e in store.audit_entries(reader=admin(), limit=1000))


def test_a_client_reads_and_writes_on_the_holders_connection(store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("state")
    store.audit("client", "mine", None, {})
    assert until(lambda: not wal_path_for(db_path).exists(), 5)  # the holder checkpointed our commit, as its own
    assert _actions(store) == ["first", "mine"]  # our write, then the holder's and ours, read back
    holder.ask("write theirs")
    assert _actions(store) == ["first", "mine", "theirs"]  # the holder's next commit, at once
    after = holder.ask("state")
    assert after == before  # the same connection throughout: the file never changed hands
    assert connection._holder_for(db_path).con is None  # and this process never opened it


def test_duckdbs_errors_arrive_as_themselves_and_the_holder_serves_on(
        store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("state")
    with pytest.raises(duckdb.CatalogException, match="no_such_table"):
        with connection.connect(db_path, lock_timeout_s=5) as con:
            con.execute("SELECT * FROM no_such_table")
    with pytest.raises(ValueError, match="changed my mind"):
        with store._tx() as con:  # the store's own transaction, failed on purpose
            store._audit(con, "client", "undone", None, {})
            raise ValueError("changed my mind")
    assert _actions(store) == ["first"]  # the failed transaction was rolled back
    assert holder.ask("state") == before


def test_a_client_killed_inside_a_transaction_leaves_nothing(store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("state")
    hanging = subprocess.Popen([sys.executable, "-m", "tests.support.db_worker", "hang", str(db_path), "25"],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert hanging.stdout is not None and hanging.stdout.readline().strip() == "inside"
        os.killpg(hanging.pid, signal.SIGKILL)
    finally:
        hanging.wait(timeout=30)
    assert _actions(store) == ["first"]  # its 25 uncommitted rows were rolled back
    assert holder.ask("write after") == before  # and the holder serves on, on the same connection
    assert _actions(store) == ["after", "first"]


def test_a_process_waiting_for_the_lock_gets_the_file_and_serving_resumes(
        store: Store, db_path: Path, holder: Holder) -> None:
    with connection.connect(db_path, lock_timeout_s=10, read_only=True) as con:  # needs the file itself
        assert con.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)
    state = holder.ask("state")
    assert not state["holds"] and not state["serves"]  # it stopped serving, then let go
    assert serving.join(db_path, timeout_s=1) is None  # nobody serves now: clients take the lock
    store.audit("client", "by-lock", None, {})
    resumed = holder.ask("write again")
    assert resumed["holds"] and resumed["serves"]
    assert _actions(store) == ["again", "by-lock", "first"]


def test_a_process_waiting_for_the_lock_is_served_once_a_holder_serves(db_path: Path) -> None:
    """A waiter tries the serving holder before each poll of the lock (``_acquire``): once
    one serves, it runs our access, the lock stays its own and our marks are gone (beside
    a polling app, letting go for waiters that could have been served made the file change
    hands after each runner write, each hand-over costing an open)."""
    lock_file = str(connection.lock_path_for(db_path))
    other = filelock.FileLock(lock_file)
    other.acquire()  # the file is another process's, which does not serve yet
    served = cast(serving.RemoteCursor, object())  # stands for the cursor on a serving holder
    joins: list[int] = []

    def join() -> serving.RemoteCursor | None:
        joins.append(1)
        return served if len(joins) == 3 else None

    ours = filelock.FileLock(lock_file)
    try:
        got = connection._acquire(ours, 10, marker=connection.writer_waiting_path(db_path), writer=True,
                                  waiting=connection.waiting_path(db_path), join=join)
        assert got is served and len(joins) == 3 and not ours.is_locked
        assert not connection.waiting_path(db_path).exists()
        assert not connection.writer_waiting_path(db_path).exists()
    finally:
        other.release()


def _looks_while_waiting(holder: connection._Holder, mark: Path, seconds: float) -> list[bool]:
    """What the holder's watcher sees, looking every 5 ms, while a waiter re-marks each poll."""
    seen: list[bool] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        mark.touch()
        seen.append(holder.someone_waiting())
        time.sleep(0.005)
    return seen


def test_a_serving_holder_lets_go_for_a_waiter_that_was_not_served_within_the_grace(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter that can be served joins the holder within a poll; one that waits on needs
    the file itself (a backup, a read-only open) and gets it ``_SERVED_WAITER_GRACE_S``
    later (``_Holder.someone_waiting``).  A holder that does not serve lets go at once."""
    monkeypatch.setattr(connection, "_SERVED_WAITER_GRACE_S", 0.2)
    holder = connection._Holder(db_path)
    mark = connection.waiting_path(db_path)
    mark.touch()
    assert holder.someone_waiting()  # not serving: at once
    mark.unlink()
    holder.server = cast(serving.Server, object())  # serving (only whether it is set is read)
    time.sleep(0.15)  # the waiter's grace starts when it is seen anew
    seen = _looks_while_waiting(holder, mark, 0.35)
    assert not seen[0] and seen[-1]  # it may still join us; then it waited on
    mark.unlink()
    assert not holder.someone_waiting()


def test_a_waiters_grace_counts_from_when_the_holder_sees_it_anew(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A served waiter removes the marks it made: another one seen later has a grace of its
    own, even if the holder did not look in between (it held no file, or an access ran)."""
    monkeypatch.setattr(connection, "_SERVED_WAITER_GRACE_S", 0.2)
    holder = connection._Holder(db_path)
    holder.server = cast(serving.Server, object())
    mark = connection.waiting_path(db_path)
    assert _looks_while_waiting(holder, mark, 0.3)[-1]  # one waiter, past its grace
    mark.unlink()
    time.sleep(0.15)  # no look meanwhile
    mark.touch()
    assert not holder.someone_waiting()  # a new waiter: its own grace


def test_a_client_served_at_once_leaves_another_waiters_marks(db_path: Path) -> None:
    """The marks are shared by every waiter; a client that a holder served before it marked
    anything must not remove a backup's (the holder would stop seeing that one wait)."""
    lock_file = str(connection.lock_path_for(db_path))
    marks = (connection.writer_waiting_path(db_path), connection.waiting_path(db_path))
    for mark in marks:
        mark.touch()  # a backup waits
    served = cast(serving.RemoteCursor, object())
    got = connection._acquire(filelock.FileLock(lock_file), 10, marker=marks[0], writer=True,
                              waiting=marks[1], join=lambda: served)
    assert got is served
    assert all(mark.exists() for mark in marks)


def test_a_holder_killed_mid_access_is_busy_to_the_client_and_the_next_access_takes_the_file(
        store: Store, db_path: Path) -> None:
    store.migrate()
    doomed = Holder(db_path)
    assert doomed.ask("write first")["serves"]
    with pytest.raises(DbBusy, match="went away"):
        with connection.connect(db_path, lock_timeout_s=5) as con:
            assert con.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)
            doomed.proc.kill()
            doomed.proc.wait(timeout=30)
            con.execute("SELECT count(*) FROM audit_log")
    store.audit("client", "after", None, {})  # nobody serves now: this process takes the file
    assert _actions(store) == ["after", "first"]


def test_each_file_has_its_own_address(tmp_path: Path) -> None:
    one, other = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert serving.address_for(one) != serving.address_for(other)
    assert serving.address_for(one) == serving.address_for(tmp_path / "." / "a.duckdb")
    assert serving.address_for(one).startswith(b"\0")  # abstract: no file left behind


_COUNT = "SELECT count(*) FROM audit_log"


def test_a_read_runs_beside_the_holders_writes_in_the_snapshot_it_began_with(
        store: Store, db_path: Path, holder: Holder) -> None:
    """The Store's reads (``reading=True``) do not take the holder's turn: the holder writes
    while one is open (before, its write waited for the read to end), and the read sees
    what was committed when it began, for all of its statements."""
    with connection.connect(db_path, lock_timeout_s=5, reading=True) as con:
        assert con.execute(_COUNT).fetchone() == (1,)
        assert holder.ask("write during")["holds"]  # answered while our access is open
        assert con.execute(_COUNT).fetchone() == (1,)  # our snapshot, not the holder's new row
    assert _actions(store) == ["during", "first"]  # a new access sees it
    assert connection._holder_for(db_path).con is None  # served: this process never opened the file
    # Our read held the holder's checkpoint off; its watcher has made it since: no WAL is kept.
    assert until(lambda: not wal_path_for(db_path).exists(), 5)


def test_a_write_in_a_read_access_is_refused_and_leaves_nothing(store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("state")
    with pytest.raises(duckdb.TransactionException, match="read-only"):
        with connection.connect(db_path, lock_timeout_s=5, reading=True) as con:
            con.execute("CREATE TABLE written_by_a_read (i INTEGER)")
    assert "written_by_a_read" not in store.table_names()
    assert holder.ask("state") == before  # and it serves on, on the same connection


_WAITER = """
import sys
from pathlib import Path
from db import connection
with connection.connect(Path(sys.argv[1]), lock_timeout_s=30, read_only=True) as con:
    print(con.execute("SELECT count(*) FROM audit_log").fetchone()[0], flush=True)
"""


def test_the_holder_closes_its_connection_only_after_the_reads_on_it_end(
        store: Store, db_path: Path, holder: Holder) -> None:
    """A process that needs the file itself makes the holder let go, but not under a read
    it is serving: the read finishes on the open connection, then the file changes hands."""
    with connection.connect(db_path, lock_timeout_s=5, reading=True) as con:
        assert con.execute(_COUNT).fetchone() == (1,)
        waiter = subprocess.Popen([sys.executable, "-c", _WAITER, str(db_path)], cwd=ROOT,
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(1.5)  # the holder has seen the waiter (it looks every 5 ms) and is letting go
        assert waiter.poll() is None  # the file is still the holder's
        assert con.execute(_COUNT).fetchone() == (1,)  # and our read still runs on it
    out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 0 and out.strip() == "1"
    assert not holder.ask("state")["holds"]


def test_a_write_does_not_wait_for_a_running_read_and_its_checkpoint_follows(
        store: Store, db_path: Path, holder: Holder) -> None:
    """A read still scanning the table the holder writes keeps DuckDB from checkpointing
    that write; the holder does not wait for it (its watcher checkpoints, db/connection.py
    ``_Holder._checkpoint``): its write returns while the read runs, the WAL stays only
    until the read ends."""
    holder.ask("beat")
    # Seconds of work over the runners table, whose row the holder's "beat" updates.
    long_read = "SELECT count(*) FROM runners a, range(300000000) r WHERE length(a.id) + r.range < 0"
    done: dict[str, object] = {}

    def read() -> None:
        with connection.connect(db_path, lock_timeout_s=5, reading=True) as con:
            done["rows"] = con.execute(long_read).fetchone()

    reading = threading.Thread(target=read)
    reading.start()
    time.sleep(0.5)  # the query is running
    assert reading.is_alive()
    assert holder.ask("beat")["holds"]
    still_reading = reading.is_alive()
    wal_kept = wal_path_for(db_path).exists()
    reading.join(timeout=120)
    assert still_reading and wal_kept  # the write returned first, its checkpoint left for later
    assert done["rows"] == (0,)
    assert until(lambda: not wal_path_for(db_path).exists(), 5)  # made by the holder's watcher once the read ended
