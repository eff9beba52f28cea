"""The serving holder's bounds (db/serving.py, db/wire.py), with real processes stopped
and resumed by signals: a client stopped inside a write loses it within the holder's lock
timeout while the holder's heartbeats go on beside it; a stopped holder is "busy (runner
not answering)" within seconds to its clients and to the app, and serves again once
resumed; a garbage frame ends its own access and nothing else, and never runs code."""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page
from streamlit.testing.v1 import AppTest

from db import DbHolderNotAnswering, Store, serving, wire
from db import queries as q
from db.store import utcnow
from tests.conftest import ROOT
from tests.support.actors import admin
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tests.support.line_peer import LinePeer

# Short, so that the deadline's effect shows in seconds.
HOLDER_LOCK_TIMEOUT_S = 3.0

# A runner-like holder: keeps and serves; answers one JSON line per command.  "claim" sets
# up a claimed attempt; "beat" renews its lease and the runner row (as runner/lease.py and
# the daemon do) and says how long that took; "write X" audits X in its own turn.
_HOLDER = """
import json, sys, time
from pathlib import Path
from db import DbBusy, Store, connection
from tests.support.db_worker import _claimed_attempt
connection.keep_open(0.5, serve=True)
db = Path(sys.argv[1])
store = Store(db, lock_timeout_s=float(sys.argv[2]))
attempt = None
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    start = time.monotonic()
    answer = {}
    try:
        if command == "claim":
            attempt = _claimed_attempt(store, "r")[1]
        if command == "beat":
            answer["kept"] = store.heartbeat(attempt, "r", lease_s=60)
            store.runner_heartbeat("r", healthy=True, unhealthy_reason=None)
        if command == "write":
            store.audit("holder", arg, None, {})
    except DbBusy as exc:
        answer["busy"] = str(exc)
    answer["s"] = time.monotonic() - start
    holder = connection._holder_for(db)
    answer["con"] = id(holder.con) if holder.con is not None else None
    answer["serves"] = holder.server is not None
    print(json.dumps(answer), flush=True)
"""


class Holder(LinePeer):
    def __init__(self, db: Path) -> None:
        super().__init__(_HOLDER, str(db), str(HOLDER_LOCK_TIMEOUT_S))


@pytest.fixture
def holder(store: Store, db_path: Path) -> Iterator[Holder]:
    holding = Holder(db_path)
    try:
        assert holding.ask("claim")["serves"]
        yield holding
    finally:
        os.kill(holding.proc.pid, signal.SIGCONT)  # in case a test failed while it was stopped
        holding.close()


def _actions(store: Store) -> list[str]:
    """The audit actions other than the claim's set-up (those of the test itself), sorted."""
    return sorted(e.action for e in store.audit_entries(reader=admin(), limit=1000)
                  if e.actor in ("holder", "client", "crash", "raw"))


