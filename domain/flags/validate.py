"""Validating a plan's ``server_args`` against one version's schema and the policy, for
any engine: what differs between engines comes in with its :class:`FlagDialect`.

Used by the form, ``python -m runner check`` and the runner right before every launch.
Flags are matched by exact spelling only.  Order of checks for each flag:

1. the spelling itself (no leading dashes; the dialect's own refusals);
2. the security policy (runner-owned, forbidden, forbidden values, loopback host);
3. the schema: unknown here -> removed / not yet added / never a flag (another engine's:
   its knob-map counterpart), with the drift table's translation or the nearest real flags;
   deprecated -> warning with translation;
4. the value: type, choices, nargs, documented range, string safety, paths.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.flags.dialect import FlagDialect
from domain.flags.dialects.sglang import SGLANG_FLAGS
from domain.flags.issues import (
    DEPRECATED,
    DUPLICATE_FLAG,
    HIDDEN_FLAG,
    NOT_YET_AVAILABLE,
    REMOVED_IN_VERSION,
    UNKNOWN_FLAG,
    FlagIssue,
    FlagReport,
)
from domain.flags.knob_map import counterpart_issue
from domain.flags.policy import Policy, policy_issue, validate_model_ref
from domain.flags.schema import FlagSpec, Schema, version_key

_NEAREST_COUNT = 3
_NEAREST_CUTOFF = 0.6


def validate_server_args(
    server_args: Mapping[str, object],
    version: str,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    policy: Policy | None = None,
    schema: Schema | None = None,
    dialect: FlagDialect = SGLANG_FLAGS,
) -> FlagReport:
    """Every finding for ``server_args`` (flag names without dashes) on ``version`` of the
    dialect's engine (SGLang unless told).

    ``model``, when given, is checked as the plan's model reference too.  ``schema``
    replaces the shipped schema of ``version`` (the runner passes the one it extracted
    from the installed SGLang); ``policy`` replaces the shipped policy file."""
    return validate_flags(dialect, server_args, schema or dialect.schema(version), model_dirs=model_dirs,
                          model=model, policy=policy)


def validate_flags(
    dialect: FlagDialect,
    server_args: Mapping[str, object],
    schema: Schema,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    policy: Policy | None = None,
) -> FlagReport:
    """Every finding for ``server_args`` on ``schema``, an engine's of ``dialect``."""
    policy = policy or dialect.policy()
    issues: list[FlagIssue] = []
    if model is not None:
        model_issue = validate_model_ref(model, model_dirs)
        issues.extend([model_issue] if model_issue is not None else [])
    for key, value in server_args.items():
        issues.extend(_check_flag(dialect, key, value, server_args, schema, policy, model_dirs))
    issues.extend(_duplicate_issues(dialect, server_args, schema))
    return FlagReport(schema.version, tuple(issues))


def _check_flag(dialect: FlagDialect, key: object, value: object, args: Mapping[str, object], schema: Schema,
                policy: Policy, model_dirs: Sequence[Path]) -> list[FlagIssue]:
    if not isinstance(key, str) or key.startswith("-"):
        return [_dashed_name_issue(str(key), schema)]
    refused = dialect.name_issue(key, schema) or policy_issue(key, value, policy)
    if refused is not None:
        return [refused]
    spec = schema.lookup(key)
    if spec is None:
        return [_missing_flag_issue(dialect, key, args, schema)]
    issues = _status_issues(dialect, key, spec, args, schema)
    if not spec.retired:
        issues.extend(dialect.check_value(spec, key, value, policy, model_dirs))
    return issues


def _dashed_name_issue(key: str, schema: Schema) -> FlagIssue:
    """Plans write ``tp-size``, not ``--tp-size``: say so rather than "unknown flag"."""
    bare = key.lstrip("-")
    candidates = (bare,) if bare in schema else nearest(bare, schema)
    return FlagIssue(key, "error", UNKNOWN_FLAG, "leading_dashes", {"version": schema.version}, candidates=candidates)


