"""Checking one flag's value against its schema entry, its documented range and the policy.

Values arrive as YAML gives them: ``true``/``false`` for switches, numbers, strings,
lists for ``nargs='+'``/``'*'`` flags, and objects for JSON-typed flags.  Python's own
conversions are too lenient for this (``int('８') == 8``, ``float('nan')``,
``True == 1``), so every check here is explicit.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from domain.flags._data import DataFileError, data_file
from domain.flags.issues import BAD_CHOICE, BAD_NARGS, BAD_TYPE, BAD_VALUE, MISSING_VALUE, FlagIssue
from domain.flags.policy import Policy, path_inside_issue, validate_model_ref
from domain.flags.schema import FlagSpec
from domain.flags.strings import (
    free_text_problem,
    has_control_characters,
    has_non_ascii_digit,
    has_parent_reference,
    plain_value_problem,
)

INT_TYPES = frozenset({"int", "human_readable_int"})
FLOAT_TYPES = frozenset({"float"})
JSON_TYPES = frozenset({"loads", "json_list_type", "parse_cuda_graph_config_arg"})

_ASCII_INT = re.compile(r"^-?[0-9]+$", re.ASCII)
_ASCII_FLOAT = re.compile(r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$", re.ASCII)
# SGLang's human_readable_int: SI suffixes (decimals allowed) and IEC suffixes (integers only).
_HUMAN_INT = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:k|M|G|T)|[0-9]+(?:Ki|Mi|Gi|Ti))$", re.ASCII)
# IEC suffixes first: "Ki" must not be read as "i" after "K".
_SUFFIX_FACTORS = (
    ("Ki", 2**10),
    ("Mi", 2**20),
    ("Gi", 2**30),
    ("Ti", 2**40),
    ("k", 10**3),
    ("M", 10**6),
    ("G", 10**9),
    ("T", 10**12),
)


@dataclass(frozen=True)
class Range:
    """A documented numeric range; ``allow`` holds sentinels outside it (-1 = disabled)."""

    minimum: float | None = None
    maximum: float | None = None
    min_exclusive: float | None = None
    max_exclusive: float | None = None
    allow: frozenset[float] = frozenset()

    def contains(self, number: float) -> bool:
        if number in self.allow:
            return True
        below = (self.minimum is not None and number < self.minimum) or (
            self.min_exclusive is not None and number <= self.min_exclusive
        )
        above = (self.maximum is not None and number > self.maximum) or (
            self.max_exclusive is not None and number >= self.max_exclusive
        )
        return not (below or above)

    def describe(self) -> str:
        low = f"> {self.min_exclusive}" if self.min_exclusive is not None else f">= {self.minimum}"
        high = f"< {self.max_exclusive}" if self.max_exclusive is not None else f"<= {self.maximum}"
        parts = [p for p, on in ((low, self._has_low()), (high, self._has_high())) if on]
        text = ", ".join(parts)
        if self.allow:
            text += " | " + ", ".join(_number_text(a) for a in sorted(self.allow))
        return text

    def _has_low(self) -> bool:
        return self.minimum is not None or self.min_exclusive is not None

    def _has_high(self) -> bool:
        return self.maximum is not None or self.max_exclusive is not None


@lru_cache(maxsize=1)
def _range_entries() -> tuple[tuple[tuple[str, ...], Range], ...]:
    raw = data_file("ranges.yaml")
    try:
        return tuple((tuple(e["flags"]), _range_from(e)) for e in raw["ranges"])
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"ranges.yaml: malformed entry {exc}") from exc


def _range_from(entry: Mapping[str, Any]) -> Range:
    return Range(
        minimum=entry.get("min"),
        maximum=entry.get("max"),
        min_exclusive=entry.get("min_exclusive"),
        max_exclusive=entry.get("max_exclusive"),
        allow=frozenset(entry.get("allow") or ()),
    )


def range_for(flag: str) -> Range | None:
    """The documented range of a flag, from ``data/ranges.yaml`` (first matching entry)."""
    for patterns, value_range in _range_entries():
        if any(fnmatch.fnmatchcase(flag, p) for p in patterns):
            return value_range
    return None


@dataclass(frozen=True)
class ValueContext:
    """What value checks need besides the schema entry."""

    policy: Policy
    model_dirs: Sequence[Path]


def check_value(spec: FlagSpec, flag: str, value: object, ctx: ValueContext) -> list[FlagIssue]:
    """Every problem with ``value`` for ``flag`` (an exact spelling of ``spec``)."""
    if spec.takes_no_value:
        return _check_switch(flag, value)
    if spec.value_optional and value is True:
        return []  # nargs='?' used as a bare flag
    if spec.takes_list:
        return _check_list(spec, flag, value, ctx)
    if isinstance(value, list | tuple):
        return [FlagIssue(flag, "error", BAD_NARGS, "list_for_scalar")]
    return _check_element(spec, flag, value, ctx)


def _check_switch(flag: str, value: object) -> list[FlagIssue]:
    if isinstance(value, bool):
        return []
    return [FlagIssue(flag, "error", BAD_TYPE, "switch", {"value": shown_value(value)})]


def _check_list(spec: FlagSpec, flag: str, value: object, ctx: ValueContext) -> list[FlagIssue]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items and spec.nargs == "+":
        return [FlagIssue(flag, "error", MISSING_VALUE, "list")]
    issues: list[FlagIssue] = []
    for item in items:
        if isinstance(item, list | tuple | dict):
            issues.append(FlagIssue(flag, "error", BAD_NARGS, "nested"))
        else:
            issues.extend(_check_element(spec, flag, item, ctx))
    return issues


def _check_element(spec: FlagSpec, flag: str, value: object, ctx: ValueContext) -> list[FlagIssue]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return [FlagIssue(flag, "error", MISSING_VALUE)]
    if isinstance(value, bool) and spec.type not in INT_TYPES | FLOAT_TYPES:
        return [FlagIssue(flag, "error", MISSING_VALUE, "switch_value")]
    kind = spec.type or "str"
    if kind in INT_TYPES or kind in FLOAT_TYPES:
        return _check_number(spec, flag, value)
    if kind in JSON_TYPES:
        return _check_json(spec, flag, value, ctx)
    return _check_text(spec, flag, value, ctx)


# -- numbers -------------------------------------------------------------------------


def _check_number(spec: FlagSpec, flag: str, value: object) -> list[FlagIssue]:
    kind = spec.type or "int"
    number = _as_number(kind, value)
    if isinstance(number, str):  # not a number: the reason why
        code = BAD_VALUE if number in ("not_finite", "non_ascii_digit") else BAD_TYPE
        return [FlagIssue(flag, "error", code, number, {"value": shown_value(value), "type": kind})]
    choice = _choice_issue(spec, flag, number)
    if choice is not None:
        return [choice]
    return _range_issues(flag, number)


def _as_number(kind: str, value: object) -> float | str:
    """The number a value denotes for an int/float flag, or (a str) why it denotes none."""
    if isinstance(value, bool):
        return "bool_as_number"
    if isinstance(value, str):
        return _parse_number_text(kind, value.strip())
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "not_finite"
        # A float where an int is expected: SGLang's int("8.0") fails, so refuse it here too.
        return "int" if kind in INT_TYPES else value
    return kind_problem(kind)


def _parse_number_text(kind: str, text: str) -> float | str:
    if has_non_ascii_digit(text):
        return "non_ascii_digit"
    if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return "not_finite"
    if kind in INT_TYPES and _ASCII_INT.match(text):
        return float(int(text))
    if kind == "human_readable_int" and _HUMAN_INT.match(text):
        return _expand_suffix(text)
    if kind in FLOAT_TYPES and _ASCII_FLOAT.match(text):
        return float(text)
    return kind_problem(kind)


def _expand_suffix(text: str) -> float:
    """``'25.6k'`` -> 25600, ``'1Ki'`` -> 1024, as SGLang's human_readable_int reads them."""
    for suffix, factor in _SUFFIX_FACTORS:
        if text.endswith(suffix):
            return float(Decimal(text[: -len(suffix)]) * factor)
    return float(text)


