"""vLLM's ``vllm serve`` flags: schemas per version, validation, drift, policy, rendering.

The files ``schemas/vllm_args_<version>.json`` are dumps of the parser ``vllm serve``
builds, made from the real wheels by ``runner/vllm_side/schema_dump.py`` (which lists the
modules it had to stub). This module sits beside the SGLang one (``schema.py``,
``validate.py``, ``drift.py``) and reuses its pieces — :class:`FlagIssue` and its
stable codes, the policy loader (``data/vllm_policy.yaml`` has ``policy.yaml``'s shape),
the string-safety checks — but never mixes the two engines' flags: a vLLM flag is looked
up in a vLLM schema only.

As for SGLang, flags match by exact spelling, without their leading dashes. vLLM's
``FlexibleArgumentParser`` is more lenient than that in two ways benchdeck refuses on
purpose: it turns ``--max_num_seqs`` into ``--max-num-seqs``, and, like any argparse
parser with ``allow_abbrev``, it reads ``--max-num-s`` as the one flag that begins so.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from domain.flags._data import DATA_DIR, DataFileError, bilingual, data_file
from domain.flags.issues import (
    BAD_CHOICE,
    BAD_NARGS,
    BAD_TYPE,
    BAD_VALUE,
    DEPRECATED,
    DUPLICATE_FLAG,
    HIDDEN_FLAG,
    MISSING_VALUE,
    NOT_YET_AVAILABLE,
    REMOVED_IN_VERSION,
    UNKNOWN_FLAG,
    FlagIssue,
    FlagReport,
    Translation,
)
from domain.flags.knob_map import counterpart_issue
from domain.flags.policy import Policy, load_policy, path_inside_issue, policy_issue, validate_model_ref
from domain.flags.risk import (
    DEFAULT_PROFILE,
    FlagRisk,
    LayerTable,
    RiskLayer,
    RiskReport,
    RuleProfile,
    _broken_rules,
    _layer_from,
    _refuse_double_listing,
    _value_note_from,
    _value_notes,
    load_profile,
)
from domain.flags.schema import SCHEMA_DIR, SchemaError, strip_dashes, version_key
from domain.flags.strings import free_text_problem, has_control_characters, has_non_ascii_digit, plain_value_problem

ENGINE = "vllm"
VLLM_POLICY_PATH = DATA_DIR / "vllm_policy.yaml"
_SCHEMA_FILE = re.compile(r"^vllm_args_(?P<version>.+)\.json$")
_NEAREST_COUNT = 3
_NEAREST_CUTOFF = 0.6
_LIST_NARGS = frozenset({"+", "*"})

INT_TYPES = frozenset({"int"})
FLOAT_TYPES = frozenset({"float"})
HUMAN_INT_TYPES = frozenset({"human_readable_int", "human_readable_int_or_auto"})
JSON_TYPES = frozenset({"json"})
_ASCII_INT = re.compile(r"^-?[0-9]+$", re.ASCII)
_ASCII_FLOAT = re.compile(r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$", re.ASCII)
# vllm.utils.argparse_utils.human_readable_int: k/m/g/t decimal (decimals allowed),
# K/M/G/T binary (integers only). Not SGLang's convention, where "M" is 10**6.
_HUMAN_DECIMAL = re.compile(r"^[0-9]+(?:\.[0-9]+)?[kmgt]$", re.ASCII)
_HUMAN_BINARY = re.compile(r"^[0-9]+[KMGT]$", re.ASCII)
_HUMAN_FACTORS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


# -- schema ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmFlagSpec:
    """One argparse action of ``vllm serve``: its long spellings and how it takes a value."""

    dest: str
    names: tuple[str, ...]  # long spellings, hidden ones included, without dashes
    short: tuple[str, ...]  # ``-tp``: accepted by vLLM, never written by a plan
    negative: frozenset[str]  # spellings that store False (``disable-x``, ``no-enable-x``)
    hidden: frozenset[str]
    primary: str
    action: str
    type: str | None
    nargs: int | str | None
    default: Any
    choices: tuple[Any, ...] | None
    help: str
    deprecated: bool
    replacement: str | None
    group: str | None
    none_in_choices: bool = False  # JSON null among the choices: "None" (unset) passes them

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> VllmFlagSpec:
        options = [*raw["flags"], *raw.get("hidden_flags", ())]
        choices = raw.get("choices")
        return cls(
            dest=str(raw["dest"]),
            names=tuple(strip_dashes(f) for f in options if f.startswith("--")),
            short=tuple(f[1:] for f in options if not f.startswith("--")),
            negative=frozenset(strip_dashes(f) for f in raw.get("negative_flags", ())),
            hidden=frozenset(strip_dashes(f) for f in raw.get("hidden_flags", ())),
            primary=strip_dashes(str(raw["primary"] or raw["dest"])),
            action=str(raw["action"]),
            type=raw.get("type"),
            nargs=raw.get("nargs"),
            default=raw.get("default"),
            choices=tuple(c for c in choices if c is not None) if choices is not None else None,
            help=str(raw.get("help") or ""),
            deprecated=bool(raw.get("deprecated")),
            replacement=raw.get("replacement"),
            group=raw.get("group"),
            none_in_choices=choices is not None and None in choices,
        )

    @property
    def positional(self) -> bool:
        return not self.names

    @property
    def takes_no_value(self) -> bool:
        return self.nargs == 0

    @property
    def takes_list(self) -> bool:
        return self.nargs in _LIST_NARGS

    @property
    def value_optional(self) -> bool:
        return self.nargs == "?"

    @property
    def optional(self) -> bool:
        """``optional_type(...)``: vLLM reads ``None`` or an empty string as "unset"."""
        return bool(self.type and self.type.startswith("optional:"))

    @property
    def base_type(self) -> str:
        kind = self.type or "str"
        return kind.removeprefix("optional:")

    def negated(self, name: str) -> bool:
        return name in self.negative

    def positive_name(self) -> str:
        """The spelling that stores True (``enable-x`` for ``enable-x``/``disable-x``)."""
        return next((n for n in self.names if n not in self.negative), self.primary)

    def negative_name(self) -> str | None:
        """The visible spelling that stores False, if the switch has one."""
        visible = [n for n in self.names if n in self.negative and n not in self.hidden]
        return visible[0] if visible else None


@dataclass(frozen=True)
class VllmSchema:
    """The full ``vllm serve`` argument schema of one vLLM version."""

    version: str
    specs: tuple[VllmFlagSpec, ...]
    stubbed: tuple[str, ...] = ()
    _by_name: dict[str, VllmFlagSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for spec in self.specs:
            for name in spec.names:
                self._by_name[name] = spec

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> VllmSchema:
        try:
            specs = tuple(VllmFlagSpec.from_dict(a) for a in raw["args"])
            return cls(version=str(raw["vllm_version"]), specs=specs, stubbed=tuple(raw.get("stubbed") or ()))
        except (KeyError, TypeError) as exc:
            raise SchemaError(f"malformed vLLM schema: missing or bad field {exc}") from exc

    def lookup(self, flag: str) -> VllmFlagSpec | None:
        return self._by_name.get(strip_dashes(flag))

    def __contains__(self, flag: object) -> bool:
        return isinstance(flag, str) and self.lookup(flag) is not None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)


def vllm_schema_path(version: str, schema_dir: Path | None = None) -> Path:
    return (schema_dir or SCHEMA_DIR) / f"vllm_args_{version}.json"


def known_vllm_versions(schema_dir: Path | None = None) -> list[str]:
    """vLLM versions with a shipped schema, oldest first."""
    directory = schema_dir or SCHEMA_DIR
    found = (_SCHEMA_FILE.match(p.name) for p in directory.glob("vllm_args_*.json"))
    return sorted((m["version"] for m in found if m is not None), key=version_key)


def newest_vllm_version(schema_dir: Path | None = None) -> str:
    versions = known_vllm_versions(schema_dir)
    if not versions:
        raise SchemaError(f"no vLLM schemas in {schema_dir or SCHEMA_DIR}")
    return versions[-1]


def load_vllm_schema(version: str, schema_dir: Path | None = None) -> VllmSchema:
    return _load_file(vllm_schema_path(version, schema_dir))


@lru_cache(maxsize=8)
def _load_file(path: Path) -> VllmSchema:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SchemaError(f"no schema for this vLLM version: {path.name}") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: {exc}") from exc
    return VllmSchema.from_dict(raw)


def all_vllm_schemas(schema_dir: Path | None = None) -> list[VllmSchema]:
    return [load_vllm_schema(v, schema_dir) for v in known_vllm_versions(schema_dir)]


def load_vllm_policy(path: Path | None = None) -> Policy:
    """The vLLM policy file (``data/vllm_policy.yaml`` unless the administrator names another)."""
    return load_policy(path or VLLM_POLICY_PATH)


# -- risk layers -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def vllm_risk_layers() -> LayerTable:
    """The seed's risk layers for vLLM flags (``data/vllm_risk_layers.yaml``)."""
    raw = data_file("vllm_risk_layers.yaml")
    try:
        layers = tuple(_layer_from(entry) for entry in raw["layers"])
        notes = tuple(_value_note_from(entry) for entry in raw.get("value_notes") or ())
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"vllm_risk_layers.yaml: malformed entry {exc}") from exc
    _refuse_double_listing(layers)
    return LayerTable(layers, notes)


