"""Short, locked DuckDB access.

DuckDB lets one process hold a read-write handle *or* many hold read-only ones, never
both, and it has no busy timeout: a second process fails at once with "Could not set
lock on file".  The app and the runner are separate processes, so every access here is
short — under one cross-process file lock, on a connection nobody keeps while waiting on
anything else — and its plain form is open, do, close (the two forms below keep the
connection).  A lock wait past ``lock_timeout_s`` raises ``DbBusy``, the only error the
UI turns into "busy, retrying" (``DbHolderNotAnswering``, a ``DbBusy``: the runner that
holds the file answers nothing); anything else surfaces as itself.

**Keeping the connection between accesses** (opt-in per process: ``keep_open(idle_s)``;
the app and the runner call it).  Opening and closing DuckDB costs tens of milliseconds,
and a page makes several accesses in a row.  A process that opted in keeps the file lock
*and* its connection after an access, for at most ``idle_s`` without use, and gives both
up within ``_WATCH_S`` as soon as another process waits for the lock (every waiter keeps
``<db>.waiting`` fresh while it polls; a waiting writer also keeps ``<db>.writer-waiting``
fresh, as before); a serving holder (below), once the waiter has not been served for
``_SERVED_WAITER_GRACE_S``.  What stays true:

- Only the lock holder has the file open, as before, so a kept connection never reads a
  stale state: nobody else can have written while it was kept, and after a hand-over the
  next access opens the file again.
- A kept connection never holds uncommitted work, and its commits are checkpointed
  (what a close does) by its watcher as soon as it has been unused for
  ``_CHECKPOINT_IDLE_S``, at the latest ``_CHECKPOINT_MAX_DELAY_S`` after the first of
  them, not inside the commit's access: the checkpoint (its writes and fsync) was the
  tail of a runner's write latency, and a burst of commits shares one.  A close, and so
  any hand-over, checkpoints too.  So a WAL found under the lock means a process died
  inside an access or within a fraction of a second after one (``db/recovery.py``), and a
  file copy under the lock is complete (``db/backup.py``: the holder lets go, which
  checkpoints, before anyone else takes the lock).
- Within one process, accesses still run one at a time (``_Holder.mutex``), as the file
  lock made them before: no transaction ever meets another in DuckDB.  The one exception
  is a serving holder's reads for other processes (``connect(..., reading=True)``), each
  in a read-only transaction of its own, which meets no write (db/serving.py).
- A process that never calls ``keep_open`` (tests, tools, the CLI) behaves exactly as
  before: open, do, close.

**Serving the others** (``keep_open(idle_s, serve=True)``: the runner daemon).  While it
holds the lock, such a process also runs other processes' accesses on its connection,
over a local socket (``db/serving.py``), and keeps the file for ``SERVE_IDLE_S`` unused
instead of ``idle_s``.  Every process tries that socket before it waits for the lock and
again between its polls of the lock, so beside a serving runner nobody opens the file and
nobody waits for a hand-over, even a process that began to wait before the runner took the
file.  A process waiting for the lock itself (a read-only open, a backup, a tool) still
makes it let go, ``_SERVED_WAITER_GRACE_S`` later, and it stops serving first.
"""

from __future__ import annotations

import atexit
import functools
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import duckdb
import filelock

from db import serving

# Polls of the file lock are short and jittered so that a UI reader and a runner writer
# that collide do not retry in lock-step.  Short, because a process keeping its connection
# lets go within _WATCH_S of a waiter's mark and the waiter should take over at once.
_POLL_MIN_S = 0.002
_POLL_MAX_S = 0.01
# A waiter's marker older than this is stale (its process died while waiting).
_WRITER_MARK_FRESH_S = 0.5
# How often a process keeping its connection looks for a waiter (a stat of two files).
_WATCH_S = 0.005
# The same for a serving holder, which keeps the file all day: the waiters it can serve
# join through its socket without it looking, and the others (a backup, a read-only open)
# wait _SERVED_WAITER_GRACE_S anyway.  Looking every 5 ms cost it 3 % of a core.
_SERVING_WATCH_S = 0.05


