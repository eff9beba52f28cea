"""The lock holder runs other processes' accesses on its own connection, over a local socket.

Why: DuckDB takes 13–15 ms to open a file, however small, and only one process may have
it open.  With the lock alone, a runner write that arrives while the app holds the file
waits for the app's access, its hand-back and then its own open; beside a polling app
that tail is what the issue's "writes p99 ≤ 50 ms" measures (``bench/db_lock.py``).  So
a process that opted in (``keep_open(..., serve=True)``: the runner daemon, which holds
the file all day) answers on a local socket while it holds the lock, and every other
process sends its statements there instead of waiting for the file: nobody opens, and a
write waits at most for the access in progress.

What stays true (``db/connection.py`` keeps the rest):

- One connection, the holder's, touches the file.  A remote access holds the holder's
  in-process turn from its first statement to its end, so a transaction sent here is as
  isolated as a local one, and a client that vanishes mid-access has its open
  transaction rolled back.
- Except a read (``join(..., reading=True)``: the Store's reads, ``db/store.py``
  ``_read``): it runs beside the turn, in a read-only transaction of its own on a cursor of
  the holder's connection.  DuckDB gives it one snapshot for the whole access (what was
  committed when it began) and refuses any write in it; its queries run while the holder
  writes and checkpoints (DuckDB leaves the GIL while it executes).  So a runner's write
  never waits for a page's read, which was the tail of the write latency
  (``bench/db_lock.py``).  The holder closes its connection only once the reads running on
  it have ended (``Server.stop``).
- The holder stops serving before it lets the lock go; a client that finds no server, or
  a server that has just let go, takes the lock itself as before (trying the socket again
  between its polls of the lock: db/connection.py ``_acquire``).
- Only a peer of the same user is spoken to, on either side (``SO_PEERCRED``): messages
  are pickles, so each side only trusts a process that could write the file anyway, and
  even then rebuilds only the types the protocol sends (``db/wire.py``).  The address is
  in Linux's abstract namespace (no file to leave behind or to collide on), derived from
  the DB file's resolved path.

What bounds it:

- A server-side deadline (``Server.idle_s``, the holder's lock timeout): a client that
  sends nothing for that long inside its access (stopped, hung) loses it; its open
  transaction is rolled back and the turn freed, so the holder's own writes wait at most
  that long behind it.
- The holder's urgent accesses (a lease's heartbeat) and its reads do not wait for a
  client's turn at all: they run beside it on a cursor of their own
  (``Server.client_has_turn``, ``enter_beside``; db/connection.py ``_take_turn``).
- A frame the protocol does not send (empty, torn, a refused type, a wrong shape) is
  answered with an error and ends that access only.
- A live holder answers a request at once ("ok", or "wait" for the turn); a client that
  hears nothing for ``ANSWER_S``, or finds the holder stopped (``/proc/<pid>/stat``,
  looked at every ``_LOOK_S`` while it waits), raises ``HolderNotAnswering`` (the app's "database busy (runner not
  answering)") instead of waiting its whole lock timeout, and its next access finds the
  holder again once it resumes.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

from db import wire

_ADDRESS_PREFIX = b"\0benchdeck-db-"
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# What a broken or garbled connection raises (ConnectionError and TimeoutError are OSErrors).
_WIRE_ERRORS = (OSError, wire.BadFrame, struct.error)
# A live holder answers a request at once ("ok", or "wait" for its turn): one that stays
# silent this long is frozen (stopped, or starved of every CPU), and the client says so
# instead of waiting its whole lock timeout.
ANSWER_S = 2.0
# How often a client waiting for a reply looks whether the holder was stopped: a stopped
# holder is named within this, not after ANSWER_S.  (The app's live parts rerun every 2 s:
# an access that failed only after ANSWER_S ran into the next rerun, and on a busy machine
# Streamlit dropped the run's unsent warning when the next run began.)
_LOOK_S = 0.1
# A client gives up on a server that took the connection but did not answer "begin"
# within its lock timeout plus this (a stopped or dying holder).
_ANSWER_GRACE_S = 1.0


class ServerBusy(TimeoutError):
    """The holder's turn stayed taken for the whole lock timeout."""