def classify_vllm_flag(flag: str) -> RiskLayer | None:
    """The layer of a vLLM spelling; a negative one (``no-x``, ``disable-x``) falls back to its
    positive spelling. None: unclassified (reported, never assumed low)."""
    table = vllm_risk_layers()
    for name in _positive_forms(flag):
        layer = table.classify(name)
        if layer is not None:
            return layer
    return None


def _positive_forms(flag: str) -> list[str]:
    forms = [flag]
    if flag.startswith("no-"):
        forms.append(flag.removeprefix("no-"))
    if flag.startswith("disable-"):
        forms.append("enable-" + flag.removeprefix("disable-"))
    if flag.startswith("enable-"):
        forms.append("disable-" + flag.removeprefix("enable-"))
    return forms


def unclassified_vllm_flags(schema: VllmSchema) -> list[str]:
    return sorted(name for name in schema.names if classify_vllm_flag(name) is None)


def assess_vllm_risk(
    server_args: Mapping[str, object], version: str, profile: str | RuleProfile = DEFAULT_PROFILE
) -> RiskReport:
    """Each active vLLM flag's layer, the contest rules of ``profile`` it breaks, and value notes.

    The rule profiles are written for SGLang: a ban on a layer applies to vLLM's flags of that
    layer, a ban on a flag name applies where vLLM spells it the same (``quantization``,
    ``kv-cache-dtype``, ``dtype``). Active: set to anything but false/None, and not a
    negative spelling (``disable-x`` turns a feature off)."""
    schema = load_vllm_schema(version)
    rules = load_profile(profile) if isinstance(profile, str) else profile
    active = {flag: value for flag, value in server_args.items() if _active(flag, value, schema)}
    table = vllm_risk_layers()
    return RiskReport(
        version=schema.version,
        profile=rules,
        flags=tuple(FlagRisk(flag, classify_vllm_flag(flag)) for flag in active),
        broken=tuple(_broken_rules(active, rules, table)),
        notes=tuple(_value_notes(active, table)),
    )


