"""Checks on a whole plan before it is queued (and again by the runner before launch).

The plan model already rejected malformed fields; this adds the checks that need
settings or other domain knowledge, and collects them into one report that the CLI,
the form and the runner all show the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.plan import RunPlan
from domain.settings import Settings


@dataclass
class CheckReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_plan(plan: RunPlan, settings: Settings, lang: str) -> CheckReport:
    report = CheckReport()
    if plan.engine == "sglang" and settings.sglang_python is None:
        report.warnings.append(
            "engine: sglang, but this host has no SGLang configured (BENCHDECK_SGLANG_PYTHON); "
            "only a runner host with SGLang can claim it"
        )
    return report
