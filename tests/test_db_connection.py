"""A connection kept between accesses (db/connection.py ``keep_open``), with real DuckDB
files and real processes: it gives way to another process at once, it never shows a
state older than the last commit, and it leaves no WAL behind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from db import Store, connection
from db.recovery import wal_path_for
from tests.support.actors import admin
from tests.support.line_peer import LinePeer
from tests.support.polling import until

# The other process: reads or writes on command from stdin, one line per command, and
# answers with one line (JSON).  It keeps its connection too, like the app and the runner.
_PEER = """
import json, sys, time
from pathlib import Path
from db import Store
from db.connection import keep_open
keep_open(float(sys.argv[2]))
store = Store(Path(sys.argv[1]), lock_timeout_s=10)
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    start = time.perf_counter()
    if command == "write":
        store.audit("peer", arg, None, {})
        answer = None
    else:
        answer = sorted(e.action for e in store.audit_entries(reader=ADMIN, limit=1000))
    print(json.dumps({"answer": answer, "ms": (time.perf_counter() - start) * 1000}), flush=True)
"""


class Peer(LinePeer):
    def __init__(self, db: Path, keep_s: float) -> None:
        super().__init__("from tests.support.actors import admin\nADMIN = admin()\n" + _PEER, str(db), str(keep_s))


@pytest.fixture
def kept(store: Store) -> Iterator[Store]:
    """This process keeps its connection for longer than any test step takes."""
    connection.keep_open(30)
    try:
        yield store
    finally:
        connection.keep_open(0)


def _actions(store: Store) -> list[str]:
    return sorted(e.action for e in store.audit_entries(reader=admin(), limit=1000))


def test_a_kept_connection_holds_the_lock_between_accesses_and_opens_once(kept: Store, db_path: Path) -> None:
    kept.audit("me", "first", None, {})
    holder = connection._holder_for(db_path)
    con = holder.con
    assert con is not None and holder.lock.is_locked  # kept after the access
    assert _actions(kept) == ["first"]
    assert holder.con is con  # the next access used it: no second open
    assert until(lambda: not wal_path_for(db_path).exists())  # its watcher checkpointed the commit


def test_reader_sees_the_writers_commit_on_its_next_access_both_keeping(kept: Store, db_path: Path) -> None:
    """Writer and reader interleave, each keeping its connection: every commit of one is
    in the other's next read, and each gives way to the other within a short wait."""
    peer = Peer(db_path, keep_s=30)
    try:
        for i in range(5):
            peer.ask(f"write peer-{i}")
            assert f"peer-{i}" in _actions(kept)  # we waited for the peer to let go, then read fresh
            kept.audit("me", f"mine-{i}", None, {})
            seen = peer.ask("read")
            assert f"mine-{i}" in seen["answer"]
            assert float(seen["ms"]) < 5_000  # we let go when it waited
        assert _actions(kept) == sorted([f"peer-{i}" for i in range(5)] + [f"mine-{i}" for i in range(5)])
    finally:
        peer.close()


def test_a_kept_connection_is_let_go_after_the_idle_limit(store: Store, db_path: Path) -> None:
    connection.keep_open(0.2)
    try:
        store.audit("me", "x", None, {})
        holder = connection._holder_for(db_path)
        assert holder.con is not None
        deadline = time.monotonic() + 10
        while holder.con is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holder.con is None and not holder.lock.is_locked
    finally:
        connection.keep_open(0)
    # Released: a program that ignores the waiting marker can now take the lock itself.
    import filelock

    with filelock.FileLock(str(connection.lock_path_for(db_path)), timeout=0):
        pass


def test_without_keep_open_every_access_closes(store: Store, db_path: Path) -> None:
    store.audit("me", "x", None, {})
    holder = connection._holder_for(db_path)
    assert holder.con is None and not holder.lock.is_locked


def test_an_error_inside_an_access_drops_the_kept_connection(kept: Store, db_path: Path) -> None:
    kept.audit("me", "x", None, {})
    with pytest.raises(Exception, match="no_such_table"):
        with connection.connect(db_path, lock_timeout_s=5) as con:
            con.execute("SELECT * FROM no_such_table")
    holder = connection._holder_for(db_path)
    assert holder.con is None and not holder.lock.is_locked
    assert _actions(kept) == ["x"]  # and the next access opens afresh


def _held_off_once(then: Callable[[duckdb.DuckDBPyConnection], bool]) -> Callable[[duckdb.DuckDBPyConnection], bool]:
    """A stand-in for ``connection._try_checkpoint``: the commit's own try is held off (as
    by a read the holder serves, db/serving.py), every later one is ``then``'s."""
    tries: list[int] = []

    def attempt(con: duckdb.DuckDBPyConnection) -> bool:
        tries.append(1)
        return False if len(tries) == 1 else then(con)
    return attempt


