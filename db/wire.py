"""The frames a serving holder and its clients exchange (db/serving.py), and what each
side accepts of them.

A frame is a 4-byte length and a pickle.  Pickles are only exchanged with a peer of the
same user (``SO_PEERCRED``), and the unpickler still rebuilds only the types the protocol
sends: plain containers and scalars, the date and time types, ``Decimal``, ``UUID``, a
zone (a ``TIMESTAMPTZ`` value) and the exceptions an access raises (Python's own and
DuckDB's).  Anything else (a class of another module, a function) is refused before it
is imported or called, so a garbled or hostile frame is an error on its own access and
nothing more.  Parameters are made plain before they are sent (an enum member becomes
its value, a NumPy scalar its Python twin), as DuckDB would read them.

The shapes are checked too: a request is ``("begin" | "read", timeout_s)``; inside an
access a message is ``("end",)``, ``("execute", sql, parameters)`` or
``("executemany", sql, rows)``.  A frame that is none of these raises ``BadFrame``.
"""

from __future__ import annotations

import builtins
import datetime
import decimal
import enum
import io
import pickle
import socket
import struct
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

import duckdb

_LENGTH = struct.Struct("!I")
# A frame longer than this is refused unread: no statement of the Store comes near it.
MAX_FRAME = 1 << 30


class BadFrame(ValueError):
    """A frame that is not one the protocol sends: empty, too long, a refused type, or a
    message of the wrong shape."""


_PLAIN_BUILTINS = frozenset({"tuple", "list", "dict", "set", "frozenset", "bytearray", "bytes", "str", "int",
                             "float", "complex", "bool"})
_ALLOWED = {
    "datetime": frozenset({"datetime", "date", "time", "timedelta", "timezone"}),
    "decimal": frozenset({"Decimal"}),
    "uuid": frozenset({"UUID", "SafeUUID"}),
    "zoneinfo": frozenset({"ZoneInfo"}),
}
_MODULES = {"datetime": datetime, "decimal": decimal, "uuid": uuid, "zoneinfo": zoneinfo}


def _zone_getattr(owner: object, name: str) -> object:
    # A zone pickles as getattr(ZoneInfo, "_unpickle"): that one attribute, and no other.
    if owner is zoneinfo.ZoneInfo and name == "_unpickle":
        return zoneinfo.ZoneInfo._unpickle  # type: ignore[attr-defined]
    raise BadFrame(f"refused in a frame: getattr({owner!r}, {name!r})")


def _is_exception_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _builtin(name: str) -> object:
    if name == "getattr":
        return _zone_getattr
    value = getattr(builtins, name, None)
    if name in _PLAIN_BUILTINS or _is_exception_class(value):
        return value
    raise BadFrame(f"refused in a frame: builtins.{name}")


def _duckdb_error(name: str) -> object:
    value = getattr(duckdb, name, None)
    if _is_exception_class(value):
        return value
    raise BadFrame(f"refused in a frame: duckdb.{name}")


class _Unpickler(pickle.Unpickler):
    """Rebuilds only the types listed in the module's docstring."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins":
            return _builtin(name)
        if module in ("duckdb", "_duckdb"):
            return _duckdb_error(name)
        if name in _ALLOWED.get(module, ()):
            return getattr(_MODULES[module], name)
        raise BadFrame(f"refused in a frame: {module}.{name}")


def loads(data: bytes) -> Any:
    if not data:
        raise BadFrame("an empty frame")
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except BadFrame:
        raise
    except Exception as exc:  # a garbled pickle fails in many ways (EOFError, KeyError, ...)
        raise BadFrame(f"not a readable frame: {type(exc).__name__}: {exc}") from None


def send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive_exactly(sock: socket.socket, size: int, stalled: Callable[[], None] | None = None) -> bytes:
    """``size`` bytes; on a socket timeout, ``stalled`` says whether to wait on (it
    returns) or give up (it raises); without it the timeout is raised."""
    chunks = bytearray()
    while len(chunks) < size:
        try:
            chunk = sock.recv(min(size - len(chunks), 1 << 20))
        except TimeoutError:
            if stalled is None:
                raise
            stalled()
            continue
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks += chunk
    return bytes(chunks)


def receive(sock: socket.socket, stalled: Callable[[], None] | None = None) -> Any:
    (size,) = _LENGTH.unpack(receive_exactly(sock, _LENGTH.size, stalled))
    if size > MAX_FRAME:
        raise BadFrame(f"a frame of {size} bytes")
    return loads(receive_exactly(sock, size, stalled))


def request(message: object) -> tuple[str, float]:
    """A client's first frame: what it asks for, and its lock timeout (never negative:
    a negative timeout would wait for ever)."""
    if not (isinstance(message, tuple) and len(message) == 2 and message[0] in ("begin", "read")
            and isinstance(message[1], int | float)):
        raise BadFrame(f"not a request: {message!r:.80}")
    return message[0], max(0.0, float(message[1]))


def statement(message: object) -> tuple[str, str, Any]:
    """A message inside an access: ("end", "", None), or a statement and its parameters."""
    if message == ("end",):
        return "end", "", None
    if not (isinstance(message, tuple) and len(message) == 3 and message[0] in ("execute", "executemany")
            and isinstance(message[1], str)):
        raise BadFrame(f"not a statement: {message!r:.80}")
    kind, sql, parameters = message
    if not (parameters is None or isinstance(parameters, list | tuple | dict)):
        raise BadFrame(f"parameters of another type: {type(parameters).__name__}")
    return kind, sql, parameters


def plain(value: Any) -> Any:
    """Parameters as DuckDB reads them, in types the other side accepts (module docstring)."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):  # a named tuple too: its class is not sent
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()  # a scalar's Python twin, or an array's nested lists
    return value
