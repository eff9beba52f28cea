"""Command line of the emulator's vLLM personality: ``vllm serve``'s flags, matched exactly.

``python -m emulator --emulate-engine vllm --model M [vLLM flags] [--emulate-* options]``
accepts the flags of one vLLM version's shipped schema (``domain/flags/schemas/
vllm_args_<version>.json``, read through :mod:`domain.flags.dialects.vllm`), chosen with
``--emulate-vllm-version`` (default: the newest shipped).  Numbers are read with the
schema module's :func:`~domain.flags.dialects.vllm.parse_vllm_number` (vLLM's
``human_readable_int``: ``1k`` = 1000, ``1K`` = 1024) and choices against the schema.

What differs from ``vllm serve`` on purpose (as :mod:`domain.flags.dialects.vllm` decides
for plans): no prefix matching (``allow_abbrev=False``) and no underscore spelling
(``--max_num_seqs``); both are refused like any unknown flag.  The refusal itself is
vLLM's: ``usage: vllm serve [model_tag] [options]`` and ``vllm serve: error:
unrecognized arguments: ...`` on stderr, exit status 2 (stdlib argparse under
``FlexibleArgumentParser.error``, V33 ``utils/argparse_utils.py:182-195``), followed by one
line of the emulator's own naming the nearest flags of the schema.

``--model`` is not in the dumped schema (vLLM leaves it out under ``serve --help``,
V33 ``engine/arg_utils.py:968-969``, and the dump runs with ``--help``), yet ``vllm serve
--model M`` works: ``FlexibleArgumentParser.parse_args`` moves it to the positional
``model_tag`` with a warning (V33 ``utils/argparse_utils.py:324-356``).  The emulator does
the same.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from domain.flags.dialects.vllm import (
    known_vllm_versions,
    load_vllm_schema,
    newest_vllm_version,
    parse_vllm_number,
)
from domain.flags.schema import FlagSpec, Schema, SchemaError
from emulator.flags import EmulateOptions, ParsedFlags, _add_emulate_args, _emulate_options

PROG = "vllm serve"
USAGE = "vllm serve [model_tag] [options]"  # V33 entrypoints/cli/serve.py:169, V11 serve.py:69
MODEL_WARNING = ("With `vllm serve`, you should provide the model as a positional argument or in a config file "
                 "instead of via the `--model` option. The `--model` option will be removed in a future version.")


class VllmArgumentParser(argparse.ArgumentParser):
    """argparse's own refusal (usage + ``prog: error: msg``, exit 2), plus the nearest flags."""

    def __init__(self, schema: Schema) -> None:
        super().__init__(prog=PROG, usage=USAGE, allow_abbrev=False,
                         description="benchdeck emulator engine (speaks vLLM's HTTP protocol)")
        self.schema = schema

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        hint = nearest_hint(message, self.schema)
        if hint:
            print(hint, file=sys.stderr)
        raise SystemExit(2)


def nearest_hint(message: str, schema: Schema) -> str | None:
    """``[benchdeck emulator] did you mean --x?`` for each unrecognized flag of ``message``."""
    if not message.startswith("unrecognized arguments:"):
        return None
    hints = []
    for token in message.split(":", 1)[1].split():
        if not token.startswith("--"):
            continue
        name = token[2:].split("=", 1)[0]
        close = difflib.get_close_matches(name.replace("_", "-"), sorted(schema.names), n=3, cutoff=0.6)
        if close:
            hints.append(f"{token.split('=', 1)[0]} → " + ", ".join("--" + c for c in close))
    if not hints:
        return None
    return (f"[benchdeck emulator] not a flag of vLLM {schema.version} (exact spelling only); "
            f"nearest: {'; '.join(hints)}")


@dataclass(frozen=True)
class VllmFlags(ParsedFlags):
    """``vllm serve``'s flags as the emulator parsed them (its SGLang ParsedFlags' fields, with
    ``schema_version`` the vLLM version), and whether ``--model`` was moved."""

    model_moved: bool = False  # --model was given (vLLM warns and moves it to model_tag)

    @property
    def model(self) -> str:
        return str(self.args.get("model_tag") or "")

    @property
    def served_names(self) -> tuple[str, ...]:
        names = self.args.get("served_model_name")
        return tuple(names) if names else (self.model,)


def _number_type(kind: str, optional: bool) -> Any:
    """A converter named as argparse reports it (``invalid int value: 'x'``)."""

    def convert(text: str) -> Any:
        if optional and text in ("None", ""):
            return None
        number = parse_vllm_number(kind, text)
        if isinstance(number, str):
            raise ValueError(text)
        if kind.startswith("human_readable_int") or kind == "int":
            return int(number)
        return number

    convert.__name__ = kind
    return convert


def _json_type(optional: bool) -> Any:
    def json_value(text: str) -> Any:
        if optional and text in ("None", ""):
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from exc

    return json_value


