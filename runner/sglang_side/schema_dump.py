"""Dump SGLang's server-argument schema (``ServerArgs.add_cli_args``) as JSON.

Run it with the interpreter that has SGLang installed, not the app's own::

    .venv-sglang/bin/python runner/sglang_side/schema_dump.py > sglang_args_0.5.23.json

Stdlib only, because it runs inside the SGLang environment, which does not have
the app's packages. It builds a parser and reads its actions; it needs no GPU and
loads no model.

``--stub-missing`` lets an older release be dumped without its dependencies
(``tools/regenerate_schemas.py`` uses it): every module that fails to import is
replaced by a permissive stub and named in the output's ``stubbed`` list.

Compared, when it was written, with dumps of the same releases made by another
extractor: for 0.4.6.post5, 0.5.9, 0.5.15.post1, 0.5.20 and 0.5.23 the
flag sets, action order, action counts (145/331/437/494/531) and deprecated
counts (2/2/23/6/7) are identical, and so is every field except these, all on
purpose:

* ``primary`` is the first long flag (``--tp-size``, ``--enable-tf32-matmul``);
  the reference took the longest (``--tensor-parallel-size``,
  ``--no-enable-tf32-matmul``), which makes a BooleanOptionalAction's negative
  spelling look primary. 22 actions in 0.5.23 differ only in this.
* ``replacement`` is also read from the help text of a deprecated flag ("use --x
  instead", "Deprecated, use --x"); the reference used only ``new_flag`` /
  ``error_message``. So ``--grpc-mode`` -> ``--smg-grpc-mode``,
  ``--disable-fast-image-processor`` -> ``--image-processor-backend=pil``,
  ``--hybrid-kvcache-ratio`` (0.5.9) -> ``--swa-full-tokens-ratio``.
* ``choices`` given as a set (``--sampling-backend``) are sorted; the reference
  kept one run's hash order.
* ``--tool-call-parser`` in 0.5.15.post1 and 0.5.20: the reference has only
  ``["auto"]`` and "Options include: []", because its stubs emptied SGLang's
  parser registry; here the registry is real and the full list is kept.
* ``stubbed`` is new (``[]`` for the pinned 0.5.23 run in .venv-sglang).

Rules kept as the reference has them: ``type`` is ``"bool"`` for argparse's own
boolean actions (which have no type callable); "deprecated" in the help counts,
except in "replaces the deprecated ..." (that names what this flag supersedes);
``help`` is the raw string given to ``add_argument``, ``%(default)s`` unexpanded.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import os
import platform
import re
import sys
from typing import Any

# The part shared with vLLM's dump, by path: this script runs from its file, not as a package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "engine_side"))
import stubbed_import

_SERVER_ARGS = "sglang.srt.server_args"

_REPLACES_DEPRECATED = re.compile(r"\breplac\w*\s+the\s+deprecated\b", re.IGNORECASE)
_REPLACEMENT_PATTERNS = (
    # "Deprecated. Use --image-processor-backend=pil instead."
    re.compile(r"\buse\s+(--[A-Za-z0-9][\w{},=<>-]*)\s+instead\b", re.IGNORECASE),
    # "(Deprecated, use --smg-grpc-mode) ..." / "(Deprecated: use --x=auto) ..."
    re.compile(r"deprecated[,:;]?\s+use\s+(--[A-Za-z0-9][\w{},=<>-]*)", re.IGNORECASE),
)


# --------------------------------------------------------------------------- stubs
#
# The stubbing itself is shared with vLLM's dump (runner/engine_side/stubbed_import.py);
# what may be stubbed is SGLang's rule: never an sglang module that is merely missing, never
# ``sglang.srt.server_args`` itself.

_MAX_RETRIES = 300


def _stub_for(exc: BaseException, stubs: stubbed_import.StubFinder) -> bool:
    """Choose what to stub so that the import that raised ``exc`` gets further.

    Returns False when nothing sensible is left (the caller then re-raises).
    """
    if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] != "sglang":
        if not stubs.covers(exc.name):
            stubs.modules.add(exc.name)
            return True
    if stubbed_import.stub_missing_name(exc, stubs, "sglang"):
        return True
    failed = stubbed_import.failed_module(exc, "sglang")
    if failed and failed != _SERVER_ARGS and not stubs.covers(failed):
        # An sglang module that cannot run against today's torch/transformers.
        stubs.modules.add(failed)
        return True
    return False


def import_with_stubs(stubs: stubbed_import.StubFinder) -> Any:
    """Import ServerArgs, stubbing whatever stops it, one failure at a time."""
    sys.meta_path.insert(0, stubs)
    return stubbed_import.retry_with_stubs(lambda: importlib.import_module(_SERVER_ARGS).ServerArgs,
                            lambda exc: _stub_for(exc, stubs), _MAX_RETRIES)


# --------------------------------------------------------------------------- dump


def _json_safe(value: Any) -> Any:
    """Return ``value`` if strict JSON can hold it unchanged, else its repr."""
    if isinstance(value, (set, frozenset)):
        # A set's order changes between runs (hash seed): sort it for a stable file.
        return sorted((_json_safe(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # json.dumps would write Infinity/NaN, which is not JSON
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _type_name(action: argparse.Action) -> str | None:
    kind = action.type
    if isinstance(action, stubbed_import.BUILTIN_BOOL_ACTIONS):
        return "bool"  # argparse stores a bool without a type callable
    if kind is None:
        return None
    name = stubbed_import.callable_name(kind)
    return name if name is not None else type(kind).__name__


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    if isinstance(action.choices, (set, frozenset, list, tuple)):
        return list(_json_safe(action.choices))
    return [_json_safe(c) for c in action.choices]  # a dict or other iterable


def _is_deprecated(action: argparse.Action, help_text: str) -> bool:
    # "Replaces the deprecated --grpc-mode." is about what this flag supersedes.
    own_text = _REPLACES_DEPRECATED.sub("", help_text)
    return (
        "Deprecat" in type(action).__name__
        or getattr(action, "deprecated", False) is True
        or re.search("deprecated", own_text, re.IGNORECASE) is not None
    )


def _replacement(action: argparse.Action, help_text: str, deprecated: bool) -> str | None:
    for attr in ("new_flag", "error_message"):
        value = getattr(action, attr, None)
        if value:
            return str(value)
    if not deprecated:
        return None
    return stubbed_import.replacement_in(help_text, _REPLACEMENT_PATTERNS, ".,;)")


def describe(action: argparse.Action, group: str | None) -> dict[str, Any]:
    """One action as a JSON-ready dict; the key order here is the order in the file."""
    help_text = action.help if isinstance(action.help, str) else ""
    deprecated = _is_deprecated(action, help_text)
    return {
        "dest": action.dest,
        "flags": list(action.option_strings),
        "primary": stubbed_import.primary(action.option_strings),  # the spelling SGLang lists first, e.g. --tp-size
        "action": type(action).__name__,
        "type": _type_name(action),
        "nargs": _json_safe(action.nargs),
        "default": _json_safe(action.default),
        "choices": _choices(action),
        "required": bool(action.required),
        "metavar": _json_safe(action.metavar),
        "group": group,
        "help": _json_safe(action.help),
        "deprecated": deprecated,
        "replacement": _replacement(action, help_text, deprecated),
        "suppressed": action.help == argparse.SUPPRESS,
    }


def _sglang_version() -> str:
    installed = stubbed_import.package_version("sglang")
    if installed is not None:
        return installed
    import sglang  # a --target install without metadata on the path

    return str(getattr(sglang, "__version__", "unknown"))


def build_parser(stubs: stubbed_import.StubFinder | None) -> argparse.ArgumentParser:
    """The parser ``sglang.launch_server`` would build, minus the launch."""
    # SGLang prints warnings (no CUDA, etc.) while importing; keep stdout for JSON.
    with contextlib.redirect_stdout(io.StringIO()):
        if stubs is None:
            server_args = importlib.import_module(_SERVER_ARGS).ServerArgs
        else:
            server_args = import_with_stubs(stubs)
        parser = argparse.ArgumentParser()
        server_args.add_cli_args(parser)
    return parser


def dump(stub_missing: bool = False) -> dict[str, Any]:
    stubs = stubbed_import.StubFinder() if stub_missing else None
    parser = build_parser(stubs)
    titles = stubbed_import.group_titles(parser)
    args = [
        describe(a, titles.get(id(a)))
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction)
    ]
    return {
        "sglang_version": _sglang_version(),
        "python": platform.python_version(),
        "num_args": len(args),
        "stubbed": stubs.recorded() if stubs else [],
        "args": args,
    }


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument(
        "--stub-missing",
        action="store_true",
        help="replace modules that fail to import with stubs (for releases whose deps are absent)",
    )
    cli.add_argument("--output", "-o", help="write here instead of stdout")
    opts = cli.parse_args(argv)
    stubbed_import.write_dump(dump(opts.stub_missing), opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
