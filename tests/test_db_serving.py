"""A serving holder (db/serving.py, ``keep_open(..., serve=True)``) runs other processes'
accesses on its own connection, with real DuckDB files and real processes: the client's
reads and writes land without the file changing hands, a transaction is as atomic as a
local one (a client killed inside one leaves nothing), DuckDB's errors arrive as
themselves, and a process that waits for the lock itself still gets the file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from db import DbBusy, Store, connection, serving
from tests.conftest import ROOT
from tests.support.actors import admin
from tests.support.line_peer import LinePeer

# The holder: keeps and serves, and answers one line (JSON) per command from stdin:
# "write X" audits X itself, "state" says whether it holds and serves, and which
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
