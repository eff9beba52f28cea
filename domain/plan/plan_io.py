"""Loading run plans from YAML safely, and turning every problem into a named field.

Plans come from a browser upload or a CLI path, so the loader is defensive: a size cap,
no anchors or aliases (the "billion laughs" bomb needs them and a plan never does), no
explicit tags, no duplicate keys, and a nesting limit, all checked on the event stream
before anything is constructed.  Only then is ``yaml.safe_load`` called.

Every problem keeps pydantic's (or our own) English ``message`` for the CLI and logs, and
its ``kind`` and ``context``, from which :meth:`PlanProblem.text` writes a sentence in the
UI's language: the ``plan.problem.<kind>`` strings of domain/core/i18n/naming.yaml, with
the field named by its ``plan.field.<path>`` label.  No sentence shows a raw pattern: a
pattern mismatch is explained per field (``plan.pattern.<path>``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import yaml
from pydantic import ValidationError

from domain.core.i18n import catalogue, t
from domain.plan.run_plan import RunPlan

MAX_DEPTH = 12
MAX_NODES = 20_000


# pydantic's error types that say "not the right kind of value", by the kind they expect.
_TYPE_ERRORS = {
    "int_type": "integer", "int_parsing": "integer", "int_from_float": "integer",
    "float_type": "number", "float_parsing": "number", "finite_number": "number",
    "bool_type": "boolean", "bool_parsing": "boolean", "string_type": "text", "string_unicode": "text",
    "list_type": "list", "dict_type": "mapping", "model_type": "mapping", "model_attributes_type": "mapping",
}
_QUOTED = re.compile(r"'([^']*)'")


@dataclass(frozen=True)
class PlanProblem:
    field: str
    message: str
    kind: str = ""  # pydantic's error type or a plan_rule kind; "" for a problem without a sentence
    context: Mapping[str, Any] = dataclass_field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def text(self, lang: str) -> str:
        """The problem as one sentence in ``lang`` (the English ``message`` is for logs)."""
        label = field_label(self.field, lang)
        kind = self.kind
        params: dict[str, Any] = {k: _shown(v) for k, v in self.context.items()}
        params["field"] = label
        if kind in _TYPE_ERRORS:
            return t("plan.problem.wrong_type", lang, field=label,
                     expected=t(f"plan.type.{_TYPE_ERRORS[kind]}", lang))
        if kind in ("string_too_short", "too_short") and self.context.get("min_length") == 1:
            kind = "empty" if kind == "string_too_short" else "empty_list"
        if kind == "literal_error":
            params["choices"] = _choices(str(self.context.get("expected", "")), lang)
        if kind == "string_pattern_mismatch":
            return _pattern_text(self.field, label, lang)
        if kind and f"plan.problem.{kind}" in catalogue():
            return t(f"plan.problem.{kind}", lang, **params)
        detail = self.message.removeprefix("Value error, ")
        return t("plan.problem.other", lang, field=label, detail=detail) if self.field else detail


def _shown(value: Any) -> Any:
    """Numbers as a person writes them (1 not 1.0), everything else unchanged."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _choices(expected: str, lang: str) -> str:
    """pydantic's "'a', 'b' or 'c'" as the UI's own list of the allowed values."""
    return t("plan.list_separator", lang).join(_QUOTED.findall(expected)) or expected


def _path_key(path: str) -> tuple[str, int | None]:
    """``benchmark.scenarios.0.name`` → (``benchmark.scenarios.name``, 0): the field without
    list positions, and the last position (None when the path has none)."""
    parts = path.split(".") if path else []
    positions = [int(p) for p in parts if p.isdigit()]
    return ".".join(p for p in parts if not p.isdigit()), (positions[-1] if positions else None)


def field_label(path: str, lang: str) -> str:
    """A plan field's name as the form calls it, with the list position when there is one;
    a field the catalogue does not name keeps its path."""
    key, position = _path_key(path)
    if not key:
        return t("plan.field.plan", lang)
    label = t(f"plan.field.{key}", lang) if f"plan.field.{key}" in catalogue() else key
    return label if position is None else t("plan.item", lang, field=label, n=position + 1)