def _active(flag: str, value: object, schema: VllmSchema) -> bool:
    if value is None or value is False:
        return False
    spec = schema.lookup(flag)
    return not (spec is not None and spec.negated(flag))


# -- drift -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmRename:
    """A flag vLLM replaced: ``old: v`` becomes ``new: v`` (or ``new: value``, or a JSON key)."""

    old: str
    new: str
    value: object | None  # a fixed value for the new flag (``mm-processor-cache-gb: 0``)
    json_key: str | None  # the old value goes in this key of a JSON-valued new flag
    note: Mapping[str, str]

    def translation(self, old_value: object) -> Translation:
        if self.json_key is not None:
            new_value: object = {self.json_key: old_value}
        elif self.value is not None:
            new_value = self.value
        else:
            new_value = old_value
        return Translation(
            rule=f"vllm:{self.old}->{self.new}",
            remove=(self.old,),
            add={self.new: new_value},
            removed_values={self.old: old_value},
            note=self.note,
        )


@lru_cache(maxsize=1)
def vllm_renames() -> tuple[VllmRename, ...]:
    raw = data_file("vllm_drift.yaml")
    try:
        return tuple(
            VllmRename(
                old=str(e["old"]),
                new=str(e["new"]),
                value=e.get("value"),
                json_key=e.get("json_key"),
                note=bilingual(e["note"], f"vllm_drift.yaml: {e['old']}"),
            )
            for e in raw["renames"]
        )
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"vllm_drift.yaml: malformed entry {exc}") from exc