class ServerLost(ConnectionError):
    """The serving holder went away in the middle of an access (killed, or its connection
    to us broke): whether the access's last statement took effect is not known."""


class HolderNotAnswering(ServerLost):
    """The serving holder does not answer, or takes no more connections: it is stopped
    (SIGSTOP, a debugger) or frozen.  It still holds the file, so nobody else can have it meanwhile."""


def address_for(db_path: Path) -> bytes:
    digest = hashlib.sha256(str(db_path.resolve()).encode()).hexdigest()[:40]
    return _ADDRESS_PREFIX + digest.encode()


def _peer(sock: socket.socket) -> tuple[int, int]:
    """The connected peer's process id and user id (``SO_PEERCRED``)."""
    pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return pid, uid


def _is_stopped_or_gone(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T or t in ``/proc/<pid>/stat``) or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "tTZX"  # the state follows the command's closing parenthesis


def _portable_description(cursor: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]] | None:
    # DuckDB's type objects do not pickle; callers read the names (db/rows.py).
    if cursor.description is None:
        return None
    return [(d[0], str(d[1]), *d[2:]) for d in cursor.description]


def _portable_error(exc: Exception) -> Exception:
    try:
        wire.loads(pickle.dumps(exc))  # as the client will read it
        return exc
    except Exception:  # an exception that does not survive the trip arrives as its text
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class Server:
    """Serves while started: each client connection is one access, run in a thread of its
    own once it has the holder's turn (``mutex``).  ``connection()`` gives the holder's
    connection, or None once it no longer serves; ``done(broken)`` runs after each access,
    still in the turn (``broken``: DuckDB failed in a way that may have spoilt the
    connection, so the holder should close it).

    ``idle_s`` is the server's deadline: a client that sends nothing for that long (it was
    stopped, or hangs) has its access ended, its open transaction rolled back, and the turn
    freed.  ``client_has_turn`` says whether a client's access holds the turn now, so that
    the holder's own urgent accesses go beside it (:meth:`enter_beside`)."""

    def __init__(self, db_path: Path, mutex: threading.Lock,
                 connection: Callable[[], duckdb.DuckDBPyConnection | None],
                 done: Callable[[bool], None], touched: Callable[[], None] = lambda: None,
                 *, idle_s: float = 10.0) -> None:
        self.address = address_for(db_path)
        self.mutex = mutex
        self.connection = connection
        self.done = done
        self.touched = touched  # after a read that went well: the holder's connection was used
        self.idle_s = idle_s
        self.client_has_turn = False
        self._listener: socket.socket | None = None
        self._beside = _Beside()

    def start(self) -> bool:
        """Listen; False if the address is taken (another process serves this file)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.address)
        except OSError:
            listener.close()
            return False
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="db-serve", daemon=True).start()
        return True

    def stop(self) -> None:
        """Stop taking clients (those already queued for the turn are told to go), and
        return once nothing runs beside the turn on the holder's connection (reads, urgent
        accesses): the holder closes it next."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            except OSError:
                pass
            listener.close()
        self._beside.close_and_wait()

    def enter_beside(self) -> bool:
        """Count an access of the holder's own that runs beside the turn (the holder keeps
        its connection open until it leaves); False once the server stops."""
        return self._beside.enter()

    def leave_beside(self) -> None:
        self._beside.leave()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="db-serve-access", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(self.idle_s)  # the server's deadline, on every frame of the access
            try:
                if _peer(client)[1] != os.getuid():
                    return
                kind, timeout_s = wire.request(wire.receive(client))
            except wire.BadFrame as exc:
                _send_quietly(client, ("error", ValueError(f"malformed frame: {exc}")))
                return
            except _WIRE_ERRORS:
                return
            if kind == "read":
                self._serve_read(client)
            else:
                self._serve_write(client, timeout_s)

    def _serve_write(self, client: socket.socket, timeout_s: float) -> None:
        """A read-write access, in the turn: "wait" first if the turn is taken, so that the
        client knows we are alive (``ANSWER_S``)."""
        if not self.mutex.acquire(blocking=False):
            _send_quietly(client, ("wait",))
            if not self.mutex.acquire(timeout=timeout_s):
                _send_quietly(client, ("busy",))
                return
        self.client_has_turn = True
        try:
            broken = self._access(client, read_only=False)
            if broken is not None:
                self.done(broken)
        finally:
            self.client_has_turn = False
            self.mutex.release()

    def _serve_read(self, client: socket.socket) -> None:
        """A read access, beside the turn (module docstring); "gone" once the holder stops."""
        if not self._beside.enter():
            _send_quietly(client, ("gone",))
            return
        try:
            broken = self._access(client, read_only=True)
        finally:
            self._beside.leave()
        if broken:  # as after any access that spoilt the connection, in the turn: it is closed
            with self.mutex:
                self.done(True)
        elif broken is not None:
            self.touched()

    def _access(self, client: socket.socket, *, read_only: bool) -> bool | None:
        """The access on the holder's connection (:meth:`_run_access`), or "gone" and None
        when the holder no longer has one."""
        con = self.connection()
        if con is None:
            _send_quietly(client, ("gone",))
            return None
        return self._run_access(client, con, read_only=read_only)

    def _run_access(self, client: socket.socket, con: duckdb.DuckDBPyConnection, *, read_only: bool = False) -> bool:
        """Answer "ok", then run the client's statements until it ends the access.  Return
        whether DuckDB may have spoilt the connection.  ``read_only``: all of them in one
        read-only transaction, rolled back at the end (it can hold nothing else).  A frame
        the protocol does not send is answered with an error, and ends this access only;
        so does a client silent for ``idle_s``."""
        cursor = con.cursor()
        broken = ended = False
        try:
            if read_only:
                cursor.execute("BEGIN TRANSACTION READ ONLY")
            wire.send(client, ("ok",))
            while True:
                kind, sql, parameters = wire.statement(wire.receive(client))
                if kind == "end":
                    ended = True
                    break
                reply, spoilt = _execute(cursor, kind, sql, parameters)
                broken = broken or spoilt
                wire.send(client, reply)
        except wire.BadFrame as exc:
            _send_quietly(client, ("error", ValueError(f"malformed frame: {exc}")))
        except _WIRE_ERRORS:
            pass  # the client went away or stayed silent mid-access: what it left open is rolled back below
        finally:
            if read_only or (not ended and not broken):
                _roll_back_quietly(cursor)
            cursor.close()
        return broken


