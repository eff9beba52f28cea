"""vLLM's flag dialect: ``vllm serve``'s schema dump, value syntax, drift table, risk
layers and policy, and the vLLM-named entry points the app calls.

The schema files ``schemas/vllm_args_<version>.json`` are dumps of the parser ``vllm serve``
builds, made from the real wheels by ``runner/vllm_side/schema_dump.py`` (which lists the
modules it had to stub).  Validation, rendering and risk are the shared code's
(``validate.py``, ``argv.py``, ``risk.py``), handed :data:`VLLM_FLAGS`; what is vLLM's own is
here: how its numbers read (``human_readable_int``: ``k``/``m`` decimal, ``K``/``M`` binary),
its ``optional_type`` values, JSON-valued flags, the ``_`` spelling it accepts and a plan
refuses, its renames between versions, the positive form a ``disable-x`` is classified by.
A vLLM flag is looked up in a vLLM schema only.

As for SGLang, flags match by exact spelling, without their leading dashes. vLLM's
``FlexibleArgumentParser`` is more lenient than that in two ways benchdeck refuses on
purpose: it turns ``--max_num_seqs`` into ``--max-num-seqs``, and, like any argparse
parser with ``allow_abbrev``, it reads ``--max-num-s`` as the one flag that begins so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from domain.flags._data import DATA_DIR, bilingual, data_entries
from domain.flags.argv import render_flags
from domain.flags.dialect import FlagDialect
from domain.flags.issues import (
    BAD_CHOICE,
    BAD_NARGS,
    BAD_TYPE,
    BAD_VALUE,
    MISSING_VALUE,
    UNKNOWN_FLAG,
    FlagIssue,
    FlagReport,
    Translation,
)
from domain.flags.policy import Policy, load_policy, path_inside_issue, validate_model_ref
from domain.flags.risk import (
    DEFAULT_PROFILE,
    LayerTable,
    RiskLayer,
    RiskReport,
    RuleProfile,
    assess_flags_risk,
    layer_table,
)
from domain.flags.schema import FlagSpec, Schema, SchemaError, strip_dashes
from domain.flags.strings import free_text_problem, has_control_characters, has_non_ascii_digit, plain_value_problem
from domain.flags.validate import VersionedCheck, check_versions, nearest, validate_server_args
from domain.flags.values import parse_json, shown_value, walk_json

ENGINE = "vllm"
VLLM_POLICY_PATH = DATA_DIR / "vllm_policy.yaml"

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

# The names the app imported before the flag code was shared: one spec and one schema type now.
VllmFlagSpec = FlagSpec
VllmSchema = Schema


# -- the schema dump -----------------------------------------------------------------------------


def read_spec(raw: Mapping[str, Any]) -> FlagSpec:
    """An entry of vLLM's dump: long and short spellings, hidden ones, the spellings that
    store False, and JSON null among the choices (``None`` passes an optional flag's)."""
    options = [*raw["flags"], *raw.get("hidden_flags", ())]
    choices = raw.get("choices")
    return FlagSpec(
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
        suppressed=False,
        group=raw.get("group"),
        none_in_choices=choices is not None and None in choices,
    )


def read_schema(raw: Mapping[str, Any]) -> Schema:
    try:
        specs = tuple(read_spec(a) for a in raw["args"])
        return Schema(version=str(raw["vllm_version"]), specs=specs, stubbed=tuple(raw.get("stubbed") or ()),
                      family=ENGINE)
    except (KeyError, TypeError) as exc:
        raise SchemaError(f"malformed vLLM schema: missing or bad field {exc}") from exc


def load_vllm_policy(path: Path | None = None) -> Policy:
    """The vLLM policy file (``data/vllm_policy.yaml`` unless the administrator names another)."""
    return load_policy(path or VLLM_POLICY_PATH)


# -- risk layers -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def vllm_risk_layers() -> LayerTable:
    """The seed's risk layers for vLLM flags (``data/vllm_risk_layers.yaml``)."""
    return layer_table("vllm_risk_layers.yaml")


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
    return data_entries("vllm_drift.yaml", "renames", _rename_from)


def _rename_from(entry: Mapping[str, Any]) -> VllmRename:
    note = bilingual(entry["note"], f"vllm_drift.yaml: {entry['old']}")
    return VllmRename(str(entry["old"]), str(entry["new"]), entry.get("value"), entry.get("json_key"), note)


def vllm_translation(flag: str, value: object, schema: Schema) -> Translation | None:
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


def _replacement_in(flag: str, schema: Schema) -> str | None:
    return next((r.new for r in vllm_renames() if r.old == flag and r.new in schema), None)


def vllm_drift(old_version: str, new_version: str) -> list[DriftRow]:
    """Flags removed, renamed, deprecated or added from ``old_version`` to ``new_version``."""
    old, new = VLLM_FLAGS.schema(old_version), VLLM_FLAGS.schema(new_version)
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
    schema = VLLM_FLAGS.schema(to_version)
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



# -- values ------------------------------------------------------------------------------------


def check_vllm_value(
    spec: FlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]
) -> list[FlagIssue]:
    """Every problem with ``value`` for ``flag`` (an exact spelling of ``spec``)."""
    if spec.takes_no_value:
        switch_ok = isinstance(value, bool)
        return [] if switch_ok else [FlagIssue(flag, "error", BAD_TYPE, "switch", {"value": shown_value(value)})]
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
    spec: FlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]
) -> list[FlagIssue]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return [FlagIssue(flag, "error", MISSING_VALUE)]
    kind = spec.base_type
    if isinstance(value, bool) and kind not in JSON_TYPES:
        return [FlagIssue(flag, "error", MISSING_VALUE, "switch_value")]
    if kind in INT_TYPES | FLOAT_TYPES | HUMAN_INT_TYPES:
        return _number_issues(spec, flag, value)
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


