"""A tuning study: a base run plan, what to maximise, the latency SLA, the levers to turn,
the rule profile that bounds them, and how many trials to spend (issue 17).

A study is YAML like a run plan and is read by the same defensive loader
(domain/plan/plan_io.py: size cap, no anchors, tags or duplicate keys); its problems are
:class:`~domain.plan.plan_io.PlanProblem` s, so the page and the CLI explain them the same
way.  Reading and writing that YAML is domain/tune/study_yaml.py's (it fills in an empty
``space`` from domain/tune/space.py, which reads this model).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.flags.risk import available_profiles
from domain.plan.run_plan import RunPlan

MAX_STUDY_BYTES = 256 * 1024
MAX_TRIALS = 500
# A study's name becomes the tag "study-<name>", and a RunPlan tag is at most 80 characters.
_STUDY_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$"
_FLAG = r"^[a-z0-9][a-z0-9\-]{0,79}$"

Choice = str | int | float | bool
# The one lever that is not a flag: a whole layout per choice (domain/tune/space.py explains why).
LAYOUT = "layout"
_LAYOUT_TEXT = re.compile(r"^[a-z0-9\-]+=(?:[0-9]+|true)(?:,[a-z0-9\-]+=(?:[0-9]+|true))*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(StrEnum):
    OUTPUT_TOK_S_PER_GPU = "output_tok_s_per_gpu"
    GOODPUT = "goodput"
    MAX_CONCURRENCY = "max_concurrency_under_sla"


class Sla(_Strict):
    """p99 limits a point must meet; ``concurrencies`` None means every concurrency of the plan."""

    ttft_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tpot_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    concurrencies: Annotated[list[Annotated[int, Field(ge=1, strict=True)]], Field(min_length=1)] | None = None

    @property
    def limited(self) -> bool:
        return self.ttft_p99_ms is not None or self.tpot_p99_ms is not None


class Lever(_Strict):
    """One flag the search may set: an integer or float range, or a list of choices."""

    flag: Annotated[str, Field(pattern=_FLAG)]
    kind: Literal["int", "float", "choice"]
    low: float | None = None
    high: float | None = None
    step: Annotated[float, Field(gt=0)] | None = None
    log: bool = False
    choices: Annotated[list[Choice], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _shape(self) -> Lever:
        if self.kind == "choice":
            if not self.choices or self.low is not None or self.high is not None:
                raise ValueError(f"{self.flag}: a choice lever has choices and no low/high")
            bad = [c for c in self.choices if self.flag == LAYOUT and not _LAYOUT_TEXT.match(str(c))]
            if bad:
                raise ValueError(f"layout choices are written like 'tp-size=8,ep-size=2', not {bad[0]!r}")
            return self
        if self.low is None or self.high is None or self.choices is not None:
            raise ValueError(f"{self.flag}: a range lever has low and high and no choices")
        if self.low > self.high:
            raise ValueError(f"{self.flag}: low {self.low} is above high {self.high}")
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError(f"{self.flag}: a log range needs low > 0 and no step")
        return self


class Budget(_Strict):
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS, strict=True)]
    gpu_hours: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None


class Study(_Strict):
    name: Annotated[str, Field(pattern=_STUDY_NAME)]
    base_plan: RunPlan
    objective: Objective
    sla: Sla = Field(default_factory=Sla)
    space: list[Lever] = Field(default_factory=list)
    rule_profile: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,39}$")] = "2025"
    budget: Budget
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 0
    best_repeats: Annotated[int, Field(ge=1, le=20, strict=True)] = 3
    # "same": a trial whose quality probe is not "same" as its reference run's is infeasible
    # (domain/tune/quality.py); needs the base plan's quality: section.
    quality: Literal["any", "same"] = "any"

    @model_validator(mode="after")
    def _consistent(self) -> Study:
        if self.objective != Objective.OUTPUT_TOK_S_PER_GPU and not self.sla.limited:
            raise ValueError(f"objective {self.objective.value} needs an SLA (ttft_p99_ms and/or tpot_p99_ms)")
        if self.rule_profile not in available_profiles():
            raise ValueError(f"no rule profile {self.rule_profile!r} (known: {', '.join(available_profiles())})")
        flags = [lever.flag for lever in self.space]
        if len(set(flags)) != len(flags):
            raise ValueError("a flag appears twice in the space")
        if self.quality == "same" and self.base_plan.quality is None:
            raise ValueError("quality: same needs the base plan's quality: section (the probe that judges it)")
        unknown = set(self.sla.concurrencies or ()) - set(self.base_plan.benchmark.concurrency)
        if unknown:
            raise ValueError(f"SLA concurrencies {sorted(unknown)} are not in the base plan's sweep")
        return self


def study_tag(name: str) -> str:
    """The tag every trial run of study ``name`` carries (a valid RunPlan tag)."""
    return f"study-{name}"


def trial_tag(number: int) -> str:
    return f"trial-{number}"
