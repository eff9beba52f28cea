"""Loading run plans from YAML safely, and turning every problem into a named field.

Plans come from a browser upload or a CLI path, so the loader is defensive: a size cap,
no anchors or aliases (the "billion laughs" bomb needs them and a plan never does), no
explicit tags, no duplicate keys, and a nesting limit, all checked on the event stream
before anything is constructed.  Only then is ``yaml.safe_load`` called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from domain.plan.run_plan import RunPlan

MAX_DEPTH = 12
MAX_NODES = 20_000


@dataclass(frozen=True)
class PlanProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class PlanError(ValueError):
    def __init__(self, problems: list[PlanProblem]):
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def _check_events(text: str) -> None:
    depth = nodes = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise PlanError([PlanProblem("", "YAML anchors and aliases are not allowed in a plan")])
        if isinstance(event, yaml.ScalarEvent) and event.tag is not None and event.implicit == (False, False):
            raise PlanError([PlanProblem("", f"YAML tags are not allowed in a plan ({event.tag})")])
        if isinstance(event, yaml.CollectionStartEvent):
            if event.tag is not None and not event.implicit:
                raise PlanError([PlanProblem("", f"YAML tags are not allowed in a plan ({event.tag})")])
            depth += 1
            if depth > MAX_DEPTH:
                raise PlanError([PlanProblem("", f"plan nests deeper than {MAX_DEPTH} levels")])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        nodes += 1
        if nodes > MAX_NODES:
            raise PlanError([PlanProblem("", f"plan has more than {MAX_NODES} YAML nodes")])


def _check_duplicate_keys(node: yaml.Node, path: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = f"{path}.{key}" if path else key
            if key in seen:
                raise PlanError([PlanProblem(where, "key appears twice")])
            seen.add(key)
            _check_duplicate_keys(value_node, where)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_duplicate_keys(item, f"{path}.{index}")


def load_yaml_mapping(text: str, *, max_bytes: int) -> dict[str, Any]:
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise PlanError([PlanProblem("", f"plan is {size} bytes; the limit is {max_bytes}")])
    try:
        _check_events(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _check_duplicate_keys(root)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError([PlanProblem("", f"not valid YAML: {exc}")]) from None
    if not isinstance(data, dict):
        raise PlanError([PlanProblem("", "a plan must be a YAML mapping (name:, engine:, model:, ...)")])
    return data


def _field_path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts union branch names into loc (e.g. 'int', 'constrained-str'); drop them.
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in {"int", "str", "float", "bool"}))]
    return ".".join(parts)


def problems_from_validation(exc: ValidationError) -> list[PlanProblem]:
    problems: list[PlanProblem] = []
    for error in exc.errors(include_url=False):
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append(PlanProblem(_field_path(error["loc"]), message))
    return problems


def plan_from_mapping(data: dict[str, Any]) -> RunPlan:
    try:
        return RunPlan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(problems_from_validation(exc)) from None


def load_plan(text: str, *, max_bytes: int) -> RunPlan:
    return plan_from_mapping(load_yaml_mapping(text, max_bytes=max_bytes))


def dump_plan(plan: RunPlan) -> str:
    return yaml.safe_dump(plan.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