class DbBusy(RuntimeError):
    """The database stayed locked by another process for longer than the lock timeout."""


class DbHolderNotAnswering(DbBusy):
    """The process that holds the file and serves it (the runner daemon) took our access but
    answers nothing: it is stopped or frozen.  The UI says so; the next access finds out
    whether it is back."""


class DbUnusable(RuntimeError):
    """DuckDB refused the database file itself: a WAL that will not replay, a damaged file.
    Its message is DuckDB's own."""


def lock_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def writer_waiting_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".writer-waiting")


def waiting_path(db_path: Path) -> Path:
    """Kept fresh by every process waiting for the lock: a process keeping its connection
    lets go when it sees it."""
    return db_path.with_name(db_path.name + ".waiting")


def _writer_is_waiting(marker: Path) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < _WRITER_MARK_FRESH_S
    except FileNotFoundError:
        return False


def _someone_waiting(db_path: Path) -> bool:
    return _writer_is_waiting(waiting_path(db_path)) or _writer_is_waiting(writer_waiting_path(db_path))


def _acquire(
    lock: filelock.FileLock, timeout_s: float, *, marker: Path, writer: bool, waiting: Path | None = None,
    join: Callable[[], serving.RemoteCursor | None] | None = None,
) -> serving.RemoteCursor | None:
    """Poll the lock with jitter until ``timeout_s``; None once we hold it.  The file lock
    is not fair: readers polling in a loop can starve a writer.  So a waiting writer keeps a
    marker file fresh, and readers let a fresh marker's writer go first (within their own
    timeout).  Any waiter also keeps ``waiting`` fresh, so that a process keeping its
    connection lets go.  A process that finds ``waiting`` fresh before it touched it
    (someone else waits, maybe since before our last access) skips its first try: a
    process in a loop of accesses would otherwise take the lock back the instant it let
    go, and starve the others.

    ``join``: tried before each poll, an access at a serving holder (``db/serving.py``);
    its cursor is returned as soon as one is given, without the lock: a holder that starts
    serving while we wait serves us, instead of letting go for us
    (``_Holder.someone_waiting``).  The marks are shared by every waiter: we remove them
    only if we made them (a client served at once has not; the marks are then another
    waiter's, say a backup's, which the holder must still see)."""
    deadline = time.monotonic() + timeout_s
    polite = waiting is not None and _writer_is_waiting(waiting)
    marked = False
    try:
        while True:
            if join is not None and (joined := join()) is not None:
                return joined
            marked = True
            if writer:
                marker.touch()
            if waiting is not None:
                waiting.touch()
            if polite:
                polite = False
            elif writer or not _writer_is_waiting(marker):
                try:
                    lock.acquire(timeout=0)
                    return None
                except filelock.Timeout:
                    pass
            if time.monotonic() >= deadline:
                raise DbBusy(f"database busy for {timeout_s:.1f}s (lock {lock.lock_file})") from None
            time.sleep(random.uniform(_POLL_MIN_S, _POLL_MAX_S))  # noqa: S311 - jitter, not crypto
    finally:
        if marked and writer:
            marker.unlink(missing_ok=True)
        if marked and waiting is not None:
            waiting.unlink(missing_ok=True)


def _is_foreign_file_lock(exc: duckdb.IOException) -> bool:
    # A process that ignores our file lock (an ad-hoc `duckdb` shell, say) holds DuckDB's own lock.
    return "Could not set lock" in str(exc)


