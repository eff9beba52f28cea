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
import importlib.abc
import importlib.machinery
import io
import json
import math
import platform
import re
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

_SERVER_ARGS = "sglang.srt.server_args"

_REPLACES_DEPRECATED = re.compile(r"\breplac\w*\s+the\s+deprecated\b", re.IGNORECASE)
_BUILTIN_BOOL_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse.BooleanOptionalAction,
)
_REPLACEMENT_PATTERNS = (
    # "Deprecated. Use --image-processor-backend=pil instead."
    re.compile(r"\buse\s+(--[A-Za-z0-9][\w{},=<>-]*)\s+instead\b", re.IGNORECASE),
    # "(Deprecated, use --smg-grpc-mode) ..." / "(Deprecated: use --x=auto) ..."
    re.compile(r"deprecated[,:;]?\s+use\s+(--[A-Za-z0-9][\w{},=<>-]*)", re.IGNORECASE),
)


# --------------------------------------------------------------------------- stubs
#
# Stubbing is lazy: a module is stubbed only once its absence has stopped
# ``sglang.srt.server_args`` from importing. SGLang guards many optional imports
# with ``try/except ImportError`` and falls back by itself; stubbing those up front
# would send it down the "installed" branch with fake objects, and a finder that
# answered every lookup would also fool ``importlib.util.find_spec`` checks.

_MAX_RETRIES = 300
_CANNOT_IMPORT = re.compile(r"cannot import name '(?P<attr>\w+)' from '(?P<module>[\w.]+)'")


class _StubMeta(type):
    """Metaclass of stub objects: every attribute, call, subscript or union works."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = make_stub(f"{cls.__qualname__}.{attr}")
        setattr(cls, attr, value)  # same object next time, so ``is`` checks hold
        return value

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "_stub_origin" not in cls.__dict__:  # a real subclass: build an instance
            return super().__call__(*args, **kwargs)
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the decorated function
        return make_stub(f"{cls.__qualname__}()")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False  # "is the optional feature there?" checks take the no branch


class _StubBase(metaclass=_StubMeta):
    """Base of every stub, so SGLang classes may inherit from a stubbed one."""

    _stub_origin = "base"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # ``class Params(StubbedTypedDict, total=False)`` passes keywords here.
        super().__init_subclass__()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # A stub used as a pydantic field type accepts anything.
        from pydantic_core import core_schema

        return core_schema.any_schema()


def make_stub(qualname: str) -> Any:
    """A fresh stub class (a class, not an instance, so it can be a base class)."""
    return _StubMeta(qualname.rsplit(".", 1)[-1], (_StubBase,), {"_stub_origin": qualname})


class _StubModule(types.ModuleType):
    """A module whose every attribute is a stub; a package, so submodules import too."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__file__ = f"<stub {name}>"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = make_stub(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on sys.meta_path; answers only for modules already chosen to be stubbed."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.attributes: set[str] = set()

    def covers(self, fullname: str) -> bool:
        return any(fullname == m or fullname.startswith(m + ".") for m in self.modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.covers(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def recorded(self) -> list[str]:
        """Stubbed modules, and ``module:name`` for names missing from real modules."""
        return sorted(self.modules | self.attributes)


def _failed_sglang_module(exc: BaseException) -> str | None:
    """The innermost sglang module whose top-level code raised ``exc``, if any."""
    failed = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = str(frame.f_globals.get("__name__", ""))
        if frame.f_code.co_name == "<module>" and name.split(".")[0] == "sglang":
            failed = name
        tb = tb.tb_next
    return failed


def _stub_for(exc: BaseException, stubs: StubFinder) -> bool:
    """Choose what to stub so that the import that raised ``exc`` gets further.

    Returns False when nothing sensible is left (the caller then re-raises).
    """
    if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] != "sglang":
        if not stubs.covers(exc.name):
            stubs.modules.add(exc.name)
            return True
    match = _CANNOT_IMPORT.search(str(exc)) if isinstance(exc, ImportError) else None
    if match and match["module"].split(".")[0] != "sglang" and match["module"] in sys.modules:
        # A name that this (newer) dependency no longer has, e.g. a transformers class.
        setattr(sys.modules[match["module"]], match["attr"], make_stub(match["attr"]))
        stubs.attributes.add(f"{match['module']}:{match['attr']}")
        return True
    failed = _failed_sglang_module(exc)
    if failed and failed != _SERVER_ARGS and not stubs.covers(failed):
        # An sglang module that cannot run against today's torch/transformers.
        stubs.modules.add(failed)
        return True
    return False


def import_with_stubs(stubs: StubFinder) -> Any:
    """Import ServerArgs, stubbing whatever stops it, one failure at a time.

    No sglang module is purged between tries: Python already drops every module
    whose import raised (the failing one and the parents it propagated through),
    and re-running modules that did finish would repeat their side effects, such
    as registering a config class with transformers twice.
    """
    sys.meta_path.insert(0, stubs)
    for _ in range(_MAX_RETRIES):
        try:
            return importlib.import_module(_SERVER_ARGS).ServerArgs
        except Exception as exc:
            if not _stub_for(exc, stubs):
                raise
            # stderr, so a surprising stub can be traced back to its cause.
            print(f"stub-missing: after {type(exc).__name__}: {exc}", file=sys.stderr)
    raise RuntimeError(f"gave up after stubbing {_MAX_RETRIES} modules")


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
    if isinstance(action, _BUILTIN_BOOL_ACTIONS):
        return "bool"  # argparse stores a bool without a type callable
    if kind is None:
        return None
    name = getattr(kind, "__name__", None)
    if name is None and hasattr(kind, "func"):  # functools.partial
        name = getattr(kind.func, "__name__", None)
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
    for pattern in _REPLACEMENT_PATTERNS:
        match = pattern.search(help_text)
        if match:
            return match.group(1).rstrip(".,;)")
    return None


def _group_titles(parser: argparse.ArgumentParser) -> dict[int, str | None]:
    titles: dict[int, str | None] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            titles.setdefault(id(action), group.title)
    return titles


def _primary(action: argparse.Action) -> str | None:
    """The first long flag: the spelling SGLang lists first, e.g. ``--tp-size``."""
    longs = [f for f in action.option_strings if f.startswith("--")]
    candidates = longs or action.option_strings
    return candidates[0] if candidates else None


def describe(action: argparse.Action, group: str | None) -> dict[str, Any]:
    """One action as a JSON-ready dict; the key order here is the order in the file."""
    help_text = action.help if isinstance(action.help, str) else ""
    deprecated = _is_deprecated(action, help_text)
    return {
        "dest": action.dest,
        "flags": list(action.option_strings),
        "primary": _primary(action),
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
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # a --target install without metadata on the path
        import sglang

        return str(getattr(sglang, "__version__", "unknown"))


def build_parser(stubs: StubFinder | None) -> argparse.ArgumentParser:
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
    stubs = StubFinder() if stub_missing else None
    parser = build_parser(stubs)
    titles = _group_titles(parser)
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
    text = json.dumps(dump(opts.stub_missing), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    if opts.output:
        with open(opts.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
