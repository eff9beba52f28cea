"""Engine flag schemas, one JSON file per engine and version.

The files in ``schemas/`` are dumps of each engine's argument parser made from the real
packages: ``sglang_args_<version>.json`` by ``runner/sglang_side/schema_dump.py`` (SGLang's
``ServerArgs.add_cli_args``), ``vllm_args_<version>.json`` by
``runner/vllm_side/schema_dump.py`` (``vllm serve``'s parser).  One :class:`FlagSpec` and
one :class:`Schema` serve every engine; how an engine's dump is read is its flag
dialect's (``domain/flags/dialect.py``).  Everything here matches flags by their exact
spelling: argparse's prefix matching (``--prefill-only`` silently becoming
``--prefill-only-disable-kv-cache``) is exactly what validation must never do.

Flag names are handled without their leading dashes, as plans write them
(``tp-size: 8``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.?(rc|post)(\d+))?$")

# Action classes whose flag takes no value on the command line.
_NO_VALUE_NARGS = 0
LIST_NARGS = frozenset({"+", "*"})


class SchemaError(ValueError):
    """No schema for a version, or a schema file that is not shaped as expected."""


class UnknownVersion(SchemaError):
    """A version neither shipped nor dumped by a registered runner host."""

    def __init__(self, version: str, versions: str):
        super().__init__(f"no flag schema for SGLang {version}: benchdeck ships none and no registered runner "
                         f"reports it (versions that exist: {versions or 'none'})")
        self.version = version
        self.versions = versions


def version_key(version: str) -> tuple[int, int, int, int, int]:
    """Sort key for SGLang versions: ``0.5.9 < 0.5.15rc1 < 0.5.15 < 0.5.15.post1``."""
    match = _VERSION.match(version)
    if match is None:
        raise SchemaError(f"not an SGLang release version: {version!r}")
    major, minor, patch, tag, number = match.groups()
    stage = {"rc": 0, None: 1, "post": 2}[tag]
    return int(major), int(minor), int(patch), stage, int(number or 0)


def strip_dashes(flag: str) -> str:
    """``--tp-size`` -> ``tp-size``; names without dashes pass through."""
    return flag[2:] if flag.startswith("--") else flag


@dataclass(frozen=True)
class FlagSpec:
    """One argparse action of an engine's parser: all its spellings and how it takes a value."""

    dest: str
    names: tuple[str, ...]  # every long spelling, hidden ones included, without dashes
    primary: str
    action: str
    type: str | None
    nargs: int | str | None
    default: Any
    choices: tuple[Any, ...] | None
    help: str
    deprecated: bool
    replacement: str | None
    suppressed: bool  # the whole action is left out of --help
    negative: frozenset[str] = frozenset()  # spellings that store False (``no-x``, ``disable-x``)
    hidden: frozenset[str] = frozenset()  # single spellings left out of --help
    short: tuple[str, ...] = ()  # ``-tp``: accepted by the engine, never written by a plan
    group: str | None = None
    none_in_choices: bool = False  # JSON null among the choices: "None" (unset) passes them

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FlagSpec:
        """An entry of SGLang's dump (``runner/sglang_side/schema_dump.py``)."""
        choices = raw.get("choices")
        names = tuple(strip_dashes(f) for f in raw["flags"])
        primary = strip_dashes(str(raw["primary"]))
        boolean_optional = raw["action"] == "BooleanOptionalAction"
        return cls(
            dest=str(raw["dest"]),
            names=names,
            primary=primary,
            action=str(raw["action"]),
            type=raw.get("type"),
            nargs=raw.get("nargs"),
            default=raw.get("default"),
            choices=tuple(choices) if choices is not None else None,
            help=str(raw.get("help") or ""),
            deprecated=bool(raw.get("deprecated")),
            replacement=raw.get("replacement"),
            suppressed=bool(raw.get("suppressed")),
            # argparse's BooleanOptionalAction adds ``--no-x`` beside ``--x``.
            negative=frozenset(n for n in names if boolean_optional and n != primary and n.startswith("no-")),
        )

    @property
    def takes_no_value(self) -> bool:
        """True for switches: store_true, BooleanOptionalAction, deprecated switches."""
        return self.nargs == _NO_VALUE_NARGS

    @property
    def takes_list(self) -> bool:
        return self.nargs in LIST_NARGS

    @property
    def value_optional(self) -> bool:
        """``nargs='?'``: the flag may stand alone or take one value."""
        return self.nargs == "?"

    @property
    def retired(self) -> bool:
        """SGLang's ``DeprecatedAction``: the flag stops the launch or does nothing at all."""
        return self.action == "DeprecatedAction"

    def negated(self, name: str) -> bool:
        """True when ``name`` is a spelling that stores False (``--no-x`` of a
        BooleanOptionalAction, vLLM's ``--disable-x``)."""
        return name in self.negative

    def hidden_spelling(self, name: str) -> bool:
        """Left out of the engine's --help: the whole action, or this one spelling."""
        return self.suppressed or name in self.hidden

    @property
    def positional(self) -> bool:
        return not self.names

    @property
    def optional(self) -> bool:
        """vLLM's ``optional_type(...)``: ``None`` or an empty string reads as "unset"."""
        return bool(self.type and self.type.startswith("optional:"))

    @property
    def base_type(self) -> str:
        return (self.type or "str").removeprefix("optional:")

    def positive_name(self) -> str:
        """The spelling that stores True (``enable-x`` for ``enable-x``/``disable-x``)."""
        return next((n for n in self.names if n not in self.negative), self.primary)

    def negative_name(self) -> str | None:
        """The visible spelling that stores False, if the switch has one."""
        return next((n for n in self.names if n in self.negative and n not in self.hidden), None)


