"""``runner check`` and the form on a plan's quality section and pinned acceptance.

Errors: an eval set that cannot be read (the line named), a pinned acceptance on an engine
that is not SGLang's.  Warnings: a probe the engine cannot answer (it speaks SGLang's
``/generate``), a pinned acceptance without a speculative algorithm (it does nothing
then), and a speculative plan measured on random-ids prompts (its acceptance is not what a
real text distribution gets).
"""

from __future__ import annotations

from domain.core.i18n import t
from domain.plan.eval_set import EvalSetError, load_eval_set
from domain.plan.run_plan import RunPlan

PROBED_ENGINES = frozenset({"sglang"})  # the engine family: SGLang, launched or emulated


def is_speculative(plan: RunPlan) -> bool:
    flags = [plan.server_args, *(group.server_args for _role, group in plan.topology.groups())]
    return any(args.get("speculative-algorithm") not in (None, "", "NONE") for args in flags)


def quality_problems(plan: RunPlan, lang: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the quality section and the pinned acceptance."""
    errors, warnings = [], []
    quality, pinned = plan.quality, plan.pinned_acceptance
    if quality is not None and plan.engine not in PROBED_ENGINES:
        warnings.append(t("quality.check.engine", lang, engine=plan.engine_label))
    if quality is not None and quality.eval is not None:
        try:
            load_eval_set(quality.eval)
        except EvalSetError as exc:
            errors.append(t("quality.check.eval_set", lang, path=quality.eval.path, reason=str(exc)))
    if pinned is not None and plan.engine not in PROBED_ENGINES:
        errors.append(t("quality.check.pinned_engine", lang, engine=plan.engine_label))
    elif pinned is not None and not is_speculative(plan):
        warnings.append(t("quality.check.pinned_without_spec", lang))
    if is_speculative(plan) and plan.benchmark.dataset == "random-ids":
        warnings.append(t("quality.check.spec_random_ids", lang))
    return errors, warnings