# What the app and the runner keep: longer than a page's burst of accesses, short enough
# that a program ignoring the waiting marker (a raw FileLock, a `duckdb` shell) waits little.
KEEP_IDLE_S = 0.5
# Seconds a process keeps its connection unused (0: close after every access).  Set once
# per process by keep_open(); module state because the lock and the file are per process.
_keep_idle_s = 0.0
# Whether this process serves others' accesses while it holds the lock (keep_open).
_serve = False
# How long a serving holder lets a waiter's mark stay fresh before it lets go for it
# (_Holder.someone_waiting): a process that can be served joins it within a poll of the lock
# (_acquire) and ends its wait; one that needs the file itself (a backup) waits this longer.
_SERVED_WAITER_GRACE_S = 0.25
# A waiter's marks may be missing for a moment while it still waits (another waiter that
# had marked them was served and removed them; a waiter re-marks each poll, within 10 ms):
# only a longer time without seeing one ends a waiter's grace, and one seen after that is
# a new waiter with a grace of its own.
_WAITER_GONE_S = 0.1
# How long a serving holder keeps the file unused.  Longer than the runner's quietest
# stretch between writes (a point a second, heartbeats, the queue poll), so that beside
# a busy app the file does not change hands every second.
SERVE_IDLE_S = 30.0


def keep_open(idle_s: float, *, serve: bool = False) -> None:
    """From now on, this process keeps its connection (and the lock) between accesses for
    at most ``idle_s`` unused, and lets go at once when another process waits (serving,
    once the waiter has not been served for ``_SERVED_WAITER_GRACE_S``).  0: close
    after every access, the default.  Call it in a long-lived process (the app, the
    runner), not in one that hands the file to raw ``duckdb`` right after an access.
    ``serve``: also run other processes' accesses while holding (module docstring)."""
    global _keep_idle_s, _serve
    _keep_idle_s = idle_s
    _serve = serve and idle_s > 0
    if idle_s <= 0:
        release_kept()


# Called after each write access this process served for another (on_served_write).
_served_write_listeners: list[Callable[[], None]] = []


