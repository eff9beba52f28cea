"""Flag drift between SGLang versions, driven by the table in ``data/drift.yaml``.

Two uses:

* validation offers a translation for a flag that is missing or deprecated in the
  chosen version (:func:`translation_for`);
* :func:`retarget` rewrites a whole configuration from one version to another and lists
  every change and every flag that has no counterpart.

A rule is applicable towards a target schema when a flag of its ``old`` side that the
configuration sets is missing or deprecated there and its ``new`` side is valid there.
The reverse direction (``new`` back to ``old``) serves older targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from domain.flags._data import DataFileError, bilingual, data_file
from domain.flags.issues import Translation
from domain.flags.schema import Schema, all_schemas, load_schema

_VARIABLE_PREFIX = "$"


@dataclass(frozen=True)
class DriftRule:
    id: str
    old: Mapping[str, object]
    new: Mapping[str, object] | None  # None: no counterpart exists
    defaults: Mapping[str, object]
    reversible: bool
    note: Mapping[str, str] | None

    @property
    def has_counterpart(self) -> bool:
        return self.new is not None


@lru_cache(maxsize=1)
def drift_rules() -> tuple[DriftRule, ...]:
    raw = data_file("drift.yaml")
    try:
        return tuple(_rule_from(entry) for entry in raw["rules"])
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"drift.yaml: malformed rule {exc}") from exc


def _rule_from(entry: Mapping[str, Any]) -> DriftRule:
    note = entry.get("note")
    new = entry["new"]
    return DriftRule(
        id=str(entry["id"]),
        old=dict(entry["old"]),
        new=dict(new) if new is not None else None,
        defaults=dict(entry.get("defaults") or {}),
        reversible=bool(entry.get("reversible", True)) and new is not None,
        note=bilingual(note, f"drift.yaml: rule {entry['id']}") if note is not None else None,
    )


@lru_cache(maxsize=1)
def not_deprecated() -> frozenset[str]:
    """Flags whose schema entry says deprecated only because their help mentions another flag."""
    return frozenset(data_file("drift.yaml").get("not_deprecated") or ())


def is_deprecated(schema: Schema, flag: str) -> bool:
    spec = schema.lookup(flag)
    return spec is not None and (spec.deprecated or spec.retired) and flag not in not_deprecated()


def usable(schema: Schema, flag: str) -> bool:
    """Accepted by this version and not deprecated: a spelling to write configurations with."""
    return flag in schema and not is_deprecated(schema, flag)


# -- spellings across versions -----------------------------------------------------------


@lru_cache(maxsize=1)
def _alias_groups() -> dict[str, frozenset[str]]:
    """Every spelling -> all spellings of the same flag in any shipped version.

    ``--no-x`` of a BooleanOptionalAction is the opposite of ``--x``, not an alias."""
    groups: dict[str, set[str]] = {}
    for schema in all_schemas():
        for spec in schema.specs:
            names = {n for n in spec.names if not spec.negated(n)}
            merged = set(names).union(*(groups.get(n, set()) for n in names))
            for name in merged:
                groups[name] = merged
    return {name: frozenset(group) for name, group in groups.items()}


def spellings(flag: str) -> frozenset[str]:
    return _alias_groups().get(flag, frozenset({flag}))


def find_spelling(args: Mapping[str, object], flag: str) -> str | None:
    """The key under which ``args`` sets ``flag`` (any alias), or None."""
    if flag in args:
        return flag
    return next((name for name in spellings(flag) if name in args), None)


def spelling_in(schema: Schema, flag: str) -> str | None:
    """How ``schema``'s version spells ``flag`` (itself if accepted, else an accepted alias)."""
    if flag in schema:
        return flag
    return next((name for name in sorted(spellings(flag)) if usable(schema, name)), None)


# -- matching rules ------------------------------------------------------------------------


class _Match(NamedTuple):
    keys: dict[str, str]  # pattern flag -> the key in args (absent when a default was used)
    variables: dict[str, object]
    values: dict[str, object]  # the configuration's values for the matched flags


def _match(pattern: Mapping[str, object], defaults: Mapping[str, object], args: Mapping[str, object]) -> _Match | None:
    keys: dict[str, str] = {}
    variables: dict[str, object] = {}
    values: dict[str, object] = {}
    for flag, expected in pattern.items():
        key = find_spelling(args, flag)
        if key is None and flag not in defaults:
            return None
        actual = args[key] if key is not None else defaults[flag]
        if not _value_matches(expected, actual, variables):
            return None
        if key is not None:
            keys[flag] = key
            values[key] = actual
    return _Match(keys, variables, values) if keys else None


def _value_matches(expected: object, actual: object, variables: dict[str, object]) -> bool:
    if isinstance(expected, str) and expected.startswith(_VARIABLE_PREFIX):
        variables[expected] = actual
        return True
    # bool is an int in Python: keep `true` from matching 1.
    return type(expected) is type(actual) and expected == actual


def _substitute(pattern: Mapping[str, object], variables: Mapping[str, object]) -> dict[str, object]:
    return {
        flag: variables[v] if isinstance(v, str) and v.startswith(_VARIABLE_PREFIX) else v
        for flag, v in pattern.items()
    }


