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
import json
import math
import os
import platform
import re
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

_CLI_ARGS_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args")
_PARSER_MODULE = "vllm.utils.argparse_utils"
# vLLM modules whose code defines the flags: stubbing one would drop flags silently.
_NEVER_STUB = re.compile(
    r"^vllm(\.config(\..*)?|\.platforms(\.cuda|\.interface)?|\.engine\.arg_utils|\.entrypoints\..*cli_args|\.utils\.argparse_utils)$"
)
_MAX_RETRIES = 400
_CANNOT_IMPORT = re.compile(r"cannot import name '(?P<attr>\w+)' from '(?P<module>[\w.]+)'")
# "X is deprecated", "will be deprecated", "Deprecated: ...", but not "allow deprecated
# quantization methods" nor "enable deprecated Prometheus metrics" (about other things).
_SAYS_DEPRECATED = re.compile(r"\b(?:is|are|been|be|now)\s+deprecated\b|(?:^|[.!]\s+|\()deprecated\b", re.IGNORECASE)
_BUILTIN_BOOL_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)
_REPLACEMENT_PATTERNS = (
    re.compile(r"\buse\s+(--[A-Za-z0-9][\w.{},=<>-]*)\s+instead\b", re.IGNORECASE),
    re.compile(r"deprecated[,:;]?\s+(?:please\s+)?use\s+(--[A-Za-z0-9][\w.{},=<>-]*)", re.IGNORECASE),
    re.compile(r"\breplaced\s+by\s+(--[A-Za-z0-9][\w.{},=<>-]*)", re.IGNORECASE),
)


# --------------------------------------------------------------------------- stubs


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
        # One result per stub, so two calls compare equal (torch.library schemas).
        if "_stub_result" not in cls.__dict__:
            type.__setattr__(cls, "_stub_result", make_stub(f"{cls.__qualname__}()"))
        return cls.__dict__["_stub_result"]

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

    def __hash__(cls) -> int:
        return id(cls)