def kind_problem(kind: str) -> str:
    return "int" if kind in INT_TYPES else "float"


def _range_issues(flag: str, number: float) -> list[FlagIssue]:
    value_range = range_for(flag)
    if value_range is None or value_range.contains(number):
        return []
    params = {"value": _number_text(number), "range": value_range.describe()}
    return [FlagIssue(flag, "error", BAD_VALUE, "out_of_range", params)]


def _choice_issue(spec: FlagSpec, flag: str, value: object) -> FlagIssue | None:
    if spec.choices is None:
        return None
    allowed = {str(c) for c in spec.choices}
    shown = _number_text(value) if isinstance(value, float) else str(value)
    if shown in allowed:
        return None
    choices = ", ".join(str(c) for c in spec.choices)
    return FlagIssue(flag, "error", BAD_CHOICE, params={"value": shown, "choices": choices})


# -- JSON ------------------------------------------------------------------------------


def _check_json(spec: FlagSpec, flag: str, value: object, ctx: ValueContext) -> list[FlagIssue]:
    if isinstance(value, str):
        text_issues = _string_issues(spec, flag, value, ctx, free_text=True)
        if text_issues:
            return text_issues
        parsed, ok = parse_json(value)
        if not ok:
            return [FlagIssue(flag, "error", BAD_VALUE, "bad_json", {"value": shown_value(value)})]
    else:
        parsed = value
    expected = {"json_list_type": list, "parse_cuda_graph_config_arg": dict}.get(spec.type or "")
    if expected is not None and not isinstance(parsed, expected):
        return [FlagIssue(flag, "error", BAD_TYPE, "json_" + expected.__name__, {"value": shown_value(value)})]
    if not isinstance(parsed, dict | list):
        return [FlagIssue(flag, "error", BAD_TYPE, "json", {"value": shown_value(value)})]
    return _json_strings_issues(spec, flag, parsed, ctx)