def _number_issues(spec: FlagSpec, flag: str, value: object) -> list[FlagIssue]:
    """What is wrong with a numeric flag's value (its type, its finiteness, its choices)."""
    number = parse_vllm_number(spec.base_type, value)
    if isinstance(number, str):
        code = BAD_VALUE if number in ("not_finite", "non_ascii_digit") else BAD_TYPE
        return [FlagIssue(flag, "error", code, number, {"value": shown_value(value), "type": spec.base_type})]
    return _choice(spec, flag, _plain(number))


def _json(flag: str, value: object, *, dict_only: bool) -> list[FlagIssue]:
    parsed: object = value
    if isinstance(value, str):
        parsed, ok = parse_json(value)
        if not ok:
            return [FlagIssue(flag, "error", BAD_VALUE, "bad_json", {"value": shown_value(value)})]
    if not isinstance(parsed, dict) and (dict_only or not isinstance(parsed, list)):
        return [FlagIssue(flag, "error", BAD_TYPE, "json_dict", {"value": shown_value(value)})]
    for item in walk_json(parsed):
        if isinstance(item, float) and not math.isfinite(item):
            return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": shown_value(item), "type": "json"})]
        if isinstance(item, str) and (has_control_characters(item) or free_text_problem(item)):
            problem = free_text_problem(item) or "control_char"
            return [FlagIssue(flag, "error", BAD_VALUE, problem, {"value": shown_value(item)})]
    return []


def _text(spec: FlagSpec, flag: str, value: object, policy: Policy, model_dirs: Sequence[Path]) -> list[FlagIssue]:
    if isinstance(value, float) and not math.isfinite(value):
        return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": shown_value(value), "type": "str"})]
    if not isinstance(value, str | int | float):
        return [FlagIssue(flag, "error", BAD_TYPE, "str", {"value": shown_value(value)})]
    text = value if isinstance(value, str) else _plain(float(value))
    params = {"value": shown_value(text)}
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


def _choice(spec: FlagSpec, flag: str, shown: str) -> list[FlagIssue]:
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






# -- the dialect and the vLLM-named entry points ---------------------------------------------------


def _translation(flag: str, args: Mapping[str, object], schema: Schema) -> Translation | None:
    return vllm_translation(flag, args.get(flag), schema)


def _deprecated(schema: Schema, flag: str) -> bool:
    spec = schema.lookup(flag)
    return spec is not None and spec.deprecated


def _detail(detail: str | None) -> str:
    return "vllm" if detail is None else f"vllm_{detail}"  # the catalogue's vLLM wording (vllm.yaml)


