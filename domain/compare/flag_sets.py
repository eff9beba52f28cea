"""A run's server flags as the comparability key reads them: under their primary spelling, with the
schema defaults an absent flag takes when the set is known, and which flags are conditions of
the key (the rule-risk layers that change what a run measures)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from domain.compare.values import UNSET_TEXT, normalise
from domain.flags.risk import classify_flag
from domain.flags.schema import Schema, SchemaError, known_versions, load_schema, newest_version

# The flag conditions: every flag of these layers that either run sets.  All three are
# 'high' in risk_layers.yaml and are the layers issue #15 names; `model_change` is high too
# but its flags that change the measured model are conditions already (load_format,
# model_revision) and the rest is loader plumbing (download-dir, weight loaders).
VERDICT_LAYERS = ("quantization", "speculative", "experimental")


# --dtype and --quantization are the `dtype` condition ("dtype / quantization") already.
CONDITION_FLAGS = frozenset({"dtype", "quantization"})


FLAG_PREFIX = "flag:"


@dataclass(frozen=True)
class FlagSet:
    """One run's server flags under their primary spelling, and whether an absent flag is
    known to be at its schema default (:func:`flag_set_known`)."""

    values: dict[str, object]
    known: bool
    schema: Schema | None

    def value(self, flag: str) -> object:
        """As the run had it: the value set, else its default (UNSET_TEXT for a None default)
        when the flag set is known, else None (unknown)."""
        if flag in self.values:
            return self.values[flag]
        if not self.known:
            return None
        spec = self.schema.lookup(flag) if self.schema is not None else None
        default = normalise(spec.default) if spec is not None else None
        return UNSET_TEXT if default is None else default


def flag_set_known(first: Mapping[str, Any]) -> bool:
    """Whether a run's flag set is complete, so that an absent flag is at its default.

    :func:`domain.results.frames.point_row` knows it (measured and emulated runs, imports
    that carried the server's resolved args) and fills the ``load_format`` and
    ``model_revision`` defaults exactly then; a ``server_args_known`` column says it outright."""
    stated = normalise(first.get("server_args_known"))
    if stated is not None:
        return bool(stated)
    if first.get("source") in ("measured", "emulated"):
        return True
    args = first.get("server_args") or {}
    return any(flag not in args and normalise(first.get(column)) is not None
               for flag, column in (("load-format", "load_format"), ("revision", "model_revision")))


def run_flags(rows: pd.DataFrame) -> FlagSet:
    """A run's flags (its first row's ``server_args``), spelled as its schema's primary names."""
    return point_flags(rows.iloc[0])


def point_flags(first: Mapping[str, Any]) -> FlagSet:
    """The flags of one row of the points frame (every row of a run carries the same).  A
    vLLM run's flags compare as written: the SGLang schemas do not describe them."""
    schema = None if first.get("engine") == "vllm" else _schema_or_none(first.get("engine_version"))
    values: dict[str, object] = {}
    for flag, raw in dict(first.get("server_args") or {}).items():
        name, value = _canonical(str(flag), raw, schema)
        value = normalise(value)
        if value is not None:
            values[name] = value
    return FlagSet(values, flag_set_known(first), schema)


def _canonical(flag: str, value: object, schema: Schema | None) -> tuple[str, object]:
    """The primary spelling; ``no-x: true`` is ``x: false`` (and ``no-x: false`` says nothing)."""
    spec = schema.lookup(flag) if schema is not None else None
    if spec is None:
        return flag, value
    if spec.negated(flag):
        return spec.primary, False if value else None
    return spec.primary, value


def _schema_or_none(engine_version: object) -> Schema | None:
    try:
        return load_schema(_schema_version(engine_version))
    except SchemaError:  # no schema shipped at all: flags compare as written, defaults unknown
        return None


def verdict_flags(flag_sets: Sequence[FlagSet]) -> list[str]:
    """The flags of :data:`VERDICT_LAYERS` any of the runs sets, sorted: the flag conditions."""
    names = {flag for flags in flag_sets for flag in flags.values}
    return sorted(f for f in names if f not in CONDITION_FLAGS and _in_verdict_layer(f))


def _in_verdict_layer(flag: str) -> bool:
    layer = classify_flag(flag)
    return layer is not None and layer.id in VERDICT_LAYERS


def flag_condition(flag: str) -> str:
    return FLAG_PREFIX + flag


def condition_flag(name: str) -> str | None:
    """The flag of a flag condition (``flag:kv-cache-dtype`` → ``kv-cache-dtype``); None otherwise."""
    return name[len(FLAG_PREFIX):] if name.startswith(FLAG_PREFIX) else None


def _schema_version(engine_version: object) -> str:
    """The engine's own schema when shipped; else the newest (the emulator speaks the newest)."""
    version = normalise(engine_version)
    if isinstance(version, str) and version in known_versions():
        return version
    return newest_version()