def _pattern_text(path: str, label: str, lang: str) -> str:
    key, _ = _path_key(path)
    specific = f"plan.pattern.{key}"
    if specific in catalogue():
        return t(specific, lang, field=label)
    return t("plan.problem.string_pattern_mismatch", lang, field=label)


class PlanError(ValueError):
    def __init__(self, problems: list[PlanProblem]):
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def _tag_refused(tag: str) -> PlanError:
    return PlanError([PlanProblem("", f"YAML tags are not allowed in a plan ({tag})", "yaml_tag", {"tag": tag})])


def _check_events(text: str) -> None:
    depth = nodes = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise PlanError([PlanProblem("", "YAML anchors and aliases are not allowed in a plan", "yaml_alias")])
        if isinstance(event, yaml.ScalarEvent) and event.tag is not None and event.implicit == (False, False):
            raise _tag_refused(str(event.tag))
        if isinstance(event, yaml.CollectionStartEvent):
            if event.tag is not None and not event.implicit:
                raise _tag_refused(str(event.tag))
            depth += 1
            if depth > MAX_DEPTH:
                raise PlanError([PlanProblem("", f"plan nests deeper than {MAX_DEPTH} levels", "too_deep",
                                             {"limit": MAX_DEPTH})])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        nodes += 1
        if nodes > MAX_NODES:
            raise PlanError([PlanProblem("", f"plan has more than {MAX_NODES} YAML nodes", "too_many_nodes",
                                         {"limit": MAX_NODES})])


def _check_duplicate_keys(node: yaml.Node, path: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = f"{path}.{key}" if path else key
            if key in seen:
                raise PlanError([PlanProblem(where, "key appears twice", "duplicate_key")])
            seen.add(key)
            _check_duplicate_keys(value_node, where)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_duplicate_keys(item, f"{path}.{index}")


def _yaml_place(exc: yaml.YAMLError) -> dict[str, int]:
    """Where the parser gave up (1-based line and column), when it says."""
    mark = getattr(exc, "problem_mark", None)
    return {"line": mark.line + 1, "column": mark.column + 1} if mark is not None else {"line": 0, "column": 0}


def load_yaml_mapping(text: str, *, max_bytes: int) -> dict[str, Any]:
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise PlanError([PlanProblem("", f"plan is {size} bytes; the limit is {max_bytes}", "too_big",
                                     {"size": size, "limit": max_bytes})])
    try:
        _check_events(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _check_duplicate_keys(root)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError([PlanProblem("", f"not valid YAML: {exc}", "bad_yaml", _yaml_place(exc))]) from None
    if not isinstance(data, dict):
        raise PlanError([PlanProblem("", "a plan must be a YAML mapping (name:, engine:, model:, ...)",
                                     "not_mapping")])
    return data


_BRANCHES = {"int", "str", "float", "bool", "none", "constrained-str", "constrained-int", "constrained-float"}


def _field_path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts union branch names into loc (e.g. 'int', 'constrained-str'); drop them.
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in _BRANCHES))]
    return ".".join(parts)


def problems_from_validation(exc: ValidationError) -> list[PlanProblem]:
    """One problem per field: a value that fails every branch of a union (``float |
    "inf"``) is one mistake, named by the first branch's complaint."""
    problems: list[PlanProblem] = []
    seen: set[str] = set()
    for error in exc.errors(include_url=False):
        path = _field_path(error["loc"])
        if path in seen:
            continue
        seen.add(path)
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(PlanProblem(path, message, error["type"], dict(error.get("ctx") or {})))
    return problems


def plan_from_mapping(data: dict[str, Any]) -> RunPlan:
    try:
        return RunPlan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(problems_from_validation(exc)) from None


def load_plan(text: str, *, max_bytes: int) -> RunPlan:
    return plan_from_mapping(load_yaml_mapping(text, max_bytes=max_bytes))


def dump_plan(plan: RunPlan) -> str:
    data = plan.model_dump(mode="json")
    # Only a tuner's trial stops early; every other plan reads as it did before the field existed.
    if data["benchmark"].get("stop_on_sla") is None:
        data["benchmark"].pop("stop_on_sla", None)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
