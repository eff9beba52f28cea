"""SGLang server flags: schemas per version, validation, drift translation, rule risk.

Everything a plan's ``server_args`` goes through before the runner builds an argv:

* :mod:`schema` — the shipped per-version schemas, exact-spelling lookups;
* :mod:`validate` — :func:`validate_server_args` (schema, policy, values);
* :mod:`drift` — the drift table, :func:`retarget` between versions;
* :mod:`argv` — :func:`render_argv` and :func:`parse_command_line`;
* :mod:`policy` — the runner host's security policy, :func:`validate_model_ref`;
* :mod:`risk` — rule-risk layers and contest rule profiles, :func:`assess_risk`;
* :mod:`levers` — the seed's lever notes and the parallelism glossary;
* :mod:`report` — :func:`check_configuration` and :func:`format_check_report`.

Imports neither Streamlit nor subprocess.
"""

from domain.flags.argv import CommandLineError, parse_command_line, render_argv
from domain.flags.drift import NoCounterpart, RetargetResult, retarget
from domain.flags.issues import FlagIssue, FlagReport, Severity, Translation
from domain.flags.policy import Policy, load_policy, validate_model_ref
from domain.flags.risk import RiskReport, assess_risk, available_profiles, classify_flag, unclassified_flags
from domain.flags.schema import (
    FlagSpec,
    Schema,
    SchemaError,
    known_versions,
    load_schema,
    newest_version,
    version_key,
)
from domain.flags.validate import validate_server_args

__all__ = [
    "CommandLineError",
    "FlagIssue",
    "FlagReport",
    "FlagSpec",
    "NoCounterpart",
    "Policy",
    "RetargetResult",
    "RiskReport",
    "Schema",
    "SchemaError",
    "Severity",
    "Translation",
    "assess_risk",
    "available_profiles",
    "classify_flag",
    "known_versions",
    "load_policy",
    "load_schema",
    "newest_version",
    "parse_command_line",
    "render_argv",
    "retarget",
    "unclassified_flags",
    "validate_model_ref",
    "validate_server_args",
    "version_key",
]
