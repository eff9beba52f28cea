"""The Build page's errors beside the fields they name (issue 20, list 4).

The page validates the whole form after drawing it (a plan is assembled from every
widget), so an error cannot be drawn with its widget.  Instead each widget that an error
may name gets an empty placeholder right under it (:func:`slot_under`, one per widget on
every rerun, so the page's layout does not depend on the errors), and once the plan is
checked, :func:`show_field_errors` fills the placeholders of the widgets named.  The
summary beside the Queue button and the live panel still list every error.

Nothing here reads the database: the errors come from the validation the page already
ran (``PlanError``'s problems, ``check_plan``'s flag issues, ``context_length_errors``,
``thinking_checks``), each keyed by the widget that edits the field it names.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from domain.core.markdown import streamlit_md_text
from domain.core.settings import get_settings
from domain.flags.issues import FlagIssue
from domain.plan.checks import context_length_errors
from domain.plan.form_input import readable_problems
from domain.plan.plan_io import PlanProblem
from domain.plan.run_plan import RunPlan

FLAG_SLOT_PREFIX = "flag:"  # a flag widget's slot: flag:<flag name as in server_args>
CUSTOM_SCENARIO_SLOT = "b.custom"  # under the custom scenario's ISL/OSL boxes
CUSTOM_SCENARIO = "custom"  # the name build_form.py gives the custom scenario

# A plan field (its path without list positions) → the key of the widget that edits it.
FIELD_WIDGETS = {
    "name": "b.name", "engine": "b.engine", "emulated": "b.engine", "sglang_version": "b.version",
    "vllm_version": "b.vllm_version", "model": "b.model",
    "gpu.type": "b.gpu_type", "gpu.count": "b.gpu_count", "tags": "b.tags",
    "benchmark.scenarios": "b.scenarios", "benchmark.concurrency": "b.concurrency",
    "benchmark.num_prompts": "b.prompts", "benchmark.warmup": "b.warmup", "benchmark.repeats": "b.repeats",
    "benchmark.dataset": "b.dataset", "benchmark.seed": "b.seed", "benchmark.random_range_ratio": "b.range_ratio",
    "benchmark.request_rate": "b.rate", "benchmark.backend": "b.backend", "benchmark.apply_chat_template": "b.chat",
    "benchmark.thinking_mode": "b.thinking", "benchmark.ignore_eos": "b.stop_eos",
}
FieldErrors = dict[str, list[str]]  # widget key → the errors to draw under it, in the page's language

# This rerun's placeholders.  Streamlit runs a session's script in its own thread, so one
# registry per thread is one per session; the page starts it afresh on every rerun.
_local = threading.local()


def start_slots() -> None:
    """Forget the previous rerun's placeholders (the page calls it before any widget)."""
    _local.slots = {}


def slot_under(container: Any, key: str) -> None:
    """An empty placeholder right under the widget ``key`` just drawn in ``container``.  A
    page that did not call :func:`start_slots` (another page drawing a flag widget) gets none."""
    slots: dict[str, Any] | None = getattr(_local, "slots", None)
    if slots is not None and key not in slots:
        slots[key] = container.empty()


def widget_for(path: str, plan_mapping: dict[str, Any] | None = None) -> str | None:
    """The key of the widget that edits the plan field ``path`` (``benchmark.concurrency.1``
    → ``b.concurrency``; ``server_args.tp-size`` → ``flag:tp-size``), or None."""
    parts = path.split(".") if path else []
    if len(parts) > 1 and parts[0] == "server_args":
        return FLAG_SLOT_PREFIX + parts[1]
    if parts[:2] == ["benchmark", "scenarios"] and len(parts) > 2 and parts[2].isdigit() \
            and _scenario_name(plan_mapping, int(parts[2])) == CUSTOM_SCENARIO:
        return CUSTOM_SCENARIO_SLOT
    named = [p for p in parts if not p.isdigit()]
    while named:
        key = FIELD_WIDGETS.get(".".join(named))
        if key is not None:
            return key
        named.pop()
    return None


def _scenario_name(plan_mapping: dict[str, Any] | None, index: int) -> str | None:
    try:
        return str(plan_mapping["benchmark"]["scenarios"][index]["name"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None


def _add(errors: FieldErrors, key: str | None, lines: Iterable[str]) -> None:
    if key is not None:
        errors.setdefault(key, []).extend(lines)


def problem_errors(problems: list[PlanProblem], lang: str, plan_mapping: dict[str, Any] | None) -> FieldErrors:
    """A plan's validation problems by widget, each as the sentence the summary shows."""
    errors: FieldErrors = {}
    for problem in problems:
        _add(errors, widget_for(problem.field, plan_mapping), readable_problems([problem], lang))
    return errors


def flag_errors(issues: Iterable[FlagIssue], lang: str) -> FieldErrors:
    """The plan-wide flags' errors under each flag's widget (a role's own flags are edited
    in the topology editor, which lists them itself)."""
    errors: FieldErrors = {}
    for issue in issues:
        if issue.flag:
            _add(errors, FLAG_SLOT_PREFIX + issue.flag, [issue.message(lang)])
    return errors


def scenario_length_errors(plan: RunPlan, lang: str) -> FieldErrors:
    """A scenario longer than the context, under the scenario's own widget: the preset
    list, or the custom ISL/OSL boxes."""
    errors: FieldErrors = {}
    for scenario in plan.benchmark.scenarios:
        alone = plan.model_copy(update={"benchmark": plan.benchmark.model_copy(update={"scenarios": [scenario]})})
        key = CUSTOM_SCENARIO_SLOT if scenario.name == CUSTOM_SCENARIO else "b.scenarios"
        _add(errors, key, context_length_errors(alone, lang, get_settings().model_dirs))
    return errors


def merged(*parts: FieldErrors) -> FieldErrors:
    errors: FieldErrors = {}
    for part in parts:
        for key, lines in part.items():
            _add(errors, key, lines)
    return errors


def show_field_errors(errors: FieldErrors) -> None:
    """Fill the placeholder under each named widget; an error whose widget is not on the
    page this rerun (a flag hidden by the search) stays in the summary only."""
    slots: dict[str, Any] = getattr(_local, "slots", None) or {}
    for key, lines in errors.items():
        slot = slots.get(key)
        if slot is None or not lines:
            continue
        unique = list(dict.fromkeys(lines))
        slot.markdown("  \n".join(f":red[:material/error: {_literal(line)}]" for line in unique))


_literal = streamlit_md_text  # a message as literal Markdown (it may quote a name or a flag value)