def vllm_translation(flag: str, value: object, schema: VllmSchema) -> Translation | None:
    """The drift table's rewrite of ``flag`` for ``schema``'s version, when its target exists there."""
    for rename in vllm_renames():
        if rename.old == flag and rename.new in schema:
            return rename.translation(value)
    return None


@dataclass(frozen=True)
class DriftRow:
    """One flag that differs between two shipped vLLM versions."""

    flag: str
    status: str  # "removed", "renamed", "added", or "deprecated" (in the newer version)
    replacement: str | None = None  # the flag that takes over, from the drift table


def _replacement_in(flag: str, schema: VllmSchema) -> str | None:
    return next((r.new for r in vllm_renames() if r.old == flag and r.new in schema), None)


def vllm_drift(old_version: str, new_version: str) -> list[DriftRow]:
    """Flags removed, renamed, deprecated or added from ``old_version`` to ``new_version``."""
    old, new = load_vllm_schema(old_version), load_vllm_schema(new_version)
    rows = []
    for name in sorted(old.names - new.names):
        replacement = _replacement_in(name, new)
        rows.append(DriftRow(name, "renamed" if replacement else "removed", replacement))
    rows.extend(DriftRow(name, "added") for name in sorted(new.names - old.names))
    for name in sorted(old.names & new.names):
        spec_old, spec_new = old.lookup(name), new.lookup(name)
        if spec_new is not None and spec_new.deprecated and not (spec_old and spec_old.deprecated):
            rows.append(DriftRow(name, "deprecated", _replacement_in(name, new) or spec_new.replacement))
    return rows


def retarget_vllm_args(args: Mapping[str, object], to_version: str) -> tuple[dict[str, object], list[Translation]]:
    """``args`` rewritten for ``to_version`` by the drift table; flags without a rule stay as written."""
    schema = load_vllm_schema(to_version)
    out: dict[str, object] = {}
    done: list[Translation] = []
    for flag, value in args.items():
        translation = vllm_translation(flag, value, schema) if flag not in schema else None
        if translation is None:
            out[flag] = value
            continue
        out.update(translation.add)
        done.append(translation)
    return out, done


# -- validation --------------------------------------------------------------------------------


def validate_vllm_args(
    server_args: Mapping[str, object],
    version: str,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    policy: Policy | None = None,
    schema: VllmSchema | None = None,
) -> FlagReport:
    """Every finding for ``server_args`` (flag names without dashes) on vLLM ``version``."""
    schema = schema or load_vllm_schema(version)
    policy = policy or load_vllm_policy()
    issues: list[FlagIssue] = []
    if model is not None:
        model_issue = validate_model_ref(model, model_dirs)
        issues.extend([model_issue] if model_issue is not None else [])
    for key, value in server_args.items():
        issues.extend(_check_flag(key, value, schema, policy, model_dirs))
    issues.extend(_duplicate_issues(server_args, schema))
    return FlagReport(schema.version, tuple(issues))


def check_vllm_plan(
    server_args: Mapping[str, object], *, model_dirs: Sequence[Path], model: str | None = None
) -> dict[str, FlagReport]:
    """``server_args`` validated against every shipped vLLM schema, by version (oldest first).

    What ``python -m runner check`` prints for an ``engine: vllm`` plan: a flag renamed
    between versions shows up as an error with its translation in the version that lacks it."""
    return {
        version: validate_vllm_args(server_args, version, model_dirs=model_dirs, model=model)
        for version in known_vllm_versions()
    }


@dataclass(frozen=True)
class VllmCheck:
    """What ``python -m runner check`` reports for an ``engine: vllm`` plan, as text lines."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    detail: str


def vllm_check_messages(
    server_args: Mapping[str, object],
    lang: str,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    versions: Sequence[str] | None = None,
) -> VllmCheck:
    """:func:`check_vllm_plan` as lines prefixed with the vLLM version they are about
    (``vLLM 0.33.0: --cuda-graph-sizes is gone ...``); ``detail`` adds each issue's reason,
    nearest names and translation. ``versions`` narrows to the plan's pinned version."""
    reports = check_vllm_plan(server_args, model_dirs=model_dirs, model=model)
    chosen = {v: r for v, r in reports.items() if versions is None or v in versions}
    errors = tuple(f"vLLM {v}: {i.message(lang)}" for v, r in chosen.items() for i in r.errors)
    warnings = tuple(f"vLLM {v}: {i.message(lang)}" for v, r in chosen.items() for i in r.warnings)
    detail = "\n".join(f"vLLM {v}: {i.text(lang)}" for v, r in chosen.items() for i in r.issues)
    return VllmCheck(errors, warnings, detail)


