"""Dump ``vllm serve``'s argument schema (``make_arg_parser``) as JSON.

Run it with an interpreter that has vLLM's Python sources on its path, not the app's::

    .venv-vllm/bin/python runner/vllm_side/schema_dump.py --source .venv-vllm/src/0.33.0 -o vllm_args_0.33.0.json

Stdlib only (plus what vLLM itself imports), because it runs in the vLLM environment
that ``scripts/setup_vllm_env.sh`` makes: the wheel's ``.py`` files unpacked without
its dependencies, beside a handful of light packages (pydantic, PyYAML, regex).

vLLM's argument code imports torch, transformers and more at module level; none of
them is installed there, and none is needed to build the parser. Every module that
fails to import is replaced by a permissive stub, lazily (only once its absence has
stopped the import), and named in the output's ``stubbed`` list. A vLLM module on the
path that builds the flags themselves (``vllm.config``, ``vllm.engine.arg_utils``, the
``cli_args`` module, ``vllm.utils.argparse_utils``) is never stubbed: if one of them
cannot import, the dump fails rather than ship a schema with flags missing.

The parser is built the way ``vllm serve`` builds it (``ServeSubcommand.subparser_init``:
a ``FlexibleArgumentParser`` through ``make_arg_parser``). ``sys.argv`` holds
``--help`` while vLLM imports, because ``arg_utils.NEEDS_HELP`` reads it to decide
whether to collect each config field's docstring as help text.

The JSON has the fields of ``runner/sglang_side/schema_dump.py``'s files, plus:

* ``hidden_flags``: spellings the parser accepts but help does not show. vLLM's
  ``EnableDisableAction`` pairs ``--enable-x`` with ``--disable-x`` and keeps
  ``--no-enable-x`` registered for old command lines;
* ``negative_flags``: the spellings that store False;
* ``deprecated`` also counts vLLM's own ``deprecated=True`` (kept by the parser in
  ``_deprecated`` below Python 3.13).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import math
import os
import platform
import re
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

# The part shared with SGLang's dump, by path: this script runs from its file, not as a package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "engine_side"))
import stubbed_import

StubFinder = stubbed_import.StubFinder  # argparse_server.py builds its parser with it

_CLI_ARGS_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args")
_PARSER_MODULE = "vllm.utils.argparse_utils"
# vLLM modules whose code defines the flags: stubbing one would drop flags silently.
_NEVER_STUB = re.compile(
    r"^vllm(\.config(\..*)?|\.platforms(\.cuda|\.interface)?|\.engine\.arg_utils|\.entrypoints\..*cli_args|\.utils\.argparse_utils)$"
)
_MAX_RETRIES = 400
# "X is deprecated", "will be deprecated", "Deprecated: ...", but not "allow deprecated
# quantization methods" nor "enable deprecated Prometheus metrics" (about other things).
_SAYS_DEPRECATED = re.compile(r"\b(?:is|are|been|be|now)\s+deprecated\b|(?:^|[.!]\s+|\()deprecated\b", re.IGNORECASE)
_REPLACEMENT_PATTERNS = (
    re.compile(r"\buse\s+(--[A-Za-z0-9][\w.{},=<>-]*)\s+instead\b", re.IGNORECASE),
    re.compile(r"deprecated[,:;]?\s+(?:please\s+)?use\s+(--[A-Za-z0-9][\w.{},=<>-]*)", re.IGNORECASE),
    re.compile(r"\breplaced\s+by\s+(--[A-Za-z0-9][\w.{},=<>-]*)", re.IGNORECASE),
)


# --------------------------------------------------------------------------- stubs
#
# The stubbing itself is shared with SGLang's dump (runner/engine_side/stubbed_import.py);
# what may be stubbed is vLLM's rule (below), and its stubs carry the wheel's pinned versions.


def _is_compiled_extension(name: str) -> bool:
    """A vLLM module with no Python source beside its package (``vllm._C``, ``vllm._moe_C``)."""
    parent, _, leaf = name.rpartition(".")
    package = sys.modules.get(parent)
    paths = list(getattr(package, "__path__", None) or ())
    return bool(paths) and not any(
        os.path.exists(os.path.join(p, leaf + ".py")) or os.path.isdir(os.path.join(p, leaf)) for p in paths
    )


def _stub_for(exc: BaseException, stubs: stubbed_import.StubFinder) -> bool:
    """Choose what to stub so that the import that raised ``exc`` gets further.

    Returns False when nothing sensible is left (the caller then re-raises)."""
    if isinstance(exc, importlib.metadata.PackageNotFoundError) and exc.name not in stubs.modules:
        stubs.modules.add(exc.name.replace("-", "_"))  # asked for its version before importing it
        return True
    if isinstance(exc, ModuleNotFoundError) and exc.name and not stubs.covers(exc.name):
        # Another package, or one of vLLM's compiled extensions (``vllm._C``): the wheel's
        # ``.so`` files are not unpacked, only its Python sources.
        if exc.name.split(".")[0] != "vllm" or _is_compiled_extension(exc.name):
            stubs.modules.add(exc.name)
            return True
    if stubbed_import.stub_missing_name(exc, stubs, "vllm"):
        return True
    failed = stubbed_import.failed_module(exc, "vllm")
    if failed and not _NEVER_STUB.match(failed) and not stubs.covers(failed):
        # A vLLM module that runs torch or CUDA code at import time (kernels, platforms).
        stubs.modules.add(failed)
        print(f"stub-missing: stubbing the vLLM module {failed}", file=sys.stderr)
        return True
    return False


def import_with_stubs(module: str, stubs: stubbed_import.StubFinder) -> types.ModuleType:
    """Import ``module``, stubbing whatever stops it, one failure at a time."""
    imported: types.ModuleType = stubbed_import.retry_with_stubs(lambda: importlib.import_module(module),
                                                  lambda exc: _stub_for(exc, stubs), _MAX_RETRIES)
    return imported


# --------------------------------------------------------------------------- parser


@contextlib.contextmanager
def _help_requested() -> Iterator[None]:
    """``arg_utils.NEEDS_HELP`` is read from sys.argv at import: say ``--help`` meanwhile."""
    saved = sys.argv
    sys.argv = ["vllm", "serve", "--help"]
    try:
        yield
    finally:
        sys.argv = saved


def _cli_args_module(stubs: stubbed_import.StubFinder) -> types.ModuleType:
    """The module that holds ``make_arg_parser``: it moved between releases."""
    import_with_stubs("vllm", stubs)  # find_spec imports the parent package
    for name in _CLI_ARGS_MODULES:
        with contextlib.suppress(ModuleNotFoundError):  # its parent package is not there either
            if importlib.util.find_spec(name) is not None:
                return import_with_stubs(name, stubs)
    raise ModuleNotFoundError(f"none of {_CLI_ARGS_MODULES} in this vLLM")


_PIN = re.compile(r"^Requires-Dist:\s*(?P<name>[A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(?P<spec>[^;]*)", re.MULTILINE)
_LOWEST = re.compile(r"(?:==|>=|~=)\s*(?P<version>[0-9][\w.]*)")


def wheel_pins() -> dict[str, str]:
    """``{package: version}`` from vLLM's own metadata: the pinned or lowest admitted one."""
    try:
        text = importlib.metadata.distribution("vllm").read_text("METADATA") or ""
    except importlib.metadata.PackageNotFoundError:
        return {}
    pins: dict[str, str] = {}
    for match in _PIN.finditer(text):
        lowest = _LOWEST.search(match["spec"])
        if lowest:
            pins.setdefault(match["name"].lower().replace("_", "-"), lowest["version"])
    return pins


