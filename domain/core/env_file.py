"""An environment file read the way systemd's ``EnvironmentFile=`` reads it.

The host guide's env file (docs/host.md) is read by systemd for the units and sourced by
bash for the cron backup; the two readers disagree on some spellings (an unquoted
``["a"]`` keeps its quotes for systemd and loses them in bash).  ``runner doctor`` reads a
file both ways and compares (runner/env_file_check.py).  The rules follow systemd's env-file parser
(``parse_env_file_internal`` in systemd's src/basic/env-file.c): ``#`` and ``;`` start a
comment line; ``KEY=VALUE``; whitespace around the key and before the value is dropped,
trailing whitespace of an unquoted value too; single quotes are literal; in double quotes a
backslash escapes ``"`` ``\\`` `````` ``$`` and a newline and is kept before anything else;
outside quotes a backslash escapes any character and eats a newline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_COMMENTS = "#;"
_WHITESPACE = " \t\n\r"
_NEWLINE = "\n\r"
_DOUBLE_QUOTE_ESCAPES = '"\\`$'


@dataclass
class _Reader:
    """The parser's state: which part of a line it is in, and what it has read of it."""

    state: str = "pre_key"
    key: str = ""
    value: str | None = None
    key_end: int | None = None  # where the key's trailing whitespace starts
    value_end: int | None = None  # where an unquoted value's trailing whitespace starts
    found: dict[str, str] = field(default_factory=dict)

    def push(self) -> None:
        key = self.key[: self.key_end] if self.key_end is not None else self.key
        value = self.value or ""
        if self.state == "value" and self.value_end is not None:
            value = value[: self.value_end]
        self.found[key] = value
        self.key, self.value, self.key_end, self.value_end = "", None, None, None

    def add(self, char: str) -> None:
        self.value = (self.value or "") + char


def _pre_key(r: _Reader, c: str) -> None:
    if c in _COMMENTS:
        r.state = "comment"
    elif c not in _WHITESPACE:
        r.state, r.key, r.key_end = "key", c, None


def _key(r: _Reader, c: str) -> None:
    if c in _NEWLINE:
        r.state, r.key = "pre_key", ""
    elif c == "=":
        r.state, r.value_end = "pre_value", None
    else:
        if c not in _WHITESPACE:
            r.key_end = None
        elif r.key_end is None:
            r.key_end = len(r.key)
        r.key += c


def _pre_value(r: _Reader, c: str) -> None:
    if c in _NEWLINE:
        r.push()
        r.state = "pre_key"
    elif c in "'\"\\":
        r.state = {"'": "single", '"': "double", "\\": "value_escape"}[c]
    elif c not in _WHITESPACE:
        r.state = "value"
        r.add(c)


def _value(r: _Reader, c: str) -> None:
    if c in _NEWLINE:
        r.push()
        r.state = "pre_key"
    elif c == "\\":
        r.state, r.value_end = "value_escape", None
    else:
        if c not in _WHITESPACE:
            r.value_end = None
        elif r.value_end is None:
            r.value_end = len(r.value or "")
        r.add(c)


def _value_escape(r: _Reader, c: str) -> None:
    r.state = "value"
    if c not in _NEWLINE:
        r.add(c)


def _single(r: _Reader, c: str) -> None:
    if c == "'":
        r.state = "pre_value"
    else:
        r.add(c)


def _double(r: _Reader, c: str) -> None:
    if c == '"':
        r.state = "pre_value"
    elif c == "\\":
        r.state = "double_escape"
    else:
        r.add(c)


def _double_escape(r: _Reader, c: str) -> None:
    r.state = "double"
    if c in _DOUBLE_QUOTE_ESCAPES:
        r.add(c)
    elif c != "\n":
        r.add("\\" + c)


def _comment(r: _Reader, c: str) -> None:
    if c == "\\":
        r.state = "comment_escape"
    elif c in _NEWLINE:
        r.state = "pre_key"


def _comment_escape(r: _Reader, c: str) -> None:
    r.state = "pre_key" if c in _NEWLINE else "comment"


_STEPS = {"pre_key": _pre_key, "key": _key, "pre_value": _pre_value, "value": _value,
          "value_escape": _value_escape, "single": _single, "double": _double, "double_escape": _double_escape,
          "comment": _comment, "comment_escape": _comment_escape}


def systemd_env(text: str) -> dict[str, str]:
    """The variables ``EnvironmentFile=`` would set from ``text`` (a later line wins)."""
    reader = _Reader()
    for char in text:
        _STEPS[reader.state](reader, char)
    if reader.state not in ("pre_key", "key", "comment", "comment_escape"):
        reader.push()
    return reader.found
