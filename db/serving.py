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
  are pickles, so each side only trusts a process that could write the file anyway.  The
  address is in Linux's abstract namespace (no file to leave behind or to collide on),
  derived from the DB file's resolved path.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

_ADDRESS_PREFIX = b"\0benchdeck-db-"
_LENGTH = struct.Struct("!I")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# What a broken or garbled connection raises (ConnectionError is an OSError).
_WIRE_ERRORS = (OSError, pickle.UnpicklingError, struct.error)
# A client gives up on a server that took the connection but did not answer "begin"
# within its lock timeout plus this (a stopped or dying holder).
_ANSWER_GRACE_S = 1.0


class ServerBusy(TimeoutError):
    """The holder's turn stayed taken for the whole lock timeout."""


class ServerLost(ConnectionError):
    """The serving holder went away in the middle of an access (killed, or its connection
    to us broke): whether the access's last statement took effect is not known."""


def address_for(db_path: Path) -> bytes:
    digest = hashlib.sha256(str(db_path.resolve()).encode()).hexdigest()[:40]
    return _ADDRESS_PREFIX + digest.encode()


def _peer_is_same_user(sock: socket.socket) -> bool:
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid == os.getuid()


def _send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks += chunk
    return bytes(chunks)


def _receive(sock: socket.socket) -> Any:
    (size,) = _LENGTH.unpack(_receive_exactly(sock, _LENGTH.size))
    return pickle.loads(_receive_exactly(sock, size))  # noqa: S301 - a same-user peer only (SO_PEERCRED)


def _portable_description(cursor: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]] | None:
    # DuckDB's type objects do not pickle; callers read the names (db/rows.py).
    if cursor.description is None:
        return None
    return [(d[0], str(d[1]), *d[2:]) for d in cursor.description]


def _portable_error(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
        return exc
    except Exception:  # an exception that does not survive pickling arrives as its text
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class Server:
    """Serves while started: each client connection is one access, run in a thread of its
    own once it has the holder's turn (``mutex``).  ``connection()`` gives the holder's
    connection, or None once it no longer serves; ``done(broken)`` runs after each access,
    still in the turn (``broken``: DuckDB failed in a way that may have spoilt the
    connection, so the holder should close it)."""

    def __init__(self, db_path: Path, mutex: threading.Lock,
                 connection: Callable[[], duckdb.DuckDBPyConnection | None],
                 done: Callable[[bool], None], touched: Callable[[], None] = lambda: None) -> None:
        self.address = address_for(db_path)
        self.mutex = mutex
        self.connection = connection
        self.done = done
        self.touched = touched  # after a read that went well: the holder's connection was used
        self._listener: socket.socket | None = None
        self._reads = _Reads()

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
        return once no read runs on the holder's connection: the holder closes it next."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            except OSError:
                pass
            listener.close()
        self._reads.close_and_wait()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="db-serve-access", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            try:
                if not _peer_is_same_user(client):
                    return
                kind, asked_s = _receive(client)
                timeout_s = max(0.0, float(asked_s))  # a negative timeout would wait for ever
            except (*_WIRE_ERRORS, ValueError, TypeError):
                return
            if kind == "read":
                self._serve_read(client)
                return
            if not self.mutex.acquire(timeout=timeout_s):
                _send_quietly(client, ("busy",))
                return
            try:
                broken = self._access(client, read_only=False)
                if broken is not None:
                    self.done(broken)
            finally:
                self.mutex.release()

    def _serve_read(self, client: socket.socket) -> None:
        """A read access, beside the turn (module docstring); "gone" once the holder stops."""
        if not self._reads.enter():
            _send_quietly(client, ("gone",))
            return
        try:
            broken = self._access(client, read_only=True)
        finally:
            self._reads.leave()
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
        read-only transaction, rolled back at the end (it can hold nothing else)."""
        cursor = con.cursor()
        broken = ended = False
        try:
            if read_only:
                cursor.execute("BEGIN TRANSACTION READ ONLY")
            _send(client, ("ok",))
            while True:
                message = _receive(client)
                if message[0] == "end":
                    ended = True
                    break
                reply, spoilt = _execute(cursor, message)
                broken = broken or spoilt
                _send(client, reply)
        except _WIRE_ERRORS:
            pass  # the client went away mid-access: what it left open is rolled back below
        finally:
            if read_only or (not ended and not broken):
                _roll_back_quietly(cursor)
            cursor.close()
        return broken


def _execute(cursor: duckdb.DuckDBPyConnection, message: tuple[Any, ...]) -> tuple[tuple[Any, ...], bool]:
    kind, sql, parameters = message
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
        _send(client, message)
    except OSError:
        pass


class _Reads:
    """The reads running on the holder's connection, counted so that the holder closes it
    only after the last one; once closed, no read begins."""

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


class RemoteCursor:
    """What Store code uses of a DuckDB cursor (execute, executemany, fetchone, fetchall,
    description), run by the serving holder.  Each statement's rows come back whole."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._rows: list[tuple[Any, ...]] = []
        self._next = 0
        self.description: list[tuple[Any, ...]] | None = None

    def execute(self, sql: str, parameters: object = None) -> RemoteCursor:
        return self._run(("execute", sql, parameters))

    def executemany(self, sql: str, parameters: Iterable[object]) -> RemoteCursor:
        return self._run(("executemany", sql, list(parameters)))

    def _run(self, message: tuple[Any, ...]) -> RemoteCursor:
        try:
            _send(self._sock, message)
            reply = _receive(self._sock)
        except _WIRE_ERRORS as exc:
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


def join(db_path: Path, *, timeout_s: float, reading: bool = False) -> socket.socket | None:
    """Begin an access at the serving holder of ``db_path``: the connected socket once the
    holder gave us its turn, or None when nobody serves (or the holder has just stopped).
    Raises ``ServerBusy`` when the turn stayed taken for ``timeout_s``.  ``reading``: an
    access that only reads, run beside the turn (module docstring)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address_for(db_path))
        if not _peer_is_same_user(sock):
            raise ConnectionError("the DB's address is held by another user")
        sock.settimeout(timeout_s + _ANSWER_GRACE_S)
        _send(sock, ("read" if reading else "begin", timeout_s))
        answer = _receive(sock)[0]
    except _WIRE_ERRORS:
        sock.close()
        return None
    if answer != "ok":
        sock.close()
        if answer == "busy":
            raise ServerBusy(f"database busy for {timeout_s:.1f}s (its holder's turn)")
        return None
    sock.settimeout(None)  # a statement may run as long as it would locally
    return sock


def end(sock: socket.socket) -> None:
    """End the access (the holder takes its turn back) and close the connection."""
    _send_quietly(sock, ("end",))  # if the holder went away, its side has ended the access already
    sock.close()
