"""Validating a plan's ``server_args`` against one SGLang version's schema and the policy.

Used by the form, ``python -m runner check`` and the runner right before every launch.
Flags are matched by exact spelling only.  Order of checks for each flag:

1. the security policy (runner-owned, forbidden, forbidden values, loopback host);
2. the schema: unknown here -> removed / not yet added / never a flag, with the drift
   table's translation or the nearest real flags; deprecated -> warning with translation;
3. the value: type, choices, nargs, documented range, string safety, paths.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path

from domain.flags.drift import dead_end_rule, is_deprecated, translation_for
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
from domain.flags.policy import Policy, load_policy, policy_issue, validate_model_ref
from domain.flags.schema import FlagSpec, Schema, all_schemas, load_schema, version_key, versions_with_flag
from domain.flags.values import ValueContext, check_value

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
) -> FlagReport:
    """Every finding for ``server_args`` (flag names without dashes) on SGLang ``version``.

    ``model``, when given, is checked as the plan's model reference too.  ``schema``
    replaces the shipped schema of ``version`` (the runner passes the one it extracted
    from the installed SGLang); ``policy`` replaces the shipped policy file."""
    schema = schema or load_schema(version)
    ctx = ValueContext(policy or load_policy(), tuple(model_dirs))
    issues: list[FlagIssue] = []
    if model is not None:
        model_issue = validate_model_ref(model, ctx.model_dirs)
        issues.extend([model_issue] if model_issue is not None else [])
    for key, value in server_args.items():
        issues.extend(_check_flag(key, value, server_args, schema, ctx))
    issues.extend(_duplicate_issues(server_args, schema))
    return FlagReport(schema.version, tuple(issues))


def _check_flag(
    key: object, value: object, args: Mapping[str, object], schema: Schema, ctx: ValueContext
) -> list[FlagIssue]:
    if not isinstance(key, str) or key.startswith("-"):
        return [_dashed_name_issue(str(key), schema)]
    refused = policy_issue(key, value, ctx.policy)
    if refused is not None:
        return [refused]
    spec = schema.lookup(key)
    if spec is None:
        return [_missing_flag_issue(key, args, schema)]
    issues = _status_issues(key, spec, args, schema)
    if not spec.retired:
        issues.extend(check_value(spec, key, value, ctx))
    return issues


def _dashed_name_issue(key: str, schema: Schema) -> FlagIssue:
    """Plans write ``tp-size``, not ``--tp-size``: say so rather than "unknown flag"."""
    bare = key.lstrip("-")
    candidates = (bare,) if bare in schema else _nearest(bare, schema)
    return FlagIssue(key, "error", UNKNOWN_FLAG, "leading_dashes", {"version": schema.version}, candidates=candidates)


def _missing_flag_issue(flag: str, args: Mapping[str, object], schema: Schema) -> FlagIssue:
    translation = translation_for(flag, args, schema)
    known_in = versions_with_flag(flag, all_schemas())
    params: dict[str, str | int | float] = {"version": schema.version}
    if not known_in:
        other_engine = counterpart_issue("sglang", flag, schema, schema.version) if translation is None else None
        if other_engine is not None:
            return other_engine
        candidates = () if translation is not None else _nearest(flag, schema)
        return FlagIssue(flag, "error", UNKNOWN_FLAG, None, params, translation, candidates)
    note = None
    if translation is None:
        rule = dead_end_rule(flag)
        note = rule.note if rule is not None else None
    if version_key(known_in[0]) > version_key(schema.version):
        params["first"] = known_in[0]
        return FlagIssue(flag, "error", NOT_YET_AVAILABLE, None, params, translation, note=note)
    params["last"] = max(known_in, key=version_key)
    return FlagIssue(flag, "error", REMOVED_IN_VERSION, None, params, translation, note=note)


def _status_issues(flag: str, spec: FlagSpec, args: Mapping[str, object], schema: Schema) -> list[FlagIssue]:
    """Deprecated or retired flags (with the translation on offer), and hidden ones."""
    params: dict[str, str | int | float] = {"version": schema.version}
    if is_deprecated(schema, flag):
        translation = translation_for(flag, args, schema)
        if spec.retired:
            return [FlagIssue(flag, "error", DEPRECATED, "retired", params, translation)]
        if translation is None and spec.replacement:
            params["replacement"] = spec.replacement
            return [FlagIssue(flag, "warning", DEPRECATED, "replacement", params)]
        return [FlagIssue(flag, "warning", DEPRECATED, None, params, translation)]
    if spec.suppressed:
        return [FlagIssue(flag, "info", HIDDEN_FLAG, None, params)]
    return []


def _duplicate_issues(args: Mapping[str, object], schema: Schema) -> list[FlagIssue]:
    """Two spellings of one flag (``tp-size`` and ``tensor-parallel-size``, ``x`` and ``no-x``):
    argparse silently keeps the last, which is never what the author meant."""
    seen: dict[str, str] = {}
    issues = []
    for key in args:
        spec = schema.lookup(key) if isinstance(key, str) else None
        if spec is None:
            continue
        if spec.dest in seen:
            issues.append(FlagIssue(key, "error", DUPLICATE_FLAG, None, {"other": seen[spec.dest]}))
        else:
            seen[spec.dest] = key
    return issues


def _nearest(flag: str, schema: Schema) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(flag, sorted(schema.names), n=_NEAREST_COUNT, cutoff=_NEAREST_CUTOFF))