def _params(schema: VllmSchema, **extra: str) -> dict[str, str | int | float]:
    return {"version": schema.version, **extra}


def _check_flag(
    key: object, value: object, schema: VllmSchema, policy: Policy, model_dirs: Sequence[Path]
) -> list[FlagIssue]:
    if not isinstance(key, str) or key.startswith("-"):
        bare = str(key).lstrip("-")
        candidates = (bare,) if bare in schema else _nearest(bare, schema)
        return [FlagIssue(str(key), "error", UNKNOWN_FLAG, "leading_dashes", _params(schema), candidates=candidates)]
    if "_" in key:
        # vLLM would read max_num_seqs as max-num-seqs; a plan spells flags one way only.
        dashed = key.replace("_", "-")
        candidates = (dashed,) if dashed in schema else _nearest(dashed, schema)
        return [FlagIssue(key, "error", UNKNOWN_FLAG, "vllm_underscore", _params(schema), candidates=candidates)]
    refused = policy_issue(key, value, policy)
    if refused is not None:
        return [refused]
    spec = schema.lookup(key)
    if spec is None:
        return [_missing_flag_issue(key, value, schema)]
    return [*_status_issues(key, value, spec, schema), *check_vllm_value(spec, key, value, policy, model_dirs)]


def _missing_flag_issue(flag: str, value: object, schema: VllmSchema) -> FlagIssue:
    translation = vllm_translation(flag, value, schema)
    known_in = [s.version for s in all_vllm_schemas() if flag in s]
    if not known_in:
        other_engine = counterpart_issue(ENGINE, flag, schema, schema.version) if translation is None else None
        if other_engine is not None:
            return other_engine
        candidates = () if translation is not None else _nearest(flag, schema)
        return FlagIssue(flag, "error", UNKNOWN_FLAG, "vllm", _params(schema), translation, candidates)
    if version_key(known_in[0]) > version_key(schema.version):
        return FlagIssue(flag, "error", NOT_YET_AVAILABLE, "vllm", _params(schema, first=known_in[0]), translation)
    last = max(known_in, key=version_key)
    return FlagIssue(flag, "error", REMOVED_IN_VERSION, "vllm", _params(schema, last=last), translation)


def _status_issues(flag: str, value: object, spec: VllmFlagSpec, schema: VllmSchema) -> list[FlagIssue]:
    if spec.deprecated:
        translation = vllm_translation(flag, value, schema)
        if translation is None and spec.replacement:
            params = _params(schema, replacement=spec.replacement)
            return [FlagIssue(flag, "warning", DEPRECATED, "vllm_replacement", params)]
        return [FlagIssue(flag, "warning", DEPRECATED, "vllm", _params(schema), translation)]
    if flag in spec.hidden:
        return [FlagIssue(flag, "info", HIDDEN_FLAG, "vllm", _params(schema))]
    return []


def _duplicate_issues(args: Mapping[str, object], schema: VllmSchema) -> list[FlagIssue]:
    """Two spellings of one setting (``enable-x`` and ``disable-x``): vLLM keeps the last."""
    seen: dict[str, str] = {}
    issues = []
    for key in args:
        spec = schema.lookup(key) if isinstance(key, str) else None
        if spec is None:
            continue
        if spec.dest in seen:
            issues.append(FlagIssue(key, "error", DUPLICATE_FLAG, "vllm", {"other": seen[spec.dest]}))
        else:
            seen[spec.dest] = key
    return issues


def _nearest(flag: str, schema: VllmSchema) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(flag, sorted(schema.names), n=_NEAREST_COUNT, cutoff=_NEAREST_CUTOFF))


# -- values ------------------------------------------------------------------------------------


