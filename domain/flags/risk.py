"""Rule-risk labels for flags and contest rule profiles, both from data files.

``data/risk_layers.yaml`` puts every flag in a layer of the seed's table (benchmark
conditions, serving, parallelism, cache, disaggregation, speculative, quantization,
experimental) or one of the project's extra layers; each layer carries a risk level.
A flag no layer claims is *unclassified* and reported as such, never treated as low.

``data/rules/<profile>.yaml`` lists what a contest's rules ban; :func:`assess_risk`
reports each active flag's layer, the highest risk, and every broken rule with its reason.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, cast

from domain.core.i18n import t
from domain.flags._data import DATA_DIR, DataFileError, bilingual, data_file, load_yaml_file, pick_language
from domain.flags.schema import Schema, load_schema

RiskLevel = Literal["low", "low_medium", "medium", "medium_high", "high"]
RISK_LEVELS: tuple[RiskLevel, ...] = ("low", "low_medium", "medium", "medium_high", "high")
RULES_DIR = DATA_DIR / "rules"
DEFAULT_PROFILE = "2025"


# -- layers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RiskLayer:
    id: str
    origin: str  # "seed" (the seed's table) or "benchdeck" (added by this project)
    risk: RiskLevel
    name: Mapping[str, str]
    note: Mapping[str, str]
    flags: frozenset[str]
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class ValueNote:
    """A flag value that changes what a result means, noted under every profile."""

    id: str
    flag: str
    value: str
    stronger_when_layer: str | None


@dataclass(frozen=True)
class LayerTable:
    layers: tuple[RiskLayer, ...]
    value_notes: tuple[ValueNote, ...]

    def layer(self, layer_id: str) -> RiskLayer:
        return next(layer for layer in self.layers if layer.id == layer_id)

    def classify(self, flag: str) -> RiskLayer | None:
        """Exact names first (any layer), then patterns in file order; None = unclassified."""
        for layer in self.layers:
            if flag in layer.flags:
                return layer
        for layer in self.layers:
            if any(fnmatch.fnmatchcase(flag, p) for p in layer.patterns):
                return layer
        return None


@lru_cache(maxsize=1)
def risk_layers() -> LayerTable:
    """SGLang's risk layers (``data/risk_layers.yaml``)."""
    return layer_table("risk_layers.yaml")


def layer_table(file_name: str) -> LayerTable:
    """An engine's risk layers and value notes from ``data/<file_name>``, checked."""
    raw = data_file(file_name)
    try:
        layers = tuple(_layer_from(entry) for entry in raw["layers"])
        notes = tuple(_value_note_from(entry) for entry in raw.get("value_notes") or ())
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"{file_name}: malformed entry {exc}") from exc
    _refuse_double_listing(layers)
    return LayerTable(layers, notes)


def _layer_from(entry: Mapping[str, Any]) -> RiskLayer:
    where = f"risk_layers.yaml: layer {entry['id']}"
    if entry["risk"] not in RISK_LEVELS:
        raise DataFileError(f"{where}: unknown risk {entry['risk']!r}")
    return RiskLayer(
        id=str(entry["id"]),
        origin=str(entry["origin"]),
        risk=cast(RiskLevel, entry["risk"]),
        name=bilingual(entry["name"], where),
        note=bilingual(entry["note"], where),
        flags=frozenset(entry.get("flags") or ()),
        patterns=tuple(entry.get("patterns") or ()),
    )


def _value_note_from(entry: Mapping[str, Any]) -> ValueNote:
    return ValueNote(str(entry["id"]), str(entry["flag"]), str(entry["value"]), entry.get("stronger_when_layer"))


def _refuse_double_listing(layers: Sequence[RiskLayer]) -> None:
    owner: dict[str, str] = {}
    for layer in layers:
        for flag in layer.flags:
            if flag in owner:
                raise DataFileError(f"risk_layers.yaml: {flag} listed in {owner[flag]} and {layer.id}")
            owner[flag] = layer.id


def classify_flag(flag: str) -> RiskLayer | None:
    return risk_layers().classify(flag)


def unclassified_flags(schema: Schema, classify: Callable[[str], RiskLayer | None] | None = None) -> list[str]:
    """Every spelling in ``schema`` that no layer claims (shown to the team, never assumed low)."""
    classify = classify or classify_flag
    return sorted(name for name in schema.names if classify(name) is None)


def risk_rank(level: RiskLevel) -> int:
    return RISK_LEVELS.index(level)


# -- profiles ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ban:
    flag: str | None = None
    layer: str | None = None
    values: frozenset[str] | None = None
    allowed: frozenset[str] | None = None  # the profile's `except:` list

    def hits(self, flag: str, value: object, flag_layer: RiskLayer | None) -> bool:
        if self.layer is not None:
            return flag_layer is not None and flag_layer.id == self.layer
        if flag != self.flag:
            return False
        text = str(value)
        if self.values is not None:
            return text in self.values
        return self.allowed is None or text not in self.allowed


@dataclass(frozen=True)
class Rule:
    id: str
    reason: Mapping[str, str]
    bans: tuple[Ban, ...]


@dataclass(frozen=True)
class RuleProfile:
    id: str
    name: Mapping[str, str]
    status: str  # "final" or "draft"
    source: Mapping[str, str]
    rules: tuple[Rule, ...]


def available_profiles(rules_dir: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (rules_dir or RULES_DIR).glob("*.yaml"))