@dataclass(frozen=True)
class Schema:
    """The full server-argument schema of one version of one engine."""

    version: str
    specs: tuple[FlagSpec, ...]
    stubbed: tuple[str, ...] = ()
    family: str = "sglang"
    _by_name: dict[str, FlagSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for spec in self.specs:
            for name in spec.names:
                self._by_name[name] = spec

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Schema:
        """Build from the JSON the dump script writes (also how the runner stores it in DuckDB)."""
        try:
            specs = tuple(FlagSpec.from_dict(a) for a in raw["args"])
            return cls(
                version=str(raw["sglang_version"]),
                specs=specs,
                stubbed=tuple(raw.get("stubbed") or ()),
            )
        except (KeyError, TypeError) as exc:
            raise SchemaError(f"malformed schema: missing or bad field {exc}") from exc

    def lookup(self, flag: str) -> FlagSpec | None:
        """The action for an exact flag spelling (aliases included), or None."""
        return self._by_name.get(strip_dashes(flag))

    def __contains__(self, flag: object) -> bool:
        return isinstance(flag, str) and self.lookup(flag) is not None

    @property
    def names(self) -> frozenset[str]:
        """Every accepted spelling, without dashes."""
        return frozenset(self._by_name)


def schema_path(version: str, schema_dir: Path | None = None, family: str = "sglang") -> Path:
    return (schema_dir or SCHEMA_DIR) / f"{family}_args_{version}.json"


def known_versions(schema_dir: Path | None = None, family: str = "sglang") -> list[str]:
    """Versions of ``family`` with a shipped schema, oldest first."""
    directory = schema_dir or SCHEMA_DIR
    pattern = re.compile(rf"^{re.escape(family)}_args_(?P<version>.+)\.json$")
    found = (pattern.match(p.name) for p in directory.glob(f"{family}_args_*.json"))
    versions = [m["version"] for m in found if m is not None and _VERSION.match(m["version"])]
    return sorted(versions, key=version_key)


def newest_version(schema_dir: Path | None = None, family: str = "sglang", name: str = "SGLang") -> str:
    versions = known_versions(schema_dir, family)
    if not versions:
        raise SchemaError(f"no {name} schemas in {schema_dir or SCHEMA_DIR}")
    return versions[-1]


SchemaReader = Callable[[Mapping[str, Any]], Schema]


# Schemas dumped from a runner host's installed SGLang (runner/schema_sync.py), by version.
# Held per process, so that every reader of ``load_schema`` (flag report, argv, risk, drift,
# the form) sees a host's version without the schema being passed down each call: the runner
# registers its own dump at start-up, the CLI and the app the dumps the database stores.
_HOST_SCHEMAS: dict[str, Schema] = {}


def register_host_schema(raw: Mapping[str, Any]) -> Schema:
    """Make a host-dumped schema the one ``load_schema`` returns for its version (what is
    installed wins over what is shipped: that is what the server will parse)."""
    schema = Schema.from_dict(raw)
    version_key(schema.version)  # a dump names a release version, or it is refused here
    _HOST_SCHEMAS[schema.version] = schema
    return schema


def host_schema_versions() -> list[str]:
    """Versions registered from runner hosts in this process, oldest first."""
    return sorted(_HOST_SCHEMAS, key=version_key)


def forget_host_schemas() -> None:
    """Drop the registered host schemas (tests; an app that re-reads the database)."""
    _HOST_SCHEMAS.clear()


def available_versions() -> list[str]:
    """Every version a plan can be validated against: shipped or dumped by a host."""
    return sorted(set(known_versions()) | set(_HOST_SCHEMAS), key=version_key)


def load_schema(version: str, schema_dir: Path | None = None) -> Schema:
    """A runner host's dumped schema of ``version`` if one is registered, else the shipped
    one; SchemaError naming the versions that exist if there is neither."""
    if schema_dir is None and version in _HOST_SCHEMAS:
        return _HOST_SCHEMAS[version]
    try:
        return load_schema_file(schema_path(version, schema_dir), Schema.from_dict, "SGLang")
    except SchemaError as exc:
        if schema_path(version, schema_dir).exists():
            raise
        versions = ", ".join(available_versions() if schema_dir is None else known_versions(schema_dir))
        raise UnknownVersion(version, versions) from exc


@lru_cache(maxsize=32)
def load_schema_file(path: Path, read: SchemaReader, name: str) -> Schema:
    """One dump file read by its engine's ``read``; ``name`` says whose in errors."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SchemaError(f"no schema for this {name} version: {path.name}") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: {exc}") from exc
    return read(raw)


def all_schemas(schema_dir: Path | None = None) -> list[Schema]:
    """Every shipped schema, oldest first."""
    return [load_schema(v, schema_dir) for v in known_versions(schema_dir)]


def versions_with_flag(flag: str, schemas: Iterable[Schema]) -> list[str]:
    """The versions (among ``schemas``) that accept this exact spelling."""
    return [s.version for s in schemas if flag in s]
