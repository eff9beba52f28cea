"""The Build page's text boxes read as plan values, and the values written back as text.

Readers never raise on what a person typed: the scalar readers return the text itself
when it is not a number (the plan's validation then names the field), and the role
readers return what they could read together with the reasons, in the page's language,
for what they could not."""

from __future__ import annotations

import re
from typing import Any

import yaml

from domain.core.i18n import t
from domain.plan.plan_io import PlanProblem
from domain.plan.topology_drawing import role_name

# A pasted file in a role's "other flags" box is refused before YAML parses it.
MAX_ROLE_FLAGS_CHARS = 10_000
_GPU_LIST = re.compile(r"[0-9]{1,2}(?:,[0-9]{1,2})*")
_FLAG_SCALARS = (bool, int, float, str)


def typed_scalar(text: str) -> Any:
    """A text box's value as the scalar it spells (8192 → int, 0.85 → float), else the text;
    the validator then checks it against the flag's type."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


def count_or_text(text: str) -> int | str:
    """A prompt or warm-up count: digits become an int, anything else stays text."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def rate_or_text(text: str) -> float | str:
    """A request rate: a number, ``inf``, or the text as typed."""
    text = text.strip()
    try:
        return "inf" if text == "inf" else float(text)
    except ValueError:
        return text


def concurrency_list(text: str) -> list[Any]:
    """``"1, 8, 64"`` → [1, 8, 64]; the Japanese comma separates too; non-digits stay text."""
    parts = [p.strip() for p in text.replace("、", ",").split(",") if p.strip()]
    return [int(p) if p.isdigit() else p for p in parts]


def highest_concurrency(text: str) -> int | None:
    """The sweep's highest concurrency, or None when the box holds no whole number."""
    values = [v for v in concurrency_list(text) if isinstance(v, int)]
    return max(values) if values else None


def flags_yaml(args: dict[str, Any]) -> str:
    """Flags as the YAML mapping a role's "other flags" box holds (empty for none)."""
    return yaml.safe_dump(args, sort_keys=False, allow_unicode=True, default_flow_style=False).strip() if args else ""


def gpu_ids_text(ids: list[list[int]] | None) -> str:
    """[[0, 1], [2, 3]] → ``"0,1;2,3"``: what :func:`parse_gpu_ids` reads back."""
    return ";".join(",".join(map(str, server)) for server in ids or [])


def parse_gpu_ids(text: str, role: str, count: int, gpus: int, lang: str) -> tuple[list[list[int]] | None, list[str]]:
    """``"0,1;2,3"`` → [[0, 1], [2, 3]]; empty → None (packed in order)."""
    text = text.strip().replace(" ", "").rstrip(";")
    if not text:
        return None, []
    name = role_name(role, lang)
    servers = text.split(";")
    if not all(_GPU_LIST.fullmatch(part) for part in servers):
        return None, [t("build.topo.bad_gpu_ids", lang, role=name, value=text)]
    ids = [[int(x) for x in part.split(",")] for part in servers]
    if len(ids) != count:
        return None, [t("build.topo.gpu_ids_count", lang, role=name, listed=len(ids), count=count)]
    for index, server in enumerate(ids):
        if len(server) != gpus:
            return None, [t("build.topo.gpu_ids_size", lang, role=name, index=index, listed=len(server), gpus=gpus)]
    return ids, []


def _flag_value_ok(value: object) -> bool:
    """A flag value is a scalar or a list of non-boolean scalars (what argv can spell)."""
    if isinstance(value, _FLAG_SCALARS):
        return True
    return isinstance(value, list) and all(isinstance(v, _FLAG_SCALARS) and not isinstance(v, bool) for v in value)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's complaint, with the line and column where it has them."""
    mark = getattr(exc, "problem_mark", None)
    detail = str(getattr(exc, "problem", None) or exc).strip()
    if mark is not None:
        detail += f" (line {mark.line + 1}, column {mark.column + 1})"
    return detail


def _has_alias(text: str) -> bool:
    """Anchors and aliases are refused: they would let a short text expand into a huge one."""
    return any(isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)
               for event in yaml.parse(text, Loader=yaml.SafeLoader))


def parse_role_flags(text: str, role: str, lang: str) -> tuple[dict[str, Any], list[str]]:
    """The free-form "other flags" box: a YAML or JSON mapping, or the reasons it is not one."""
    name = role_name(role, lang)
    text = text.strip()
    if not text:
        return {}, []
    if len(text) > MAX_ROLE_FLAGS_CHARS:
        return {}, [t("build.topo.flags_too_long", lang, role=name, limit=MAX_ROLE_FLAGS_CHARS)]
    try:
        if _has_alias(text):
            return {}, [t("build.topo.flags_alias", lang, role=name)]
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return {}, [t("build.topo.flags_bad_yaml", lang, role=name, detail=_yaml_problem(exc))]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [t("build.topo.flags_not_mapping", lang, role=name)]
    problems = [t("build.topo.flags_bad_name", lang, role=name, flag=key) for key in data if not isinstance(key, str)]
    problems += [t("build.topo.flags_bad_value", lang, role=name, flag=key) for key, value in data.items()
                 if isinstance(key, str) and not _flag_value_ok(value)]
    return ({} if problems else dict(data)), problems


def readable_problems(problems: list[PlanProblem], lang: str = "en") -> list[str]:
    """Each problem as a sentence in ``lang`` (:meth:`PlanProblem.text`: the plan's
    constraints, never a raw pattern or pydantic's wording).  A problem without a sentence of
    its own (a topology's layout, joined by "; ") gives one line per reason."""
    lines = []
    for problem in problems:
        if problem.kind and problem.kind != "value_error":
            lines.append(problem.text(lang))
            continue
        for part in problem.message.removeprefix("Value error, ").split("; "):
            lines.append(PlanProblem(problem.field, part, problem.kind).text(lang))
    return lines