def _text_type(optional: bool) -> Any:
    def str_value(text: str) -> Any:
        return None if optional and text in ("None", "") else text

    str_value.__name__ = "str"
    return str_value


def _value_type(spec: FlagSpec) -> Any:
    kind = spec.base_type
    if kind in ("int", "float", "human_readable_int", "human_readable_int_or_auto"):
        return _number_type(kind, spec.optional)
    if kind in ("json", "dict_or_str"):
        return _json_type(spec.optional) if kind == "json" else _text_type(spec.optional)
    return _text_type(spec.optional)


def _option_strings(spec: FlagSpec, names: Sequence[str]) -> list[str]:
    return ["--" + n for n in names] + (["-" + s for s in spec.short] if names and names[0] == spec.primary else [])


def _add_spec(group: argparse._ArgumentGroup, spec: FlagSpec) -> None:
    if spec.positional:
        group.add_argument(spec.dest, nargs="?", default=argparse.SUPPRESS)
        return
    common: dict[str, Any] = {"dest": spec.dest, "default": argparse.SUPPRESS}
    if spec.takes_no_value:
        positive = [n for n in spec.names if not spec.negated(n)]
        negative = [n for n in spec.names if spec.negated(n)]
        if positive:
            group.add_argument(*_option_strings(spec, positive), action="store_const", const=True, **common)
        if negative:
            group.add_argument(*["--" + n for n in negative], action="store_const", const=False, **common)
        return
    kwargs: dict[str, Any] = {"type": _value_type(spec)}
    if spec.nargs is not None:
        kwargs["nargs"] = spec.nargs
    if spec.action == "_AppendAction":
        kwargs["action"] = "append"
    if spec.choices is not None and spec.base_type not in ("json",):
        kwargs["choices"] = [*spec.choices, *([None] if spec.none_in_choices or spec.optional else [])]
    names = list(spec.names)
    group.add_argument(*_option_strings(spec, [spec.primary, *[n for n in names if n != spec.primary]]),
                       **common, **kwargs)


def build_parser(schema: Schema) -> VllmArgumentParser:
    parser = VllmArgumentParser(schema)
    group = parser.add_argument_group(f"vLLM {schema.version} serve arguments")
    for spec in schema.specs:
        _add_spec(group, spec)
    _add_emulate_args(parser)
    extra = parser.add_argument_group("emulator-only options (vLLM personality)")
    extra.add_argument("--emulate-engine", choices=["sglang", "vllm"], help="Which server to emulate.")
    extra.add_argument("--emulate-vllm-version", help="vLLM version whose `vllm serve` flags are accepted.")
    return parser


def _usage_error(message: str) -> NoReturn:
    print(f"usage: {USAGE}", file=sys.stderr)
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _pre_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` before the parser runs: ``--flag VALUE`` or ``--flag=VALUE``."""
    found = (argv[i + 1] if arg == flag else arg.split("=", 1)[1] for i, arg in enumerate(argv)
             if (arg == flag and i + 1 < len(argv)) or arg.startswith(flag + "="))
    return next(found, None)


def move_model_flag(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``--model M`` → positional ``M`` first, as FlexibleArgumentParser does (the first one only)."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return [args[i + 1], *args[:i], *args[i + 2:]], True
        if arg.startswith("--model="):
            return [arg.removeprefix("--model="), *args[:i], *args[i + 1:]], True
    return args, False


def parse_vllm_flags(argv: Sequence[str]) -> VllmFlags:
    """Parse a vLLM-personality command line; exits 2 on an unknown or invalid flag."""
    version = _pre_value(argv, "--emulate-vllm-version") or newest_vllm_version()
    schema_dir_text = _pre_value(argv, "--emulate-schema-dir")
    schema_dir = Path(schema_dir_text) if schema_dir_text else None
    try:
        schema = load_vllm_schema(version, schema_dir)
    except SchemaError as exc:
        known = ", ".join(known_vllm_versions(schema_dir))
        _usage_error(f"argument --emulate-vllm-version: {exc} (shipped: {known})")
    moved_argv, moved = move_model_flag(argv)
    parser = build_parser(schema)
    ns = parser.parse_args(moved_argv)
    given = {k: v for k, v in vars(ns).items() if not k.startswith("emulate_")}
    args: dict[str, Any] = {spec.dest: spec.default for spec in schema.specs}
    args.update(given)
    if not args.get("model_tag"):
        parser.error("the following arguments are required: model_tag (or --model)")
    emulate = _emulate_options(parser, ns, version, schema_dir or Path("."))
    # The SGLang option's field keeps its own default: the vLLM version is VllmFlags.schema_version.
    emulate = replace(emulate, schema_dir=schema_dir, sglang_version=EmulateOptions().sglang_version)
    return VllmFlags(args=args, explicit=frozenset(given), emulate=emulate,
                     argv=tuple(argv), schema_version=schema.version, model_moved=moved)
