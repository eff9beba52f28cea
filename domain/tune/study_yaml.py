"""A tuning study's YAML: read (by the run plan's defensive loader) and written.

A study with an empty ``space`` gets :func:`domain.tune.space.default_space` at load: the
seed's levers under the base plan's SGLang version and the rule profile; every lever is
then checked against that profile.  Apart from domain/tune/study.py (the model), so that
the search space, which reads the model, is not imported by it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from domain.flags.schema import newest_version
from domain.plan.plan_io import PlanError, PlanProblem, load_yaml_mapping, problems_from_validation
from domain.tune.space import banned_reason, default_space, lever_bans
from domain.tune.study import MAX_STUDY_BYTES, Study


def _with_default_space(study: Study) -> Study:
    """The study with its space filled in (when empty) and checked against its rule profile."""
    if not study.space:
        version = study.base_plan.sglang_version or _default_version()
        levers = default_space(version, study.base_plan.gpu.count, study.rule_profile)
        study = study.model_copy(update={"space": levers})
    profile = study.rule_profile
    problems = [
        PlanProblem(f"space.{index}", banned_reason(flag, value, profile) or "", "banned_by_rules",
                    {"flag": flag, "value": value, "profile": profile, "reason_ja": rule.reason["ja"],
                     "reason_en": rule.reason["en"]})
        for index, lever in enumerate(study.space) for flag, value, rule in lever_bans(lever, profile)]
    if problems:
        raise PlanError(problems)
    return study


def _default_version() -> str:
    """An emulator plan names no version; its flags are judged by the newest shipped schema."""
    return newest_version()


def study_from_mapping(data: dict[str, Any]) -> Study:
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        raise PlanError(problems_from_validation(exc)) from None
    return _with_default_space(study)


def study_from_yaml(text: str) -> Study:
    """A study from YAML text; PlanError (with one problem per field) when it is not one."""
    return study_from_mapping(load_yaml_mapping(text, max_bytes=MAX_STUDY_BYTES))


def load_study(path: Path) -> Study:
    return study_from_yaml(path.read_text(encoding="utf-8"))


def dump_study(study: Study) -> str:
    return yaml.safe_dump(study.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