def _execute(cursor: duckdb.DuckDBPyConnection, kind: str, sql: str, parameters: Any) -> tuple[tuple[Any, ...], bool]:
    try:
        if kind == "executemany":
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        description = _portable_description(cursor)
        rows = cursor.fetchall() if description is not None else []
        return ("rows", description, rows), False
    except Exception as exc:  # sent back whole: the client raises it where its statement was
        spoilt = isinstance(exc, duckdb.FatalException | duckdb.InternalException)
        return ("error", _portable_error(exc)), spoilt


def _roll_back_quietly(cursor: duckdb.DuckDBPyConnection) -> None:
    try:
        cursor.execute("ROLLBACK")
    except duckdb.Error:
        pass  # no transaction was open


def _send_quietly(client: socket.socket, message: object) -> None:
    try:
        wire.send(client, message)
    except OSError:
        pass


class _Beside:
    """The accesses running beside the turn on the holder's connection, counted so that
    the holder closes it only after the last one; once closed, none begins."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._closed = False

    def enter(self) -> bool:
        with self._changed:
            if self._closed:
                return False
            self._running += 1
            return True

    def leave(self) -> None:
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    def close_and_wait(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.wait_for(lambda: self._running == 0)


class _Watch:
    """A client's wait for the holder's answer: it gives up when the holder is stopped or
    gone, or (``deadline``) once the deadline passes, raising ``late``."""

    def __init__(self, pid: int, deadline: float | None = None, late: Exception | None = None) -> None:
        self.pid = pid
        self.deadline = deadline
        self.late = late or TimeoutError("no answer from the process serving the database")

    def __call__(self) -> None:
        if _is_stopped_or_gone(self.pid):
            raise HolderNotAnswering(f"the process serving the database (pid {self.pid}) is not answering")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise self.late


def _receive(sock: socket.socket, watch: _Watch) -> Any:
    """The next frame, looking every ``_LOOK_S`` whether to give up (``watch``); sends keep
    the longer ``ANSWER_S`` (a large frame may fill the holder's buffer for a while)."""
    sock.settimeout(_LOOK_S)
    try:
        return wire.receive(sock, watch)
    finally:
        sock.settimeout(ANSWER_S)


class RemoteCursor:
    """What Store code uses of a DuckDB cursor (execute, executemany, fetchone, fetchall,
    description), run by the serving holder.  Each statement's rows come back whole.  A
    statement may run as long as it would locally, unless the holder is stopped meanwhile
    (``HolderNotAnswering``)."""

    def __init__(self, sock: socket.socket, holder_pid: int = 0) -> None:
        self._sock = sock
        self._watch = _Watch(holder_pid)
        self._rows: list[tuple[Any, ...]] = []
        self._next = 0
        self.description: list[tuple[Any, ...]] | None = None

    def execute(self, sql: str, parameters: object = None) -> RemoteCursor:
        return self._run(("execute", sql, wire.plain(parameters)))

    def executemany(self, sql: str, parameters: Iterable[object]) -> RemoteCursor:
        return self._run(("executemany", sql, wire.plain(list(parameters))))

    def _run(self, message: tuple[Any, ...]) -> RemoteCursor:
        try:
            wire.send(self._sock, message)
            reply = _receive(self._sock, self._watch)
        except HolderNotAnswering:
            raise
        except (OSError, struct.error) as exc:
            raise ServerLost(f"the process serving the database went away during this access: {exc}") from exc
        if reply[0] == "error":
            raise reply[1]
        _kind, self.description, self._rows = reply
        self._next = 0
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._next = self._rows[self._next:], len(self._rows)
        return rows


def join(db_path: Path, *, timeout_s: float, reading: bool = False) -> RemoteCursor | None:
    """Begin an access at the serving holder of ``db_path``: a cursor on its connection
    once the holder gave us its turn, or None when nobody serves (or the holder has just
    stopped).  Raises ``ServerBusy`` when the turn stayed taken for ``timeout_s``, and
    ``HolderNotAnswering`` when the holder took the connection but answers nothing within
    ``ANSWER_S`` (or was stopped while we waited for the turn).  ``reading``: an access
    that only reads, run beside the turn (module docstring)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Set before connecting: a blocking connect to a holder that accepts nothing (stopped)
    # waits for ever once the listen queue is full of earlier clients' connections.
    sock.settimeout(ANSWER_S)
    try:
        _connect(sock, db_path)
        pid, uid = _peer(sock)
        if uid != os.getuid():
            raise ConnectionError("the DB's address is held by another user")
        answer = _ask(sock, pid, ("read" if reading else "begin", timeout_s), timeout_s)
    except HolderNotAnswering:
        sock.close()
        raise
    except _WIRE_ERRORS:
        sock.close()
        return None
    if answer != "ok":
        sock.close()
        if answer == "busy":
            raise ServerBusy(f"database busy for {timeout_s:.1f}s (its holder's turn)")
        return None
    return RemoteCursor(sock, pid)


def _connect(sock: socket.socket, db_path: Path) -> None:
    """Connect to the holder; a full listen queue (the holder has accepted nothing for a
    long time: stopped or frozen) is ``HolderNotAnswering``, not "nobody serves"."""
    try:
        sock.connect(address_for(db_path))
    except BlockingIOError:
        raise HolderNotAnswering("the process serving the database takes no connections "
                                 "(its queue of waiting clients is full)") from None


def _ask(sock: socket.socket, pid: int, request: tuple[str, float], timeout_s: float) -> str:
    """Send the request; its answer ("ok", "busy", "gone").  The first answer comes at once
    from a live holder; after "wait", the next within the turn's timeout."""
    wire.send(sock, request)
    silent = HolderNotAnswering(f"the process serving the database (pid {pid}) answered nothing for {ANSWER_S:.0f}s")
    answer = _receive(sock, _Watch(pid, time.monotonic() + ANSWER_S, silent))[0]
    if answer != "wait":
        return str(answer)
    return str(_receive(sock, _Watch(pid, time.monotonic() + timeout_s + _ANSWER_GRACE_S))[0])


def end(cursor: RemoteCursor) -> None:
    """End the access (the holder takes its turn back) and close the connection."""
    _send_quietly(cursor._sock, ("end",))  # if the holder went away, its side has ended the access already
    cursor._sock.close()