def _valid_in(schema: Schema, args: Mapping[str, object]) -> bool:
    """Every flag usable in ``schema`` and every value inside its choices."""
    for flag, value in args.items():
        spec = schema.lookup(flag)
        if spec is None or not usable(schema, flag):
            return False
        if spec.choices is not None and str(value) not in {str(c) for c in spec.choices}:
            return False
    return True


def _needs_rewrite(schema: Schema, match: _Match) -> bool:
    return any(not usable(schema, key) for key in match.keys.values())


def _conflicts(args: Mapping[str, object], match: _Match, added: Mapping[str, object]) -> bool:
    """True when the rewrite would overwrite a value the configuration sets differently."""
    for flag, value in added.items():
        key = find_spelling(args, flag)
        if key is not None and key not in match.keys.values() and args[key] != value:
            return True
    return False


def _forward(rule: DriftRule, args: Mapping[str, object], schema: Schema) -> Translation | None:
    match = _match(rule.old, rule.defaults, args)
    if match is None or rule.new is None or not _needs_rewrite(schema, match):
        return None
    added = _substitute(rule.new, match.variables)
    if not _valid_in(schema, added) or _conflicts(args, match, added):
        return None
    return Translation(rule.id, tuple(match.keys.values()), added, match.values, rule.note)


def _backward(rule: DriftRule, args: Mapping[str, object], schema: Schema) -> Translation | None:
    if not rule.reversible or rule.new is None:
        return None
    match = _match(rule.new, {}, args)
    if match is None or not _needs_rewrite(schema, match):
        return None
    added = _substitute(rule.old, match.variables)
    if not _valid_in(schema, added) or _conflicts(args, match, added):
        return None
    return Translation(rule.id, tuple(match.keys.values()), added, match.values, rule.note)


def translation_for(flag: str, args: Mapping[str, object], schema: Schema) -> Translation | None:
    """The first rule that rewrites ``flag`` (set in ``args``) into something ``schema`` accepts."""
    for rule in drift_rules():
        for direction in (_forward, _backward):
            translation = direction(rule, args, schema)
            if translation is not None and flag in translation.remove:
                return translation
    return None


def dead_end_rule(flag: str) -> DriftRule | None:
    """A rule saying ``flag`` has no counterpart (or whose counterpart the target lacks)."""
    for rule in drift_rules():
        if any(flag in spellings(f) for f in rule.old):
            return rule
    return None


# -- re-targeting a whole configuration -------------------------------------------------------


@dataclass(frozen=True)
class NoCounterpart:
    """A flag dropped while re-targeting, because the target version has nothing like it."""

    flag: str
    value: object
    note: Mapping[str, str] | None = None


class RetargetResult(NamedTuple):
    args: dict[str, object]
    changes: tuple[Translation, ...]
    no_counterpart: tuple[NoCounterpart, ...]


def retarget(server_args: Mapping[str, object], from_version: str, to_version: str) -> RetargetResult:
    """Rewrite ``server_args`` written for ``from_version`` so that ``to_version`` accepts it.

    Aliases are respelled, drift rules applied (both directions), switches set to false
    that the target lacks are dropped, and anything else the target does not know is
    removed and listed in ``no_counterpart``."""
    load_schema(from_version)  # an unknown source version is an error, not a silent no-op
    target = load_schema(to_version)
    args = dict(server_args)
    changes = [*_respell_aliases(args, target), *_apply_rules(args, target)]
    changes.extend(_drop_false_switches(args, target))
    missing = _remove_unknown(args, target)
    return RetargetResult(args, tuple(changes), tuple(missing))


def _apply(args: dict[str, object], translation: Translation) -> None:
    for key in translation.remove:
        args.pop(key, None)
    args.update(translation.add)


def apply_translations(server_args: Mapping[str, object], translations: Iterable[Translation]) -> dict[str, object]:
    """``server_args`` with each translation applied in turn (e.g. those a FlagReport offers)."""
    args = dict(server_args)
    for translation in translations:
        _apply(args, translation)
    return args


def _respell_aliases(args: dict[str, object], target: Schema) -> list[Translation]:
    changes = []
    for key in list(args):
        if key in target:
            continue
        spelled = spelling_in(target, key)
        if spelled is not None and spelled not in args:
            change = Translation("alias", (key,), {spelled: args[key]}, {key: args[key]})
            _apply(args, change)
            changes.append(change)
    return changes


def _apply_rules(args: dict[str, object], target: Schema) -> list[Translation]:
    changes: list[Translation] = []
    applied: set[str] = set()
    progress = True
    while progress:  # a rewrite can enable another (e.g. a respelled flag); each rule once
        progress = False
        for rule in drift_rules():
            if rule.id in applied:
                continue
            change = _forward(rule, args, target) or _backward(rule, args, target)
            if change is not None:
                _apply(args, change)
                changes.append(change)
                applied.add(rule.id)
                progress = True
    return changes


def _drop_false_switches(args: dict[str, object], target: Schema) -> list[Translation]:
    """``flag: false`` means "not passed", so a switch the target lacks can simply go."""
    dropped = [k for k, v in args.items() if v is False and k not in target]
    for key in dropped:
        del args[key]
    return [Translation("unset_switch", (key,), {}, {key: False}) for key in dropped]


def _remove_unknown(args: dict[str, object], target: Schema) -> list[NoCounterpart]:
    missing = []
    for key in [k for k in args if k not in target]:
        rule = dead_end_rule(key)
        missing.append(NoCounterpart(key, args.pop(key), rule.note if rule is not None else None))
    return missing