def test_a_client_stopped_mid_write_is_rolled_back_within_the_lock_timeout_while_heartbeats_go_on(
        store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("write first")
    client = subprocess.Popen([sys.executable, "-m", "tests.support.db_worker", "hang", str(db_path), "5"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "inside"
        os.kill(client.pid, signal.SIGSTOP)  # inside its transaction, holding the holder's turn
        beat = holder.ask("beat")
        assert beat["kept"] and "busy" not in beat  # the lease was renewed beside the stopped client
        assert beat["s"] < HOLDER_LOCK_TIMEOUT_S  # without waiting for the server's deadline
        write = holder.ask("write own")  # needs the turn: freed by the deadline, within the lock timeout
        assert "busy" not in write, write
        assert _actions(store) == ["first", "own"]  # the client's 5 rows ("crash") were rolled back
        assert write["con"] == before["con"]  # and the holder kept its connection throughout
    finally:
        os.kill(client.pid, signal.SIGCONT)
        client.kill()
        client.wait(timeout=30)
    assert holder.ask("beat")["kept"]


def test_a_stopped_holder_is_not_answering_within_seconds_and_serves_again_when_resumed(
        store: Store, db_path: Path, holder: Holder) -> None:
    before = holder.ask("write first")
    os.kill(holder.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(DbHolderNotAnswering, match=r"not answering|answered nothing"):
            store.audit("client", "while-stopped", None, {})
        assert time.monotonic() - start < 5  # not the client's whole lock timeout (10 s)
        with pytest.raises(DbHolderNotAnswering):
            store.list_runners()  # a read too
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    store.audit("client", "after", None, {})  # served again, by the same process
    assert _actions(store) == ["after", "first"]
    assert holder.ask("write again")["con"] == before["con"]  # no restart, the file never changed hands


def test_a_holder_whose_queue_of_connections_is_full_is_not_answering_instead_of_a_wait_for_ever(
    tmp_path: Path,
) -> None:
    """A stopped holder accepts nothing, and every client that gave up on it left its
    connection in the listen queue; once the queue is full, the next client is told so at
    once (a blocking connect would wait until the holder resumed)."""
    db_path = tmp_path / "bench.duckdb"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # binds and listens, never accepts
    listener.bind(serving.address_for(db_path))
    listener.listen(8)
    queued = _fill_listen_queue(db_path)
    outcome: list[BaseException | None] = []

    def one_access() -> None:
        try:
            serving.join(db_path, timeout_s=30)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=one_access, daemon=True)
    worker.start()
    worker.join(timeout=10)
    for sock in (*queued, listener):
        sock.close()
    assert not worker.is_alive(), "the access waited on a holder that takes no connections"
    assert isinstance(outcome[0], serving.HolderNotAnswering) and "queue" in str(outcome[0])


def _fill_listen_queue(db_path: Path) -> list[socket.socket]:
    """Connections into the holder's listen queue until it takes no more."""
    queued: list[socket.socket] = []
    while len(queued) < 1000:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(serving.address_for(db_path))
        except BlockingIOError:
            sock.close()
            return queued
        queued.append(sock)
    raise AssertionError("the listen queue never filled")


def test_the_app_says_the_runner_is_not_answering_and_recovers_when_it_resumes(app_env: Path) -> None:
    Store(app_env).migrate()
    holding = Holder(app_env)
    try:
        assert holding.ask("claim")["serves"]
        os.kill(holding.proc.pid, signal.SIGSTOP)
        try:
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
            assert not at.exception
            assert any("runner not answering" in w.value for w in at.warning), [w.value for w in at.warning]
        finally:
            os.kill(holding.proc.pid, signal.SIGCONT)
        at.run()  # the page's next run (its fragments rerun every few seconds)
        assert not at.exception
        assert not any("busy" in w.value.lower() for w in at.warning), [w.value for w in at.warning]
    finally:
        holding.close()


@pytest.mark.browser
def test_in_a_browser_the_runs_page_says_the_runner_is_not_answering_and_recovers_by_itself(
        env: dict[str, str], browser_page: Page, db_path: Path) -> None:
    """The runs page's live part reruns every 2 s: it shows the warning while the runner is
    stopped and its tables again once the runner resumes, with no reload and no restart."""
    env["BENCHDECK_LANGUAGE"] = "en"
    Store(db_path).migrate()
    holding = Holder(db_path)
    page = browser_page
    try:
        assert holding.ask("claim")["serves"]
        with running_app(env) as url:
            page.goto(f"{url}/runs")
            page.get_by_text("Runner hosts").wait_for(timeout=60_000)
            # A runner writes every few seconds (heartbeats); this one wrote last at its claim,
            # and a holder unused for SERVE_IDLE_S lets go (the app would then hold the file
            # itself, untouched by the stop).  A write now makes it the holder when stopped.
            assert holding.ask("write before-stop")["serves"]
            os.kill(holding.proc.pid, signal.SIGSTOP)
            try:
                page.get_by_text("Database busy (runner not answering)").wait_for(timeout=20_000)
                screenshot(page, "runs-runner-not-answering-en")
            finally:
                os.kill(holding.proc.pid, signal.SIGCONT)
            page.get_by_text("Database busy (runner not answering)").wait_for(state="detached",
                timeout=ACTION_TIMEOUT_MS)
            page.get_by_text("Runner hosts").wait_for(timeout=ACTION_TIMEOUT_MS)
        assert holding.ask("write after")["serves"]  # the same process serves on
    finally:
        holding.close()


def _frame(data: bytes) -> bytes:
    return struct.pack("!I", len(data)) + data


class _RunsCode:
    """What an attacker's pickle would do: run a command when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def _garbage(kind: str, marker: Path) -> bytes:
    return {
        "zero-length": _frame(b""),
        "unknown-class": _frame(pickle.dumps(_RunsCode(marker))),
        "wrong-tuple": _frame(pickle.dumps(("execute", 42))),
        "not-a-tuple": _frame(pickle.dumps(7)),
        "torn-pickle": _frame(pickle.dumps(("execute", "SELECT 1", None))[:-3]),
    }[kind]


def _raw_access(db_path: Path) -> socket.socket:
    """A raw client in the middle of a write access (the holder answered "ok")."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(serving.address_for(db_path))
    wire.send(sock, ("begin", 5.0))
    answer = wire.receive(sock)
    if answer == ("wait",):  # the holder's own access (its watcher's checkpoint) had the turn
        answer = wire.receive(sock)
    assert answer == ("ok",)
    return sock


def _replies_then_closes(sock: socket.socket) -> list[object]:
    replies = []
    try:
        while True:
            replies.append(wire.receive(sock))
    except ConnectionError:
        return replies


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Path, Holder]]:
    """One serving holder for the garbage frames (each test checks it serves on)."""
    db_path = tmp_path_factory.mktemp("served") / "bench.duckdb"
    store = Store(db_path, lock_timeout_s=10)
    store.migrate()
    holding = Holder(db_path)
    try:
        assert holding.ask("claim")["serves"]
        yield store, db_path, holding
    finally:
        holding.close()


@pytest.mark.parametrize("where", ["first-frame", "mid-access"])
@pytest.mark.parametrize("kind", ["zero-length", "unknown-class", "wrong-tuple", "not-a-tuple", "torn-pickle"])
def test_a_garbage_frame_ends_only_its_own_access(served: tuple[Store, Path, Holder], tmp_path: Path,
                                                  kind: str, where: str) -> None:
    store, db_path, holder = served
    before = holder.ask("write first")
    actions = _actions(store)
    marker = tmp_path / "code-ran"
    bystander = _raw_access(db_path) if where == "first-frame" else None  # another access, in the turn
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        if where == "mid-access":
            sock.close()
            sock = _raw_access(db_path)
            wire.send(sock, ("execute", "BEGIN TRANSACTION", None))
            assert wire.receive(sock)[0] == "rows"
            wire.send(sock, ("execute", q.INSERT_AUDIT, [utcnow(), "raw", "uncommitted", None, "{}"]))
            assert wire.receive(sock)[0] == "rows"
        else:
            sock.connect(serving.address_for(db_path))
        sock.sendall(_garbage(kind, marker))
        replies = _replies_then_closes(sock)
    assert [r[0] for r in replies] == ["error"] and "malformed frame" in str(replies[0][1])
    assert not marker.exists()  # the refused class was never called
    if bystander is not None:  # the access beside it goes on
        wire.send(bystander, ("execute", "SELECT count(*) FROM audit_log WHERE actor = 'holder'", None))
        assert wire.receive(bystander)[2] == [(len(actions),)]  # the holder's rows, all of them
        wire.send(bystander, ("end",))
        bystander.close()
    assert _actions(store) == actions  # nothing of the broken access stayed
    assert holder.ask("write after")["con"] == before["con"]  # the holder serves on, on its connection


def test_the_wire_carries_every_value_the_store_reads_and_writes() -> None:
    import duckdb

    with duckdb.connect() as con:
        row = con.execute("SELECT uuid(), INTERVAL 1 DAY, 1.5::DECIMAL(4, 2), [1, 2], {'a': 1}, MAP {'k': 1}, "
                          "now(), current_date, '12:00'::TIME, 'a'::BLOB, 2::HUGEINT, NULL, 1.5, true").fetchall()
        try:
            con.execute("SELECT * FROM nope")
        except duckdb.CatalogException as exc:
            error = exc
    assert wire.loads(pickle.dumps(row)) == row
    assert str(wire.loads(pickle.dumps(error))) == str(error)
    from domain.core.states import RunStatus
    assert wire.loads(pickle.dumps(wire.plain([RunStatus.QUEUED, (1, 2)]))) == ["queued", (1, 2)]
