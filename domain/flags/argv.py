"""Between ``server_args`` and an engine's argv, by exact flag spelling.

:func:`render_flags` builds the list the runner passes to ``exec`` (never a shell) for any
engine, in its dialect's syntax (:func:`render_argv` for SGLang);
:func:`parse_command_line` reads a pasted ``python -m sglang.launch_server ...`` line
back into ``server_args`` for the importer.  Neither does argparse's prefix matching:
``--tp 8`` parses as the flag ``tp`` (which validation then reports, offering
``tp-size``), never silently as ``--tp-size``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from domain.core.i18n import t
from domain.flags.dialect import FlagDialect
from domain.flags.dialects.sglang import NEGATIVE_NUMBER as _NEGATIVE_NUMBER
from domain.flags.dialects.sglang import SGLANG_FLAGS
from domain.flags.schema import FlagSpec, Schema, all_schemas, load_schema
from domain.flags.values import FLOAT_TYPES, INT_TYPES, JSON_TYPES

_ASCII_INT = re.compile(r"^-?[0-9]+$", re.ASCII)
_ASCII_FLOAT = re.compile(r"^-?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$", re.ASCII)


class CommandLineError(ValueError):
    """A pasted command line that cannot be read as one SGLang launch."""

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(f"{key}: {params}")
        self.key = key
        self.params = params

    def text(self, lang: str) -> str:
        return t(f"flags.cmdline.{self.key}", lang, **self.params)


# -- rendering ---------------------------------------------------------------------------


def render_argv(server_args: Mapping[str, object], version: str, *, schema: Schema | None = None) -> list[str]:
    """``--flag value`` argv for validated SGLang ``server_args``: switches bare, lists as
    several values.  ``false`` switches are left out (``--no-x`` for a BooleanOptionalAction),
    ``None`` means unset.  ValueError for anything that cannot be rendered faithfully; run
    :func:`domain.flags.validate.validate_server_args` first."""
    return render_flags(SGLANG_FLAGS, server_args, schema or SGLANG_FLAGS.schema(version))


def render_flags(dialect: FlagDialect, server_args: Mapping[str, object], schema: Schema) -> list[str]:
    """The argv words of validated ``server_args`` on ``schema``, in ``dialect``'s syntax."""
    argv: list[str] = []
    for flag, value in server_args.items():
        spec = schema.lookup(flag)
        if spec is None:
            raise ValueError(f"--{flag} is not a flag of {dialect.name} {schema.version}")
        argv.extend(_render_flag(dialect, flag, spec, value))
    return argv


def _render_flag(dialect: FlagDialect, flag: str, spec: FlagSpec, value: object) -> list[str]:
    option = f"--{flag}"
    if value is None:
        return []
    if spec.takes_no_value:
        if not isinstance(value, bool):
            raise ValueError(f"{option} is a switch; its value must be true or false")
        return _render_switch(flag, spec, value)
    if spec.value_optional and value is True:
        return [option]
    if spec.takes_list:
        items = list(value) if isinstance(value, list | tuple) else [value]
        return [option, *(dialect.render_scalar(option, item) for item in items)]
    text = dialect.render_scalar(option, value)
    return [f"{option}={text}"] if dialect.attach_dashed and text.startswith("-") else [option, text]


def _render_switch(flag: str, spec: FlagSpec, value: bool) -> list[str]:
    """``x: true`` is ``--x``; ``x: false`` is the switch's visible off spelling (``--no-x``,
    ``--disable-x``) or nothing; an off spelling set true is itself, set false nothing."""
    if spec.negated(flag):
        return [f"--{flag}"] if value else []
    if value:
        return [f"--{flag}"]
    negative = spec.negative_name()
    return [f"--{negative}"] if negative is not None else []


# -- parsing -------------------------------------------------------------------------------


def parse_command_line(text: str, version: str, *, schema: Schema | None = None) -> dict[str, object]:
    """``server_args`` from a pasted launch command (``python -m sglang.launch_server``,
    ``sglang serve``, with line continuations and ``#`` comments).

    Split with :func:`shlex.split` (no shell runs).  Everything before the first ``--``
    option is the launcher and is ignored.  Values are converted by the schema's types
    where they parse cleanly and kept as text otherwise, so validation reports them.
    Flags are matched exactly; one unknown to every version takes a following value if
    there is one.  CommandLineError for text that is not one launch command."""
    schema = schema or load_schema(version)
    tokens = _tokens(text)
    start = next((i for i, tok in enumerate(tokens) if tok.startswith("--")), len(tokens))
    args: dict[str, object] = {}
    position = start
    while position < len(tokens):
        name, value, position = _read_option(tokens, position, schema)
        args[name] = value  # argparse keeps the last occurrence too
    return args


def _tokens(text: str) -> list[str]:
    # Keep newlines (not the continuation backslashes) so a '#' comment ends at its line.
    joined = text.replace("\\\r\n", "\n").replace("\\\n", "\n")
    try:
        return shlex.split(joined, comments=True, posix=True)
    except ValueError as exc:  # unbalanced quotes
        raise CommandLineError("unbalanced", detail=str(exc)) from exc


def _read_option(tokens: list[str], position: int, schema: Schema) -> tuple[str, object, int]:
    word = tokens[position]
    if not word.startswith("--") or word == "--":
        raise CommandLineError("unexpected_token", token=word)
    name, _, inline = word[2:].partition("=")
    inline_value = inline if "=" in word else None
    spec = schema.lookup(name) or _spec_in_any_version(name)
    values, position = _take_values(spec, name, tokens, position + 1, inline_value)
    return name, _convert(spec, values), position


def _spec_in_any_version(name: str) -> FlagSpec | None:
    """How many values a flag of another version takes, to read its value correctly."""
    for other in reversed(all_schemas()):
        spec = other.lookup(name)
        if spec is not None:
            return spec
    return None


def _is_option(token: str) -> bool:
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def _take_values(
    spec: FlagSpec | None, name: str, tokens: list[str], position: int, inline: str | None
) -> tuple[list[str] | bool, int]:
    """The raw values of one option and the position after them; True for a bare switch."""
    if spec is not None and spec.takes_no_value:
        if inline is not None:
            raise CommandLineError("switch_with_value", flag=name, value=inline)
        return True, position
    if inline is not None:
        return [inline], position
    following = []
    while position < len(tokens) and not _is_option(tokens[position]):
        following.append(tokens[position])
        position += 1
        if spec is None or not spec.takes_list:
            break  # one value, unless the flag takes a list
    if not following and (spec is None or spec.value_optional):
        return True, position
    return following, position


def _convert(spec: FlagSpec | None, raw: list[str] | bool) -> object:
    if isinstance(raw, bool):
        return raw
    converted = [_convert_one(spec, item) for item in raw]
    if spec is not None and spec.takes_list:
        return converted
    return converted[0] if converted else None  # None: the value is missing


def _convert_one(spec: FlagSpec | None, text: str) -> object:
    kind = (spec.type or "str") if spec is not None else None
    if kind in INT_TYPES and _ASCII_INT.match(text):
        return int(text)
    if kind in FLOAT_TYPES and _ASCII_FLOAT.match(text):
        return float(text)
    if kind in JSON_TYPES:
        return _json_or_text(text)
    if kind is None:
        return _guess_literal(text)
    return text


def _json_or_text(text: str) -> object:
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if isinstance(parsed, dict | list) else text


def _guess_literal(text: str) -> object:
    """A flag no version knows: keep numbers as numbers so a translation carries them."""
    if _ASCII_INT.match(text):
        return int(text)
    if _ASCII_FLOAT.match(text):
        return float(text)
    return text