def _pretend_cuda(stubs: stubbed_import.StubFinder) -> None:
    """Resolve vLLM's platform as CUDA, the platform benchdeck serves on.

    Building the parser instantiates ``VllmConfig``'s default configs, and ``DeviceConfig``
    asks ``current_platform`` for a device type; with no GPU and NVML stubbed, vLLM's own
    detection finds none and raises. ``NonNvmlCudaPlatform`` asks torch (stubbed) instead
    of NVML, so nothing here touches a device."""
    platforms = import_with_stubs("vllm.platforms", stubs)
    cuda = import_with_stubs("vllm.platforms.cuda", stubs)
    setattr(platforms, "_current_platform", cuda.NonNvmlCudaPlatform())  # noqa: B010 (a module global)


def build_parser(stubs: stubbed_import.StubFinder) -> tuple[argparse.ArgumentParser, str]:
    """The parser ``vllm serve`` builds, and the function that built it."""
    sys.meta_path.insert(0, stubs)
    with _help_requested(), contextlib.redirect_stdout(io.StringIO()):
        flexible = import_with_stubs(_PARSER_MODULE, stubs).FlexibleArgumentParser
        cli_args = _cli_args_module(stubs)
        _pretend_cuda(stubs)

        def make() -> argparse.ArgumentParser:
            parser = flexible(prog="vllm serve", usage="vllm serve [model_tag] [options]")
            made: argparse.ArgumentParser = cli_args.make_arg_parser(parser)
            return made

        # Some config defaults import more modules lazily, while the parser is built.
        parser = stubbed_import.retry_with_stubs(make, lambda exc: _stub_for(exc, stubs), _MAX_RETRIES)
    return parser, f"{cli_args.__name__}.make_arg_parser"


# --------------------------------------------------------------------------- dump


def _json_safe(value: Any) -> Any:
    """Return ``value`` if strict JSON can hold it unchanged, else its repr."""
    if isinstance(value, (set, frozenset)):
        return sorted((_json_safe(v) for v in value), key=repr)  # stable across hash seeds
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(value.value, (str, int)):
        return value.value  # an enum member: argparse compares its value
    return repr(value)


