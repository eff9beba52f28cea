"""Importing an engine's argument code without its heavy dependencies, for the schema dumps
that run inside each engine's own interpreter (``runner/sglang_side/schema_dump.py``,
``runner/vllm_side/schema_dump.py``), and the parts of a dump both engines write alike.

Stdlib only: it runs where the app's packages are not installed.  The dumps run as scripts,
so they import this file by path (they put this directory on ``sys.path``), not as part of
benchdeck's packages.

Stubbing is lazy: a module is stubbed only once its absence has stopped the engine's import.
Engines guard many optional imports with ``try/except ImportError`` and fall back by
themselves; stubbing those up front would send them down the "installed" branch with fake
objects, and a finder that answered every lookup would also fool ``importlib.util.find_spec``.
What an engine may have stubbed (which missing module, which of its own modules) is the
engine's rule, passed in as ``stub_for``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import re
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

CANNOT_IMPORT = re.compile(r"cannot import name '(?P<attr>\w+)' from '(?P<module>[\w.]+)'")
BUILTIN_BOOL_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)


class _StubMeta(type):
    """Metaclass of stub objects: every attribute, call, subscript or union works."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = make_stub(f"{cls.__qualname__}.{attr}", type(cls))
        setattr(cls, attr, value)  # same object next time, so ``is`` checks hold
        return value

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "_stub_origin" not in cls.__dict__:  # a real subclass: build an instance
            return super().__call__(*args, **kwargs)
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the decorated function
        return make_stub(f"{cls.__qualname__}()", type(cls))

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


class _OneResultStubMeta(_StubMeta):
    """vLLM's stubs: one result per stub, so two calls compare equal (``torch.library``'s
    ``infer_schema`` of an op and of its implementation must match)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "_stub_origin" not in cls.__dict__ or (len(args) == 1 and not kwargs and callable(args[0])):
            return super().__call__(*args, **kwargs)
        if "_stub_result" not in cls.__dict__:
            type.__setattr__(cls, "_stub_result", make_stub(f"{cls.__qualname__}()", type(cls)))
        return cls.__dict__["_stub_result"]

    def __hash__(cls) -> int:
        return id(cls)


class _StubBase(metaclass=_StubMeta):
    """Base of every stub, so an engine's classes may inherit from a stubbed one."""

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


def make_stub(qualname: str, meta: type[_StubMeta] = _StubMeta) -> Any:
    """A fresh stub class (a class, not an instance, so it can be a base class)."""
    return meta(qualname.rsplit(".", 1)[-1], (_StubBase,), {"_stub_origin": qualname})


class _StubModule(types.ModuleType):
    """A module whose every attribute is a stub; a package, so submodules import too."""

    def __init__(self, name: str, meta: type[_StubMeta]) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__file__ = f"<stub {name}>"
        self._stub_meta = meta

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = make_stub(f"{self.__name__}.{attr}", self._stub_meta)
        setattr(self, attr, value)
        return value


class _StubDistribution(importlib.metadata.Distribution):
    """Package metadata for a stubbed package, for an engine that asks ``importlib.metadata.version``."""

    def __init__(self, name: str, version: str) -> None:
        self._text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self._text if filename in ("METADATA", "PKG-INFO") else None

    def locate_file(self, path: Any) -> Any:
        return path


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on sys.meta_path; answers only for modules already chosen to be stubbed.

    With ``pins`` (vLLM's), a stubbed package also has metadata and a ``__version__``: the
    version the engine's wheel pins it to, or the lowest it admits, so that the engine's
    version checks take the branch a real install would, and each stub answers every call
    with one result.  Without (SGLang's), neither: each call makes a fresh stub."""

    def __init__(self, pins: dict[str, str] | None = None) -> None:
        self.modules: set[str] = set()
        self.attributes: set[str] = set()
        self.pins = pins
        self.meta: type[_StubMeta] = _StubMeta if pins is None else _OneResultStubMeta

    def version_of(self, name: str) -> str:
        return (self.pins or {}).get(name.lower().replace("_", "-"), "0.0.0")

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if self.pins is not None and name and name.replace("-", "_") in self.modules:
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
        module = _StubModule(spec.name, self.meta)
        if self.pins is not None:
            module.__version__ = self.version_of(spec.name.split(".")[0])  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def recorded(self) -> list[str]:
        """Stubbed modules, and ``module:name`` for names missing from real modules."""
        return sorted(self.modules | self.attributes)


def failed_module(exc: BaseException, package: str) -> str | None:
    """The innermost module of ``package`` whose top-level code raised ``exc``, if any."""
    failed = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = str(frame.f_globals.get("__name__", ""))
        if frame.f_code.co_name == "<module>" and name.split(".")[0] == package:
            failed = name
        tb = tb.tb_next
    return failed


def stub_missing_name(exc: BaseException, stubs: StubFinder, package: str) -> bool:
    """A name that a (newer) dependency no longer has, e.g. a transformers class: stubbed on
    the real module.  False when ``exc`` is not that."""
    match = CANNOT_IMPORT.search(str(exc)) if isinstance(exc, ImportError) else None
    if not (match and match["module"].split(".")[0] != package and match["module"] in sys.modules):
        return False
    setattr(sys.modules[match["module"]], match["attr"], make_stub(match["attr"], stubs.meta))
    stubs.attributes.add(f"{match['module']}:{match['attr']}")
    return True


def retry_with_stubs(attempt: Callable[[], Any], stub_for: Callable[[BaseException], bool], max_retries: int) -> Any:
    """``attempt()`` again after each failure ``stub_for`` could stub something for; the
    failure itself when it could not.  No module is purged between tries: Python already
    drops every module whose import raised, and re-running modules that did finish would
    repeat their side effects (a config class registered with transformers twice)."""
    for _ in range(max_retries):
        try:
            return attempt()
        except Exception as exc:
            if not stub_for(exc):
                raise
            # stderr, so a surprising stub can be traced back to its cause.
            print(f"stub-missing: after {type(exc).__name__}: {exc}", file=sys.stderr)
    raise RuntimeError(f"gave up after stubbing {max_retries} modules")


# --------------------------------------------------------------------------- the dump


def group_titles(parser: argparse.ArgumentParser) -> dict[int, str | None]:
    """Each action's argument group title, by the action's id."""
    titles: dict[int, str | None] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            titles.setdefault(id(action), group.title)
    return titles


def primary(option_strings: Sequence[str]) -> str | None:
    """The first long flag, as the engine lists it (``--tp-size``, not ``-tp``)."""
    longs = [f for f in option_strings if f.startswith("--")]
    candidates = longs or list(option_strings)
    return candidates[0] if candidates else None


def replacement_in(help_text: str, patterns: Sequence[re.Pattern[str]], trailing: str) -> str | None:
    """The flag a deprecated flag's help names as its successor ("use --x instead"), by the
    engine's own patterns; ``trailing`` punctuation is not part of it."""
    for pattern in patterns:
        match = pattern.search(help_text)
        if match:
            return match.group(1).rstrip(trailing)
    return None


def callable_name(kind: Any) -> str | None:
    name = getattr(kind, "__name__", None)
    if name is None and hasattr(kind, "func"):  # functools.partial
        name = getattr(kind.func, "__name__", None)
    return name


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except Exception:  # a --target install without metadata on the path
        return None


def write_dump(data: dict[str, Any], output: str | None) -> None:
    """The dump as the schema files hold it: indented JSON, strict (no NaN), UTF-8."""
    text = json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