def on_served_write(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` (quick, non-blocking: it runs in the serving thread, in the turn)
    after each write access this process serves for another: a run queued or cancelled
    through a serving runner reaches its claim loop at once instead of at its next poll.
    Returns the function that removes the listener."""
    _served_write_listeners.append(listener)
    return lambda: _served_write_listeners.remove(listener)


class _Holder:
    """This process's access to one DB file: the in-process turn (``mutex``), the file
    lock and, between accesses while kept, the open connection."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.pid = os.getpid()
        self.mutex = threading.Lock()
        # Not per thread: the watcher thread may release what an access thread acquired.
        self.lock = filelock.FileLock(str(lock_path_for(db_path)), thread_local=False)
        self.con: duckdb.DuckDBPyConnection | None = None
        self.last_used = 0.0
        self.watching = False
        self.server: serving.Server | None = None
        # Since when, and when last, a waiter's mark was seen fresh (someone_waiting).
        self.waiter_since: float | None = None
        self.waiter_seen = 0.0
        # Commits not checkpointed yet, and since when: the watcher checkpoints them
        # (_checkpoint_is_due; the module's docstring).
        self.checkpoint_due = False
        self.checkpoint_due_since = 0.0

    def committed(self) -> None:
        """A commit was made on the kept connection: the watcher checkpoints it (the caller
        has ``mutex``)."""
        if not self.checkpoint_due:
            self.checkpoint_due, self.checkpoint_due_since = True, time.monotonic()

    def _checkpoint_is_due(self) -> bool:
        now = time.monotonic()
        return self.con is not None and self.checkpoint_due and (
            now - self.last_used >= _CHECKPOINT_IDLE_S or now - self.checkpoint_due_since >= _CHECKPOINT_MAX_DELAY_S)

    def someone_waiting(self) -> bool:
        """Whether another process waits for the file, so that we let go (the caller has
        ``mutex``).  Serving, we give a waiter ``_SERVED_WAITER_GRACE_S`` to be served
        instead (``_acquire`` tries our socket between its polls): beside an app whose
        accesses were waiting for the lock when we began to serve, letting go for them
        made the file change hands after each of our writes, each costing an open."""
        now = time.monotonic()
        if now - self.waiter_seen > _WAITER_GONE_S:
            self.waiter_since = None  # none seen for a while: a waiter now is a new one
        if not _someone_waiting(self.db_path):
            return False
        self.waiter_seen = now
        if self.waiter_since is None:
            self.waiter_since = now
        return self.server is None or now - self.waiter_since >= _SERVED_WAITER_GRACE_S

    def serve(self, idle_s: float) -> None:
        """Start serving others on the connection just opened (the caller has ``mutex``);
        a client silent for ``idle_s`` inside its access loses it (db/serving.py)."""
        server = serving.Server(self.db_path, self.mutex, lambda: self._served_connection(server),
                                self._after_served_access, touched=self._after_served_read, idle_s=idle_s)
        if server.start():
            self.server = server
            self.waiter_since = None  # a waiter's grace counts from when we serve

    def _served_connection(self, server: serving.Server) -> duckdb.DuckDBPyConnection | None:
        return self.con if self.server is server else None

    def _after_served_read(self) -> None:
        """A read served beside the turn used the connection: it counts as use for the idle
        limit.  Only the time is set (the watcher, running while the connection is kept,
        lets go when someone waits)."""
        self.last_used = time.monotonic()

    def _after_served_access(self, broken: bool) -> None:
        if broken or self.someone_waiting():
            self.let_go()
        else:
            self.committed()  # a served access may have committed (we cannot tell)
            self.keep()
        if not broken:
            for listener in list(_served_write_listeners):
                listener()

    def let_go(self) -> None:
        """Stop serving, close the connection and release the lock (the caller has ``mutex``)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.con is None:
            return
        try:
            self.con.close()  # which checkpoints, the reads on it having ended (Server.stop)
        finally:
            self.con = None
            self.checkpoint_due = False
            self.waiter_since = None
            self.lock.release()

    def keep(self) -> None:
        """After an access: keep the connection, and watch for a waiter or the idle limit."""
        self.last_used = time.monotonic()
        if not self.watching:
            self.watching = True
            threading.Thread(target=self._watch, name=f"db-keep:{self.db_path.name}", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(_WATCH_S if self.server is None else _SERVING_WATCH_S)
            if not self.mutex.acquire(blocking=False):
                continue  # an access is running; it looks for waiters itself when it ends
            try:
                idle_limit_s = _keep_idle_s if self.server is None else max(_keep_idle_s, SERVE_IDLE_S)
                if self.con is not None and (
                    self.someone_waiting() or time.monotonic() - self.last_used >= idle_limit_s
                ):
                    self._let_go_quietly()
                if self._checkpoint_is_due():
                    self._checkpoint()
                if self.con is None:
                    self.watching = False
                    return
            finally:
                self.mutex.release()

    def _checkpoint(self) -> None:
        """Checkpoint the commits made since the last one (the caller has ``mutex``); held
        off by a read the holder serves, it is tried again on the next watch
        (``_try_checkpoint``).  Should DuckDB fail it for another reason (a full disk), the
        connection is not trusted, as after a failed access: it is closed, and the watcher
        lives on (it would otherwise die with the error, and nobody would let go for a
        waiting process while the connection sits unused)."""
        assert self.con is not None  # noqa: S101 - the caller checked
        try:
            self.checkpoint_due = not _try_checkpoint(self.con)
        except duckdb.Error:
            self._let_go_quietly()

    def _let_go_quietly(self) -> None:
        """``let_go`` in the watcher: a close that fails (its checkpoint, on a full disk)
        still closes and releases (let_go's ``finally``), and must not end the watcher,
        which alone checkpoints kept commits and lets go for waiters."""
        try:
            self.let_go()
        except duckdb.Error:
            pass  # a WAL left is db/recovery.py's


_holders: dict[Path, _Holder] = {}
_holders_guard = threading.Lock()


def _holder_for(db_path: Path) -> _Holder:
    key = db_path.resolve()
    with _holders_guard:
        holder = _holders.get(key)
        if holder is None or holder.pid != os.getpid():  # a forked child starts afresh
            holder = _holders[key] = _Holder(db_path)
        return holder


@atexit.register
def release_kept() -> None:
    """Close every connection this process keeps (at exit, and when keeping is switched off)."""
    with _holders_guard:
        holders = [h for h in _holders.values() if h.pid == os.getpid()]
    for holder in holders:
        if holder.mutex.acquire(timeout=5):
            try:
                holder.let_go()
            finally:
                holder.mutex.release()


@contextmanager
def connect(
    db_path: Path, *, lock_timeout_s: float, read_only: bool = False, writer: bool = False, reading: bool = False,
    urgent: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a connection for the ``with`` block, under the cross-process lock (kept
    afterwards if ``keep_open`` is on, see the module's docstring).  ``writer=True``
    (transactions) gets precedence over readers waiting at the same time.  ``reading``:
    the block only reads; a serving holder runs it beside its own accesses, in one
    read-only snapshot (db/serving.py), and a write in it fails.  ``urgent`` (a lease's
    heartbeat), and any ``reading`` access: in a serving holder whose turn a client's
    access holds, the block runs beside it on a cursor of its own instead of waiting
    (``_beside_a_client``)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + lock_timeout_s
    holder = _holder_for(db_path)
    beside = _take_turn(holder, deadline, lock_timeout_s, may_go_beside=urgent or reading)
    if beside is not None:
        yield from _use_beside(holder, beside, reading=reading)
        return
    try:
        if holder.con is not None and (read_only or holder.someone_waiting()):
            holder.let_go()  # a waiting process goes first; a read-only open needs its own handle
        if holder.con is None:
            # A serving holder runs the access (tried before each poll of the lock, so also
            # one that begins to serve while we wait), or we take the lock ourselves.
            join = None if read_only else functools.partial(_join_server, db_path, deadline, reading=reading)
            remote = _acquire(holder.lock, max(0.0, deadline - time.monotonic()), marker=writer_waiting_path(db_path),
                              writer=writer, waiting=waiting_path(db_path), join=join)
            if remote is not None:
                # Duck-typed: the serving holder runs what Store code asks of a cursor.
                yield from cast(Iterator[duckdb.DuckDBPyConnection], _use_remote(remote))
                return
            try:
                holder.con = _open(db_path, lock_timeout_s=max(0.0, deadline - time.monotonic()),
                                   read_only=read_only)
            except BaseException:
                holder.lock.release()
                raise
            if _serve and not read_only:
                holder.serve(lock_timeout_s)
        yield from _use(holder, holder.con, keep=_keep_idle_s > 0 and not read_only)
    finally:
        holder.mutex.release()


# How often an access that may go beside a client looks whether a client holds the turn.
_BESIDE_POLL_S = 0.005


def _take_turn(holder: _Holder, deadline: float, timeout_s: float, *, may_go_beside: bool) -> serving.Server | None:
    """Take this process's turn (``holder.mutex``) before ``deadline``: None once we have
    it.  ``may_go_beside``: or the serving holder whose turn a client's access holds, once
    counted as running beside it (``Server.enter_beside``): a stopped client holds the turn
    until the server's deadline, and a heartbeat must not wait that long."""
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        if holder.mutex.acquire(timeout=min(remaining, _BESIDE_POLL_S) if may_go_beside else remaining):
            return None
        server = holder.server
        if may_go_beside and server is not None and server.client_has_turn and server.enter_beside():
            return server
        if time.monotonic() >= deadline:
            raise DbBusy(f"database busy for {timeout_s:.1f}s (another access of this process)")


def _use_beside(holder: _Holder, server: serving.Server, *, reading: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """One access beside a client's, on a cursor of the holder's connection (which stays
    open until we leave: ``Server.stop`` waits).  DuckDB keeps the two transactions apart;
    should both change one row, the later one fails with DuckDB's conflict error, and the
    caller tries again (a heartbeat, at its next beat).  A read runs in one read-only
    snapshot, as a served read does."""
    try:
        con = server.connection()
        if con is None:  # the server stopped between our look and our entry
            raise DbBusy("database busy (its holder was letting go)")
        cursor = con.cursor()
        try:
            if reading:
                cursor.execute("BEGIN TRANSACTION READ ONLY")
            yield cursor
        finally:
            if reading:
                cursor.execute("ROLLBACK")
            cursor.close()
    finally:
        server.leave_beside()


def _use(holder: _Holder, con: duckdb.DuckDBPyConnection, *, keep: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """One access on the holder's connection: a cursor of its own (closed after, so no
    result outlives the access), then keep or let go.  After an error the connection is
    not trusted: it is closed."""
    cursor = con.cursor()
    failed = True
    try:
        yield cursor
        failed = False
    finally:
        cursor.close()
        if failed or not keep or holder.someone_waiting():
            holder.let_go()
        else:
            holder.keep()


def _join_server(db_path: Path, deadline: float, *, reading: bool) -> serving.RemoteCursor | None:
    try:
        return serving.join(db_path, timeout_s=max(0.0, deadline - time.monotonic()), reading=reading)
    except serving.ServerBusy as exc:
        raise DbBusy(str(exc)) from None
    except serving.HolderNotAnswering as exc:
        raise DbHolderNotAnswering(str(exc)) from None


def _use_remote(cursor: serving.RemoteCursor) -> Iterator[serving.RemoteCursor]:
    """One access run by the serving holder (db/serving.py); it ends with the block.  A
    holder lost mid-access is ``DbBusy`` to the caller: the UI says "busy" and tries again,
    and the next access takes the file itself.  The block is not replayed here: a change
    whose commit went unanswered may have landed, and the Store's writes are guarded or
    keyed so that the caller's retry finds that out (a lost race, the same queued run)."""
    try:
        yield cursor
    except serving.HolderNotAnswering as exc:
        raise DbHolderNotAnswering(str(exc)) from exc
    except serving.ServerLost as exc:
        raise DbBusy(str(exc)) from exc
    finally:
        serving.end(cursor)


def _open(db_path: Path, *, lock_timeout_s: float, read_only: bool) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + lock_timeout_s
    while True:
        try:
            return duckdb.connect(str(db_path), read_only=read_only and db_path.exists())
        except duckdb.IOException as exc:
            if not _is_foreign_file_lock(exc) or time.monotonic() >= deadline:
                if _is_foreign_file_lock(exc):
                    raise DbBusy(f"database file locked by another program: {exc}") from exc
                raise
            time.sleep(random.uniform(_POLL_MIN_S, _POLL_MAX_S))  # noqa: S311


@contextmanager
def transaction(db_path: Path, *, lock_timeout_s: float, urgent: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """One short read-write transaction: committed at the end, rolled back on any error.
    ``urgent``: see ``connect``."""
    with connect(db_path, lock_timeout_s=lock_timeout_s, writer=True, urgent=urgent) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        checkpoint_soon(db_path, con)


def checkpoint_soon(db_path: Path, con: duckdb.DuckDBPyConnection) -> None:
    """After a commit on ``con``, inside its access: kept, the connection is checkpointed
    by its watcher, as a close would (the module's docstring); not kept, the close at the
    end of the access does it; served, the serving holder does (``_after_served_access``)."""
    if _keep_idle_s > 0 and not isinstance(con, serving.RemoteCursor):
        _holder_for(db_path).committed()


# How long a kept connection sits unused before its watcher checkpoints its commits: longer
# than the gaps inside a burst of writes (the runner's point, then its heartbeats: one
# checkpoint for the burst), short enough that a WAL is left for moments only.  Under
# accesses that never leave such a gap, the watcher checkpoints anyway this long after the
# first commit not checkpointed.
_CHECKPOINT_IDLE_S = 0.02
_CHECKPOINT_MAX_DELAY_S = 0.5
_CHECKPOINT_HELD_OFF = "other write transactions active"


def _try_checkpoint(con: duckdb.DuckDBPyConnection) -> bool:
    """``CHECKPOINT``; False when DuckDB holds it off for a read (db/serving.py: a read
    served beside the holder that began before the commit keeps DuckDB from checkpointing
    until it ends: "Cannot CHECKPOINT: there are other write transactions active")."""
    try:
        con.execute("CHECKPOINT")
    except duckdb.TransactionException as exc:
        if _CHECKPOINT_HELD_OFF not in str(exc):
            raise
        return False
    return True

