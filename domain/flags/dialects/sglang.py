"""SGLang's flag dialect: its schema dump, its drift table and value rules, its argv words.

The SGLang-specific flag code itself stays where it always was (``values.py``, ``drift.py``,
``risk.py``'s layer table, ``policy.yaml``); this module names those pieces for the shared
validation, rendering and risk code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from domain.flags.dialect import FlagDialect
from domain.flags.drift import dead_end_rule, is_deprecated, translation_for
from domain.flags.issues import FlagIssue
from domain.flags.policy import Policy, load_policy
from domain.flags.risk import classify_flag, risk_layers
from domain.flags.schema import FlagSpec, Schema, load_schema
from domain.flags.values import ValueContext, check_value

NEGATIVE_NUMBER = re.compile(r"^-[0-9]+(?:\.[0-9]*)?$", re.ASCII)


def render_scalar(option: str, value: object) -> str:
    """One SGLang value as an argv word: JSON compact (non-ASCII kept), floats by ``repr``;
    a value starting with ``-`` other than a negative number is refused (argparse would
    take it for an option, and SGLang documents no such value)."""
    if isinstance(value, bool):
        raise ValueError(f"{option} takes a value, not true/false")
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    text = repr(value) if isinstance(value, float) else str(value)
    if text.startswith("-") and not NEGATIVE_NUMBER.match(text):
        raise ValueError(f"{option}: a value starting with '-' would be read as an option")
    return text


def _check_value(spec: FlagSpec, flag: str, value: object, policy: Policy,
                 model_dirs: Sequence[Path]) -> list[FlagIssue]:
    return check_value(spec, flag, value, ValueContext(policy, tuple(model_dirs)))


def _dead_end_note(flag: str) -> Mapping[str, str] | None:
    rule = dead_end_rule(flag)
    return rule.note if rule is not None else None


def _own_detail(detail: str | None) -> str | None:
    return detail  # SGLang's messages are the catalogue's plain ``flags.issue.<code>[.<detail>]``


SGLANG_FLAGS = FlagDialect(
    family="sglang",
    name="SGLang",
    read_schema=Schema.from_dict,
    detail=_own_detail,
    translation=translation_for,
    deprecated=is_deprecated,
    check_value=_check_value,
    render_scalar=render_scalar,
    attach_dashed=False,
    policy=load_policy,
    risk_table=risk_layers,
    classify=classify_flag,
    dead_end_note=_dead_end_note,
    load=load_schema,
)