def test_a_commit_returns_before_its_checkpoint_and_a_burst_shares_one(
        kept: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint is not in the write's time: the watcher makes it once the connection
    has been unused for ``_CHECKPOINT_IDLE_S`` (long here, so that the steps below fit in it)."""
    checkpoints: list[int] = []

    def counted(con: duckdb.DuckDBPyConnection) -> bool:
        checkpoints.append(1)
        return real(con)

    real = connection._try_checkpoint
    monkeypatch.setattr(connection, "_try_checkpoint", counted)
    monkeypatch.setattr(connection, "_CHECKPOINT_IDLE_S", 1.0)
    for i in range(3):
        kept.audit("me", f"x{i}", None, {})
    assert checkpoints == [] and wal_path_for(db_path).exists()  # committed, not yet checkpointed
    holder = connection._holder_for(db_path)
    assert until(lambda: not holder.checkpoint_due and not wal_path_for(db_path).exists())
    assert checkpoints == [1]  # one for the three commits
    assert holder.con is not None  # still kept
    assert _actions(kept) == ["x0", "x1", "x2"]


def test_a_checkpoint_held_off_is_made_by_the_watcher(
        kept: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "_try_checkpoint", _held_off_once(connection._try_checkpoint))
    kept.audit("me", "x", None, {})  # returns without waiting for the checkpoint
    holder = connection._holder_for(db_path)
    assert until(lambda: not holder.checkpoint_due and not wal_path_for(db_path).exists())
    assert holder.con is not None  # kept, with nothing left in a WAL
    assert _actions(kept) == ["x"]


def test_a_held_off_checkpoint_that_then_fails_closes_the_connection(
        kept: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failing for another reason (a full disk), the watcher's try drops the connection as a
    failed access does, and the watcher ends cleanly: the next access keeps afresh."""
    def disk_full(con: duckdb.DuckDBPyConnection) -> bool:
        raise duckdb.IOException("No space left on device")

    monkeypatch.setattr(connection, "_try_checkpoint", _held_off_once(disk_full))
    kept.audit("me", "x", None, {})
    holder = connection._holder_for(db_path)
    assert until(lambda: holder.con is None and not holder.watching)
    assert not holder.lock.is_locked and not holder.checkpoint_due
    monkeypatch.undo()
    assert _actions(kept) == ["x"]  # committed before the checkpoint: replayed from the WAL on open
    assert holder.con is not None and holder.watching  # kept again, watched again


def test_commits_that_never_leave_the_connection_idle_are_checkpointed_all_the_same(
        kept: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of accesses closer than ``_CHECKPOINT_IDLE_S`` would put the checkpoint off
    for as long as it lasts: the watcher makes it ``_CHECKPOINT_MAX_DELAY_S`` after the
    first commit not checkpointed."""
    checkpoints: list[float] = []

    def counted(con: duckdb.DuckDBPyConnection) -> bool:
        checkpoints.append(time.monotonic())
        return real(con)

    real = connection._try_checkpoint
    monkeypatch.setattr(connection, "_try_checkpoint", counted)
    monkeypatch.setattr(connection, "_CHECKPOINT_IDLE_S", 60.0)  # never idle that long here
    monkeypatch.setattr(connection, "_CHECKPOINT_MAX_DELAY_S", 0.3)
    kept.audit("me", "first", None, {})
    assert until(lambda: bool(checkpoints), seconds=10)
    assert until(lambda: not wal_path_for(db_path).exists())


def test_a_close_that_fails_in_the_watcher_does_not_end_it(
        store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher alone checkpoints kept commits and lets go for waiters: a let-go that
    raises (a close whose checkpoint fails, on a full disk) still closes and releases, and
    the watcher ends as after any let-go, so the next access keeps and watches afresh."""
    real = connection._Holder.let_go

    def failing(self: connection._Holder) -> None:
        real(self)
        raise duckdb.IOException("No space left on device")

    connection.keep_open(0.2)
    try:
        store.audit("me", "x", None, {})
        holder = connection._holder_for(db_path)
        monkeypatch.setattr(connection._Holder, "let_go", failing)
        assert until(lambda: holder.con is None and not holder.watching)  # at the idle limit
        monkeypatch.undo()
        store.audit("me", "y", None, {})
        assert holder.con is not None and holder.watching
    finally:
        connection.keep_open(0)