def load_profile(profile_id: str, rules_dir: Path | None = None) -> RuleProfile:
    path = (rules_dir or RULES_DIR) / f"{profile_id}.yaml"
    if profile_id not in available_profiles(rules_dir):
        raise DataFileError(f"no rule profile {profile_id!r} in {path.parent}")
    raw = load_yaml_file(path)
    try:
        return RuleProfile(
            id=str(raw["id"]),
            name=bilingual(raw["name"], f"{path.name}: name"),
            status=str(raw["status"]),
            source=bilingual(raw["source"], f"{path.name}: source"),
            rules=tuple(_rule_from(entry, path.name) for entry in raw["rules"]),
        )
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"{path}: malformed entry {exc}") from exc


def _rule_from(entry: Mapping[str, Any], where: str) -> Rule:
    return Rule(
        id=str(entry["id"]),
        reason=bilingual(entry["reason"], f"{where}: rule {entry['id']}"),
        bans=tuple(_ban_from(b) for b in entry["bans"]),
    )


def _ban_from(entry: Mapping[str, Any]) -> Ban:
    def strings(key: str) -> frozenset[str] | None:
        return frozenset(str(v) for v in entry[key]) if key in entry else None

    return Ban(flag=entry.get("flag"), layer=entry.get("layer"), values=strings("values"), allowed=strings("except"))


# -- assessment --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagRisk:
    flag: str
    layer: RiskLayer | None  # None: unclassified

    @property
    def risk(self) -> RiskLevel | None:
        return self.layer.risk if self.layer is not None else None

    def text(self, lang: str) -> str:
        if self.layer is None:
            return t("flags.risk.flag_unclassified", lang, flag=self.flag)
        level = t(f"flags.risk.level.{self.layer.risk}", lang)
        layer = pick_language(dict(self.layer.name), lang)
        return t("flags.risk.flag_layer", lang, flag=self.flag, layer=layer, level=level)


@dataclass(frozen=True)
class RuleBreak:
    rule: str
    flag: str
    value: str
    reason: Mapping[str, str]

    def text(self, lang: str) -> str:
        reason = pick_language(dict(self.reason), lang)
        return t("flags.risk.rule_broken", lang, flag=self.flag, value=self.value, rule=self.rule, reason=reason)


@dataclass(frozen=True)
class RiskNote:
    code: str
    flag: str

    def text(self, lang: str) -> str:
        return t(f"flags.risk.note.{self.code}", lang, flag=self.flag)


@dataclass(frozen=True)
class RiskReport:
    version: str
    profile: RuleProfile
    flags: tuple[FlagRisk, ...]
    broken: tuple[RuleBreak, ...]
    notes: tuple[RiskNote, ...]

    @property
    def highest(self) -> RiskLevel | None:
        """The highest risk among classified active flags; None when there is none."""
        levels: list[RiskLevel] = [f.layer.risk for f in self.flags if f.layer is not None]
        if not levels:
            return None
        top: RiskLevel = max(levels, key=risk_rank)
        return top

    @property
    def unclassified(self) -> tuple[str, ...]:
        return tuple(f.flag for f in self.flags if f.layer is None)

    @property
    def ok(self) -> bool:
        """No broken rule (risk and unclassified flags are shown, not blocking)."""
        return not self.broken


def assess_risk(
    server_args: Mapping[str, object],
    version: str,
    profile: str | RuleProfile = DEFAULT_PROFILE,
    *,
    schema: Schema | None = None,
) -> RiskReport:
    """Each active flag's layer, the rules of ``profile`` it breaks, and value notes.

    A flag is active when set to anything but ``false``/``None``; ``--no-x`` spellings
    turn a feature off and are not counted."""
    return assess_flags_risk(server_args, schema or load_schema(version), profile, risk_layers(), classify_flag)


def assess_flags_risk(
    server_args: Mapping[str, object],
    schema: Schema,
    profile: str | RuleProfile,
    table: LayerTable,
    classify: Callable[[str], RiskLayer | None],
) -> RiskReport:
    """:func:`assess_risk` for any engine: its schema, its layer table and how it classifies
    a spelling (an engine dialect's ``risk_table`` and ``classify``)."""
    rules = load_profile(profile) if isinstance(profile, str) else profile
    active = {flag: value for flag, value in server_args.items() if _active(flag, value, schema)}
    return RiskReport(
        version=schema.version,
        profile=rules,
        flags=tuple(FlagRisk(flag, classify(flag)) for flag in active),
        broken=tuple(_broken_rules(active, rules, table)),
        notes=tuple(_value_notes(active, table)),
    )


def _active(flag: str, value: object, schema: Schema) -> bool:
    if value is None or value is False:
        return False
    spec = schema.lookup(flag)
    return not (spec is not None and spec.negated(flag))


def _broken_rules(active: Mapping[str, object], profile: RuleProfile, table: LayerTable) -> list[RuleBreak]:
    broken = []
    for rule in profile.rules:
        for flag, value in active.items():
            layer = table.classify(flag)
            if any(ban.hits(flag, value, layer) for ban in rule.bans):
                broken.append(RuleBreak(rule.id, flag, _value_text(value), rule.reason))
    return broken


def _value_notes(active: Mapping[str, object], table: LayerTable) -> list[RiskNote]:
    notes = []
    for note in table.value_notes:
        if str(active.get(note.flag)) != note.value:
            continue
        stronger = note.stronger_when_layer is not None and _layer_active(active, table, note.stronger_when_layer)
        notes.append(RiskNote(f"{note.id}_{note.stronger_when_layer}" if stronger else note.id, note.flag))
    return notes


def _layer_active(active: Mapping[str, object], table: LayerTable, layer_id: str) -> bool:
    return any((layer := table.classify(flag)) is not None and layer.id == layer_id for flag in active)


def _value_text(value: object) -> str:
    if value is True:
        return "true"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)
