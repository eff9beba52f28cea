"""Reading one very long bench_serving record without building its per-request arrays.

A record written with ``--output-details`` holds one entry per request in ``itls``,
``generated_texts``, ... ; for a long sweep the line is tens or hundreds of megabytes.
``json.loads`` of such a line costs about ten times its size (the decoded text, a Python
object per number, the copy kept as the raw record, its JSON for the database): a 100 MB
line took about 1 GB.  Above :data:`SLIM_ABOVE_BYTES` the line is read here instead:

* the top-level object is walked on the raw bytes (every JSON structural character is
  ASCII, so UTF-8 text needs no decoding to be skipped);
* a top-level *array* whose text is longer than :data:`KEEP_VALUE_BYTES` is *not parsed*:
  the record keeps, under :data:`OMITTED_KEY`, the number of elements it had, so "how many
  requests were sent" stays known (the per-request data are all arrays; ``server_info``
  and the summary numbers are never left out);
* every other value is parsed with ``json.loads`` (``Infinity``/``NaN`` as the client writes them).

Memory is then about the line's own bytes plus the kept values, whatever the arrays hold.
The metrics of a record never come from the arrays (domain/results/bench_record.py reads
the summary keys), so the point is the same; only the raw record stored for the point
lacks the omitted arrays, and says so.
"""

from __future__ import annotations

import json
import re
from typing import Any

SLIM_ABOVE_BYTES = 8 * 1024 * 1024
KEEP_VALUE_BYTES = 256 * 1024
OMITTED_KEY = "benchdeck_omitted"

_WHITESPACE = re.compile(rb"[ \t\r\n]*")
_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # the unrolled form: far faster than an alternation per character
_STRING = re.compile(_STR, re.DOTALL)
_SCALAR = re.compile(rb"[^,\]}\s]+")
# Inside an array or object: where a string starts, a bracket, (when counting by commas) a comma.
_STRUCTURAL = re.compile(rb'[\[\]{}"]')
_STRUCTURAL_AND_COMMA = re.compile(rb'[\[\]{}",]')


class SlimError(ValueError):
    """Not one JSON object; ``at_end`` when the text ran out (a record cut short)."""

    def __init__(self, message: str, position: int, at_end: bool) -> None:
        super().__init__(message)
        self.position = position
        self.at_end = at_end


def _skip_ws(data: bytes, pos: int) -> int:
    match = _WHITESPACE.match(data, pos)
    return match.end() if match else pos


def _container_end(data: bytes, pos: int) -> tuple[int, int]:
    """End of the array/object opening at ``pos`` and its number of direct elements.

    The scan jumps from one structural character to the next (the regex engine skips the
    numbers in between); strings are skipped whole.  Elements are counted by what the
    first one is: containers (``itls``: one list per request) by their opening brackets,
    strings (``generated_texts``) one per string, anything else by the commas between them."""
    close = b"]" if data[pos:pos + 1] == b"[" else b"}"
    after = _skip_ws(data, pos + 1)
    if data[after:after + 1] == close:
        return after + 1, 0
    first = data[after:after + 1] if close == b"]" else b","
    mode = "nested" if first in (b"[", b"{") else "strings" if first == b'"' else "commas"
    structural = _STRUCTURAL_AND_COMMA if mode == "commas" else _STRUCTURAL
    depth, count, cursor = 0, 1 if mode == "commas" else 0, pos
    while (match := structural.search(data, cursor)) is not None:
        char, cursor = match.group(), match.end()
        if char == b'"':
            string = _STRING.match(data, match.start())
            if string is None:
                break
            cursor = string.end()
            count += mode == "strings" and depth == 1
        elif char in (b"[", b"{"):
            depth += 1
            count += mode == "nested" and depth == 2
        elif char in (b"]", b"}"):
            depth -= 1
            if depth == 0:
                return cursor, count
        elif depth == 1:  # a comma between two direct elements
            count += 1
    raise SlimError("unterminated array or object", len(data), at_end=True)


def _value_end(data: bytes, pos: int) -> tuple[int, int | None]:
    """End of the value starting at ``pos``, and its element count when it is a container."""
    if pos >= len(data):
        raise SlimError("expected a value", pos, at_end=True)
    first = data[pos:pos + 1]
    if first in (b"[", b"{"):
        return _container_end(data, pos)
    if first == b'"':
        match = _STRING.match(data, pos)
        if match is None:
            raise SlimError("unterminated string", len(data), at_end=True)
        return match.end(), None
    match = _SCALAR.match(data, pos)
    if match is None:
        raise SlimError("expected a value", pos, at_end=False)
    return match.end(), None


def _load(data: bytes, start: int, end: int) -> Any:
    try:
        return json.loads(data[start:end].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SlimError(f"unreadable value: {exc}", start, at_end=end >= len(data)) from None


def _key(data: bytes, pos: int) -> tuple[str, int]:
    match = _STRING.match(data, pos)
    if match is None:
        raise SlimError("expected a key", pos, at_end=pos >= len(data))
    return _load(data, pos, match.end()), match.end()


def _expect(data: bytes, pos: int, char: bytes) -> int:
    pos = _skip_ws(data, pos)
    if data[pos:pos + 1] != char:
        raise SlimError(f"expected {char.decode()!r}", pos, at_end=pos >= len(data))
    return pos + 1


def slim_record(data: bytes, start: int = 0) -> dict[str, Any]:
    """The top-level object of ``data[start:]`` with its long values left out (see the
    module doc); ``start`` skips a byte-order mark without copying the line.

    Raises SlimError for text that is not one JSON object."""
    pos = _expect(data, start, b"{")
    record: dict[str, Any] = {}
    omitted: dict[str, int] = {}
    pos = _skip_ws(data, pos)
    if data[pos:pos + 1] == b"}":
        return record
    while True:
        key, pos = _key(data, _skip_ws(data, pos))
        pos = _skip_ws(data, _expect(data, pos, b":"))
        end, elements = _value_end(data, pos)
        if elements is not None and data[pos:pos + 1] == b"[" and end - pos > KEEP_VALUE_BYTES:
            omitted[key] = elements
        else:
            record[key] = _load(data, pos, end)
        pos = _skip_ws(data, end)
        char = data[pos:pos + 1]
        if char == b"}":
            break
        if char != b",":
            raise SlimError("expected ',' or '}'", pos, at_end=pos >= len(data))
        pos += 1
    if _skip_ws(data, pos + 1) != len(data):
        raise SlimError("extra data after the object", pos + 1, at_end=False)
    if omitted:
        record[OMITTED_KEY] = omitted
    return record