def parse_json(text: str) -> tuple[object, bool]:
    def refuse_constant(name: str) -> object:
        raise ValueError(name)  # NaN / Infinity are not JSON

    try:
        return json.loads(text, parse_constant=refuse_constant), True
    except ValueError:
        return None, False


def _json_strings_issues(spec: FlagSpec, flag: str, parsed: object, ctx: ValueContext) -> list[FlagIssue]:
    """Strings nested in a JSON value get the free-text checks (no NaN, no command syntax)."""
    for item in walk_json(parsed):
        if isinstance(item, float) and not math.isfinite(item):
            return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": shown_value(item), "type": "json"})]
        if isinstance(item, str):
            issues = _string_issues(spec, flag, item, ctx, free_text=True, leading_dash_ok=True)
            if issues:
                return issues
    return []


def walk_json(node: object) -> list[object]:
    if isinstance(node, dict):
        return [*node.keys(), *(x for v in node.values() for x in walk_json(v))]
    if isinstance(node, list):
        return [x for v in node for x in walk_json(v)]
    return [node]


# -- text --------------------------------------------------------------------------------


def _check_text(spec: FlagSpec, flag: str, value: object, ctx: ValueContext) -> list[FlagIssue]:
    if isinstance(value, float) and not math.isfinite(value):
        return [FlagIssue(flag, "error", BAD_VALUE, "not_finite", {"value": shown_value(value), "type": "str"})]
    if not isinstance(value, str | int | float):
        return [FlagIssue(flag, "error", BAD_TYPE, "str", {"value": shown_value(value)})]
    text = value if isinstance(value, str) else _number_text(value)
    free = flag in ctx.policy.free_text_flags or _looks_like_json(flag, text, ctx)
    issues = _string_issues(spec, flag, text, ctx, free_text=free)
    if issues:
        return issues
    choice = _choice_issue(spec, flag, text)
    if choice is not None:
        return [choice]
    return _reference_issues(flag, text, ctx)


def _looks_like_json(flag: str, text: str, ctx: ValueContext) -> bool:
    # Some path flags also take inline JSON ("a JSON string or a file path").
    return flag in ctx.policy.path_flags and text.lstrip().startswith(("{", "["))


def _string_issues(
    spec: FlagSpec,
    flag: str,
    text: str,
    ctx: ValueContext,
    *,
    free_text: bool,
    leading_dash_ok: bool = False,
) -> list[FlagIssue]:
    params = {"value": shown_value(text)}
    if has_control_characters(text):
        return [FlagIssue(flag, "error", BAD_VALUE, "control_char", params)]
    if text.startswith("-") and not leading_dash_ok:
        # argparse would read it as another option; SGLang never documents such values.
        return [FlagIssue(flag, "error", BAD_VALUE, "leading_dash", params)]
    problem = free_text_problem(text) if free_text else plain_value_problem(text)
    if problem is not None:
        return [FlagIssue(flag, "error", BAD_VALUE, problem, params)]
    if not free_text and has_parent_reference(text):
        return [FlagIssue(flag, "error", BAD_VALUE, "path_traversal", params)]
    return []


def _reference_issues(flag: str, text: str, ctx: ValueContext) -> list[FlagIssue]:
    """Model references and file paths must stay inside the allowed model directories."""
    if flag in ctx.policy.model_ref_flags:
        issue = validate_model_ref(text, ctx.model_dirs, flag=flag)
        return [issue] if issue is not None else []
    if flag in ctx.policy.path_flags and ("/" in text or "\\" in text):
        issue = path_inside_issue(flag, text, ctx.model_dirs, code=BAD_VALUE)
        return [issue] if issue is not None else []
    return []


def _number_text(number: object) -> str:
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def shown_value(value: object, limit: int = 60) -> str:
    """A value as messages show it: repr-escaped so control characters stay visible."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    shown = repr(text)[1:-1] if has_control_characters(text) else text
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