class _StubBase(metaclass=_StubMeta):
    """Base of every stub, so vLLM classes may inherit from a stubbed one."""

    _stub_origin = "base"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # A stub used as a pydantic field type (torch.dtype in ModelConfig) accepts anything.
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
        self.__version__ = "0.0.0"  # StubFinder sets the pinned version

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = make_stub(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _StubDistribution(importlib.metadata.Distribution):
    """Package metadata for a stubbed package: vLLM asks ``importlib.metadata.version``."""

    def __init__(self, name: str, version: str) -> None:
        self._text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self._text if filename in ("METADATA", "PKG-INFO") else None

    def locate_file(self, path: Any) -> Any:
        return path


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on sys.meta_path; answers only for modules already chosen to be stubbed.

    A stubbed package reports the version the wheel pins it to (``Requires-Dist:
    torch==2.14.0``), or the lowest it admits, so that vLLM's version checks take the
    branch a real install would."""

    def __init__(self, pins: dict[str, str] | None = None) -> None:
        self.modules: set[str] = set()
        self.attributes: set[str] = set()
        self.pins = pins or {}

    def version_of(self, name: str) -> str:
        return self.pins.get(name.lower().replace("_", "-"), "0.0.0")

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name and name.replace("-", "_") in self.modules:
            yield _StubDistribution(name, self.version_of(name))

    def covers(self, fullname: str) -> bool:
        return any(fullname == m or fullname.startswith(m + ".") for m in self.modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.covers(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__version__ = self.version_of(spec.name.split(".")[0])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def recorded(self) -> list[str]:
        """Stubbed modules, and ``module:name`` for names missing from real modules."""
        return sorted(self.modules | self.attributes)


def _is_compiled_extension(name: str) -> bool:
    """A vLLM module with no Python source beside its package (``vllm._C``, ``vllm._moe_C``)."""
    parent, _, leaf = name.rpartition(".")
    package = sys.modules.get(parent)
    paths = list(getattr(package, "__path__", None) or ())
    return bool(paths) and not any(
        os.path.exists(os.path.join(p, leaf + ".py")) or os.path.isdir(os.path.join(p, leaf)) for p in paths
    )


def _failed_vllm_module(exc: BaseException) -> str | None:
    """The innermost vllm module whose top-level code raised ``exc``, if any."""
    failed = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = str(frame.f_globals.get("__name__", ""))
        if frame.f_code.co_name == "<module>" and name.split(".")[0] == "vllm":
            failed = name
        tb = tb.tb_next
    return failed


def _stub_for(exc: BaseException, stubs: StubFinder) -> bool:
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
    match = _CANNOT_IMPORT.search(str(exc)) if isinstance(exc, ImportError) else None
    if match and match["module"].split(".")[0] != "vllm" and match["module"] in sys.modules:
        setattr(sys.modules[match["module"]], match["attr"], make_stub(match["attr"]))
        stubs.attributes.add(f"{match['module']}:{match['attr']}")
        return True
    failed = _failed_vllm_module(exc)
    if failed and not _NEVER_STUB.match(failed) and not stubs.covers(failed):
        # A vLLM module that runs torch or CUDA code at import time (kernels, platforms).
        stubs.modules.add(failed)
        print(f"stub-missing: stubbing the vLLM module {failed}", file=sys.stderr)
        return True
    return False


def import_with_stubs(module: str, stubs: StubFinder) -> types.ModuleType:
    """Import ``module``, stubbing whatever stops it, one failure at a time."""
    for _ in range(_MAX_RETRIES):
        try:
            return importlib.import_module(module)
        except Exception as exc:
            if not _stub_for(exc, stubs):
                raise
            _log_stub(exc)
    raise RuntimeError(f"gave up after stubbing {_MAX_RETRIES} modules")


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


def _cli_args_module(stubs: StubFinder) -> types.ModuleType:
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


def _pretend_cuda(stubs: StubFinder) -> None:
    """Resolve vLLM's platform as CUDA, the platform benchdeck serves on.

    Building the parser instantiates ``VllmConfig``'s default configs, and ``DeviceConfig``
    asks ``current_platform`` for a device type; with no GPU and NVML stubbed, vLLM's own
    detection finds none and raises. ``NonNvmlCudaPlatform`` asks torch (stubbed) instead
    of NVML, so nothing here touches a device."""
    platforms = import_with_stubs("vllm.platforms", stubs)
    cuda = import_with_stubs("vllm.platforms.cuda", stubs)
    setattr(platforms, "_current_platform", cuda.NonNvmlCudaPlatform())  # noqa: B010 (a module global)


def build_parser(stubs: StubFinder) -> tuple[argparse.ArgumentParser, str]:
    """The parser ``vllm serve`` builds, and the function that built it."""
    sys.meta_path.insert(0, stubs)
    with _help_requested(), contextlib.redirect_stdout(io.StringIO()):
        flexible = import_with_stubs(_PARSER_MODULE, stubs).FlexibleArgumentParser
        cli_args = _cli_args_module(stubs)
        _pretend_cuda(stubs)
        for _ in range(_MAX_RETRIES):
            # Some config defaults import more modules lazily, while the parser is built.
            try:
                parser = flexible(prog="vllm serve", usage="vllm serve [model_tag] [options]")
                return cli_args.make_arg_parser(parser), f"{cli_args.__name__}.make_arg_parser"
            except Exception as exc:
                if not _stub_for(exc, stubs):
                    raise
                _log_stub(exc)
    raise RuntimeError(f"gave up after stubbing {_MAX_RETRIES} modules")


def _log_stub(exc: BaseException) -> None:
    # stderr, so a surprising stub can be traced back to its cause.
    print(f"stub-missing: after {type(exc).__name__}: {exc}", file=sys.stderr)


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


def _callable_name(kind: Any) -> str | None:
    name = getattr(kind, "__name__", None)
    if name is None and hasattr(kind, "func"):  # functools.partial
        name = getattr(kind.func, "__name__", None)
    return name


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
    if isinstance(action, _BUILTIN_BOOL_ACTIONS):
        return "bool"
    if kind is None:
        return None
    name = _callable_name(kind)
    if name == "_optional_type":
        inner = _inner_type(kind)
        return "optional:" + (_plain_type_name(inner) if inner is not None else "str")
    return _plain_type_name(kind)


def _plain_type_name(kind: Any) -> str:
    name = _callable_name(kind) or type(kind).__name__
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
    for pattern in _REPLACEMENT_PATTERNS:
        match = pattern.search(help_text)
        if match:
            return match.group(1).rstrip(".,;)`'")
    return None


def _group_titles(parser: argparse.ArgumentParser) -> dict[int, str | None]:
    titles: dict[int, str | None] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            titles.setdefault(id(action), group.title)
    return titles


def _registered(parser: argparse.ArgumentParser) -> dict[int, list[str]]:
    """Every option string the parser accepts, by action (hidden spellings included)."""
    found: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        found.setdefault(id(action), []).append(option)
    return found


def _primary(option_strings: Sequence[str]) -> str | None:
    """The first long flag, as vLLM lists it (``--tensor-parallel-size``, not ``-tp``)."""
    longs = [f for f in option_strings if f.startswith("--")]
    candidates = longs or list(option_strings)
    return candidates[0] if candidates else None


def _negative(action: argparse.Action, accepted: Sequence[str]) -> list[str]:
    negative = getattr(action, "negative_option_strings", None)
    if negative is not None:  # vLLM's EnableDisableAction
        return sorted(o for o in accepted if o in negative)
    if isinstance(action, argparse.BooleanOptionalAction):
        return [o for o in accepted if o.startswith("--no-")]
    return []


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
        "primary": _primary(visible),
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
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return "unknown"


def dump() -> dict[str, Any]:
    stubs = StubFinder(wheel_pins())
    parser, entry = build_parser(stubs)
    titles = _group_titles(parser)
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
    text = json.dumps(dump(), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    if opts.output:
        with open(opts.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