def check_vllm_value(
    spec: VllmFlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]
) -> list[FlagIssue]:
    """Every problem with ``value`` for ``flag`` (an exact spelling of ``spec``)."""
    if spec.takes_no_value:
        return (
            [] if isinstance(value, bool) else [FlagIssue(flag, "error", BAD_TYPE, "switch", {"value": _shown(value)})]
        )
    if spec.value_optional and value is True:
        return []  # nargs='?' written bare
    if spec.takes_list:
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items and spec.nargs == "+":
            return [FlagIssue(flag, "error", MISSING_VALUE, "list")]
        issues: list[FlagIssue] = []
        for item in items:
            nested = isinstance(item, list | tuple | dict)
            issues.extend(
                [FlagIssue(flag, "error", BAD_NARGS, "nested")]
                if nested
                else _element(spec, flag, item, policy, model_dirs)
            )
        return issues
    if isinstance(value, list | tuple):
        return [FlagIssue(flag, "error", BAD_NARGS, "list_for_scalar")]
    return _element(spec, flag, value, policy, model_dirs)


def _element(
    spec: VllmFlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]
) -> list[FlagIssue]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return [FlagIssue(flag, "error", MISSING_VALUE)]
    kind = spec.base_type
    if isinstance(value, bool) and kind not in JSON_TYPES:
        return [FlagIssue(flag, "error", MISSING_VALUE, "switch_value")]
    if kind in INT_TYPES | FLOAT_TYPES | HUMAN_INT_TYPES:
        return _number(spec, flag, value)
    if kind in JSON_TYPES or (kind == "dict_or_str" and not isinstance(value, str)):
        return _json(flag, value, dict_only=kind in JSON_TYPES)
    return _text(spec, flag, value, policy, model_dirs)


def parse_vllm_number(kind: str, value: object) -> float | str:
    """The number a value denotes for a vLLM numeric flag, or (a str) why it denotes none."""
    if isinstance(value, bool):
        return "bool_as_number"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "not_finite"
        return value if kind in FLOAT_TYPES else "int"  # int("8.0") fails in vLLM too
    if isinstance(value, int):
        return float(value)
    if not isinstance(value, str):
        return "float" if kind in FLOAT_TYPES else "int"
    return _number_text(kind, value.strip())


def _number_text(kind: str, text: str) -> float | str:
    if has_non_ascii_digit(text):
        return "non_ascii_digit"
    if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return "not_finite"
    if kind == "human_readable_int_or_auto" and text.lower() == "auto":
        return -1.0
    if kind in HUMAN_INT_TYPES and (_HUMAN_DECIMAL.match(text) or _HUMAN_BINARY.match(text)):
        return float(int(float(text[:-1]) * _HUMAN_FACTORS[text[-1]]))
    if kind in INT_TYPES | HUMAN_INT_TYPES and _ASCII_INT.match(text):
        return float(int(text))
    if kind in FLOAT_TYPES and _ASCII_FLOAT.match(text):
        return float(text)
    return "float" if kind in FLOAT_TYPES else "int"


def _number(spec: VllmFlagSpec, flag: str, value: object) -> list[FlagIssue]:
    number = parse_vllm_number(spec.base_type, value)
    if isinstance(number, str):
        code = BAD_VALUE if number in ("not_finite", "non_ascii_digit") else BAD_TYPE
        return [FlagIssue(flag, "error", code, number, {"value": _shown(value), "type": spec.base_type})]
    return _choice(spec, flag, _plain(number))


def _json(flag: str, value: object, *, dict_only: bool) -> list[FlagIssue]:
    parsed: object = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value, parse_constant=_refuse_constant)
        except ValueError:
            return [FlagIssue(flag, "error", BAD_VALUE, "bad_json", {"value": _shown(value)})]
    if not isinstance(parsed, dict) and (dict_only or not isinstance(parsed, list)):
        return [FlagIssue(flag, "error", BAD_TYPE, "json_dict", {"value": _shown(value)})]
    for item in _walk(parsed):
        if isinstance(item, float) and not math.isfinite(item):
            return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": _shown(item), "type": "json"})]
        if isinstance(item, str) and (has_control_characters(item) or free_text_problem(item)):
            return [
                FlagIssue(flag, "error", BAD_VALUE, free_text_problem(item) or "control_char", {"value": _shown(item)})
            ]
    return []


def _refuse_constant(name: str) -> object:
    raise ValueError(name)  # NaN / Infinity are not JSON