def _missing_flag_issue(dialect: FlagDialect, flag: str, args: Mapping[str, object], schema: Schema) -> FlagIssue:
    translation = dialect.translation(flag, args, schema)
    known_in = [other.version for other in dialect.all_schemas() if flag in other]
    params: dict[str, str | int | float] = {"version": schema.version}
    detail = dialect.detail(None)
    if not known_in:
        other_engine = counterpart_issue(dialect.family, flag, schema, schema.version) if translation is None else None
        if other_engine is not None:
            return other_engine
        candidates = () if translation is not None else nearest(flag, schema)
        return FlagIssue(flag, "error", UNKNOWN_FLAG, detail, params, translation, candidates)
    note = dialect.dead_end_note(flag) if translation is None else None
    if version_key(known_in[0]) > version_key(schema.version):
        params["first"] = known_in[0]
        return FlagIssue(flag, "error", NOT_YET_AVAILABLE, detail, params, translation, note=note)
    params["last"] = max(known_in, key=version_key)
    return FlagIssue(flag, "error", REMOVED_IN_VERSION, detail, params, translation, note=note)


def _status_issues(dialect: FlagDialect, flag: str, spec: FlagSpec, args: Mapping[str, object],
                   schema: Schema) -> list[FlagIssue]:
    """Deprecated or retired flags (with the translation on offer), and hidden ones."""
    params: dict[str, str | int | float] = {"version": schema.version}
    if dialect.deprecated(schema, flag):
        translation = dialect.translation(flag, args, schema)
        if spec.retired:
            return [FlagIssue(flag, "error", DEPRECATED, "retired", params, translation)]
        if translation is None and spec.replacement:
            params["replacement"] = spec.replacement
            return [FlagIssue(flag, "warning", DEPRECATED, dialect.detail("replacement"), params)]
        return [FlagIssue(flag, "warning", DEPRECATED, dialect.detail(None), params, translation)]
    if spec.hidden_spelling(flag):
        return [FlagIssue(flag, "info", HIDDEN_FLAG, dialect.detail(None), params)]
    return []


def _duplicate_issues(dialect: FlagDialect, args: Mapping[str, object], schema: Schema) -> list[FlagIssue]:
    """Two spellings of one flag (``tp-size`` and ``tensor-parallel-size``, ``x`` and ``no-x``):
    argparse silently keeps the last, which is never what the author meant."""
    seen: dict[str, str] = {}
    issues = []
    for key in args:
        spec = schema.lookup(key) if isinstance(key, str) else None
        if spec is None:
            continue
        if spec.dest in seen:
            issues.append(FlagIssue(key, "error", DUPLICATE_FLAG, dialect.detail(None), {"other": seen[spec.dest]}))
        else:
            seen[spec.dest] = key
    return issues


def nearest(flag: str, schema: Schema) -> tuple[str, ...]:
    """The real spellings closest to ``flag`` (a typo's likely meaning)."""
    return tuple(difflib.get_close_matches(flag, sorted(schema.names), n=_NEAREST_COUNT, cutoff=_NEAREST_CUTOFF))


@dataclass(frozen=True)
class VersionedCheck:
    """What ``python -m runner check`` reports for a plan checked against several versions of
    its engine, as text lines each prefixed with the version they are about."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    detail: str


def check_versions(
    dialect: FlagDialect,
    server_args: Mapping[str, object],
    lang: str,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    versions: Sequence[str] | None = None,
) -> VersionedCheck:
    """``server_args`` against each shipped schema of ``dialect`` (``versions`` narrows them to
    the plan's own), as lines like ``vLLM 0.33.0: --cuda-graph-sizes is gone ...``; ``detail``
    adds each issue's reason, nearest names and translation."""
    chosen = [v for v in dialect.known_versions() if versions is None or v in versions]
    reports = {v: validate_flags(dialect, server_args, dialect.schema(v), model_dirs=model_dirs, model=model)
               for v in chosen}
    prefix = {v: f"{dialect.name} {v}: " for v in chosen}
    errors = tuple(prefix[v] + i.message(lang) for v, r in reports.items() for i in r.errors)
    warnings = tuple(prefix[v] + i.message(lang) for v, r in reports.items() for i in r.warnings)
    detail = "\n".join(prefix[v] + i.text(lang) for v, r in reports.items() for i in r.issues)
    return VersionedCheck(errors, warnings, detail)