def _inner_type(kind: Any) -> Any:
    """What vLLM's ``optional_type(f)`` / ``parse_type(f)`` closures wrap."""
    for cell in getattr(kind, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner):
            return inner
    return None


def _type_name(action: argparse.Action) -> str | None:
    """``int``, ``float``, ``str``, ``human_readable_int``, ``json`` (``json.loads`` or a
    config dataclass read with pydantic), ``dict_or_str``, ``bool``; ``optional:`` in
    front when the flag also takes ``None`` / an empty string to mean unset."""
    kind = action.type
    if isinstance(action, stubbed_import.BUILTIN_BOOL_ACTIONS):
        return "bool"
    if kind is None:
        return None
    name = stubbed_import.callable_name(kind)
    if name == "_optional_type":
        inner = _inner_type(kind)
        return "optional:" + (_plain_type_name(inner) if inner is not None else "str")
    return _plain_type_name(kind)


def _plain_type_name(kind: Any) -> str:
    name = stubbed_import.callable_name(kind) or type(kind).__name__
    if name == "_parse_type":
        inner = _inner_type(kind)
        return _plain_type_name(inner) if inner is not None else "str"
    return {"loads": "json", "parse_dataclass": "json", "union_dict_and_str": "dict_or_str"}.get(name, name)


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    return [_json_safe(c) for c in action.choices]


def _is_deprecated(action: argparse.Action, help_text: str, deprecated: set[int]) -> bool:
    return (
        id(action) in deprecated
        or getattr(action, "deprecated", False) is True
        or "Deprecat" in type(action).__name__
        or _SAYS_DEPRECATED.search(help_text) is not None
    )


def _replacement(help_text: str, deprecated: bool) -> str | None:
    if not deprecated:
        return None
    return stubbed_import.replacement_in(help_text, _REPLACEMENT_PATTERNS, ".,;)`'")


def _registered(parser: argparse.ArgumentParser) -> dict[int, list[str]]:
    """Every option string the parser accepts, by action (hidden spellings included)."""
    found: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        found.setdefault(id(action), []).append(option)
    return found


def _negative(action: argparse.Action, accepted: Sequence[str]) -> list[str]:
    negative = getattr(action, "negative_option_strings", None)
    if negative is not None:  # vLLM's EnableDisableAction
        return sorted(o for o in accepted if o in negative)
    if isinstance(action, argparse.BooleanOptionalAction):
        return [o for o in accepted if o.startswith("--no-")]
    return []


# The fields SGLang's dump writes too are written here again (a `duplicates` pair with
# runner/sglang_side/schema_dump.py): the key order is the file format's, and each value comes
# from this engine's own readers (_json_safe, _type_name, _replacement), which differ.
def describe(
    action: argparse.Action, group: str | None, accepted: Sequence[str], deprecated: set[int]
) -> dict[str, Any]:
    """One action as a JSON-ready dict; the key order here is the order in the file."""
    help_text = action.help if isinstance(action.help, str) else ""
    is_deprecated = _is_deprecated(action, help_text, deprecated)
    visible = list(action.option_strings)
    return {
        "dest": action.dest,
        "flags": visible,
        "hidden_flags": [o for o in accepted if o not in visible],
        "negative_flags": _negative(action, accepted),
        "primary": stubbed_import.primary(visible),  # --tensor-parallel-size, not -tp
        "action": type(action).__name__,
        "type": _type_name(action),
        "nargs": _json_safe(action.nargs),
        "const": _json_safe(action.const),
        "default": _json_safe(action.default),
        "choices": _choices(action),
        "required": bool(action.required),
        "metavar": _json_safe(action.metavar),
        "group": group,
        "help": _json_safe(action.help),
        "deprecated": is_deprecated,
        "replacement": _replacement(help_text, is_deprecated),
        "suppressed": action.help == argparse.SUPPRESS,
    }


def _vllm_version() -> str:
    return stubbed_import.package_version("vllm") or "unknown"


def dump() -> dict[str, Any]:
    stubs = stubbed_import.StubFinder(wheel_pins())
    parser, entry = build_parser(stubs)
    titles = stubbed_import.group_titles(parser)
    accepted = _registered(parser)
    deprecated = {id(a) for a in getattr(parser, "_deprecated", ())}
    args = [
        describe(a, titles.get(id(a)), accepted.get(id(a), []), deprecated)
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction)
    ]
    return {
        "vllm_version": _vllm_version(),
        "python": platform.python_version(),
        "entry": entry,
        "allow_abbrev": parser.allow_abbrev,
        "num_args": len(args),
        "stubbed": stubs.recorded(),
        "args": args,
    }


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    cli.add_argument("--source", help="a directory holding the unpacked wheel (vllm/ and its .dist-info)")
    cli.add_argument("--output", "-o", help="write here instead of stdout")
    opts = cli.parse_args(argv)
    if opts.source:
        sys.path.insert(0, opts.source)
    stubbed_import.write_dump(dump(), opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