def _walk(node: object) -> list[object]:
    if isinstance(node, dict):
        return [*node.keys(), *(x for v in node.values() for x in _walk(v))]
    if isinstance(node, list):
        return [x for v in node for x in _walk(v)]
    return [node]


def _text(spec: VllmFlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]) -> list[FlagIssue]:
    if isinstance(value, float) and not math.isfinite(value):
        return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": _shown(value), "type": "str"})]
    if not isinstance(value, str | int | float):
        return [FlagIssue(flag, "error", BAD_TYPE, "str", {"value": _shown(value)})]
    text = value if isinstance(value, str) else _plain(float(value))
    params = {"value": _shown(text)}
    if has_control_characters(text):
        return [FlagIssue(flag, "error", BAD_VALUE, "control_char", params)]
    if text.startswith("-"):
        return [FlagIssue(flag, "error", BAD_VALUE, "leading_dash", params)]
    free = flag in policy.free_text_flags or spec.base_type == "dict_or_str"
    problem = free_text_problem(text) if free else plain_value_problem(text)
    if problem is not None:
        return [FlagIssue(flag, "error", BAD_VALUE, problem, params)]
    choice = _choice(spec, flag, text)
    if choice:
        return choice
    if flag in policy.model_ref_flags:
        issue = validate_model_ref(text, model_dirs, flag=flag)
        return [issue] if issue is not None else []
    if flag in policy.path_flags and "/" in text:
        issue = path_inside_issue(flag, text, model_dirs, code=BAD_VALUE)
        return [issue] if issue is not None else []
    return []


def _choice(spec: VllmFlagSpec, flag: str, shown: str) -> list[FlagIssue]:
    if spec.choices is None:
        return []
    if spec.optional and shown in ("None", ""):
        # optional_type turns "None" into None before argparse checks the choices; vLLM
        # 0.11.2 lists the string 'None' there, not None, and so refuses it.
        allowed = spec.none_in_choices
    else:
        allowed = shown in {str(c) for c in spec.choices}
    if allowed:
        return []
    choices = ", ".join(str(c) for c in spec.choices)
    return [FlagIssue(flag, "error", BAD_CHOICE, params={"value": shown, "choices": choices})]


def _plain(number: float) -> str:
    return str(int(number)) if number.is_integer() else str(number)


def _shown(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    shown = repr(text)[1:-1] if has_control_characters(text) else text
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# -- rendering ---------------------------------------------------------------------------------


def render_vllm_argv(server_args: Mapping[str, object], version: str, *, schema: VllmSchema | None = None) -> list[str]:
    """``--flag value`` argv for validated ``server_args`` (run :func:`validate_vllm_args` first).

    ``false`` on a switch renders its visible negative spelling (``--disable-x`` /
    ``--no-x``) when it has one; a value that starts with ``-`` (a negative number) is
    attached with ``=`` so argparse does not take it for an option."""
    schema = schema or load_vllm_schema(version)
    argv: list[str] = []
    for flag, value in server_args.items():
        spec = schema.lookup(flag)
        if spec is None:
            raise ValueError(f"--{flag} is not a flag of vLLM {schema.version}")
        argv.extend(_render(flag, spec, value))
    return argv


def _render(flag: str, spec: VllmFlagSpec, value: object) -> list[str]:
    option = f"--{flag}"
    if value is None:
        return []
    if spec.takes_no_value:
        if not isinstance(value, bool):
            raise ValueError(f"{option} is a switch; its value must be true or false")
        return _render_switch(flag, spec, value)
    if spec.value_optional and value is True:
        return [option]
    if spec.takes_list:
        items = list(value) if isinstance(value, list | tuple) else [value]
        return [option, *(_scalar(item) for item in items)]
    text = _scalar(value)
    return [f"{option}={text}"] if text.startswith("-") else [option, text]


def _render_switch(flag: str, spec: VllmFlagSpec, value: bool) -> list[str]:
    if spec.negated(flag):  # ``disable-x: true`` is the off switch; ``false`` leaves the default
        return [f"--{flag}"] if value else []
    if value:
        return [f"--{flag}"]
    negative = spec.negative_name()
    return [f"--{negative}"] if negative is not None else []


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        raise ValueError("true/false is not a value for this flag")
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    return str(value)