def _underscore_issue(key: str, schema: Schema) -> FlagIssue | None:
    """vLLM would read max_num_seqs as max-num-seqs; a plan spells flags one way only."""
    if "_" not in key:
        return None
    dashed = key.replace("_", "-")
    candidates = (dashed,) if dashed in schema else nearest(dashed, schema)
    return FlagIssue(key, "error", UNKNOWN_FLAG, "vllm_underscore", {"version": schema.version}, candidates=candidates)


def render_scalar(_option: str, value: object) -> str:
    """One vLLM value as an argv word: JSON compact, floats by ``repr``; a value starting with
    ``-`` is attached to its flag with ``=`` (``attach_dashed``) so argparse reads it as a value."""
    if isinstance(value, bool):
        raise ValueError("true/false is not a value for this flag")
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    return str(value)


VLLM_FLAGS = FlagDialect(
    family=ENGINE,
    name="vLLM",
    read_schema=read_schema,
    detail=_detail,
    translation=_translation,
    deprecated=_deprecated,
    check_value=check_vllm_value,
    render_scalar=render_scalar,
    attach_dashed=True,
    policy=load_vllm_policy,
    risk_table=vllm_risk_layers,
    classify=classify_vllm_flag,
    name_issue=_underscore_issue,
    form_three_way=True,
    form_list_words=True,
)


def load_vllm_schema(version: str, schema_dir: Path | None = None) -> Schema:
    return VLLM_FLAGS.schema(version, schema_dir)


def known_vllm_versions(schema_dir: Path | None = None) -> list[str]:
    """vLLM versions with a shipped schema, oldest first."""
    return VLLM_FLAGS.known_versions(schema_dir)


def newest_vllm_version(schema_dir: Path | None = None) -> str:
    return VLLM_FLAGS.newest_version(schema_dir)


def all_vllm_schemas(schema_dir: Path | None = None) -> list[Schema]:
    return VLLM_FLAGS.all_schemas(schema_dir)


def unclassified_vllm_flags(schema: Schema) -> list[str]:
    return sorted(name for name in schema.names if classify_vllm_flag(name) is None)


def assess_vllm_risk(
    server_args: Mapping[str, object], version: str, profile: str | RuleProfile = DEFAULT_PROFILE
) -> RiskReport:
    """Each active vLLM flag's layer, the contest rules of ``profile`` it breaks, and value notes.

    The rule profiles are written for SGLang: a ban on a layer applies to vLLM's flags of that
    layer, a ban on a flag name applies where vLLM spells it the same (``quantization``,
    ``kv-cache-dtype``, ``dtype``). Active: set to anything but false/None, and not a
    negative spelling (``disable-x`` turns a feature off)."""
    return assess_flags_risk(server_args, load_vllm_schema(version), profile, vllm_risk_layers(), classify_vllm_flag)


def validate_vllm_args(server_args: Mapping[str, object], version: str, **options: Any) -> FlagReport:
    """Every finding for ``server_args`` on vLLM ``version``: ``validate_server_args`` with
    vLLM's dialect, and its options (``model_dirs``, ``model``, ``policy``, ``schema``)."""
    return validate_server_args(server_args, version, dialect=VLLM_FLAGS, **options)


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


VllmCheck = VersionedCheck


def vllm_check_messages(server_args: Mapping[str, object], lang: str, **options: Any) -> VersionedCheck:
    """:func:`domain.flags.validate.check_versions` for vLLM (every shipped version unless the
    ``versions`` option narrows to the plan's pinned one; ``model_dirs``, ``model`` as there)."""
    return check_versions(VLLM_FLAGS, server_args, lang, **options)


def render_vllm_argv(server_args: Mapping[str, object], version: str, *, schema: Schema | None = None) -> list[str]:
    """``--flag value`` argv for validated ``server_args`` (run :func:`validate_vllm_args` first).

    ``false`` on a switch renders its visible negative spelling (``--disable-x`` /
    ``--no-x``) when it has one; a value that starts with ``-`` (a negative number) is
    attached with ``=`` so argparse does not take it for an option."""
    return render_flags(VLLM_FLAGS, server_args, schema or load_vllm_schema(version))
