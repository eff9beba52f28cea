"""A plan YAML file read for a command (``runner check``, ``submit``, ``estimate``): every
problem printed as a sentence in the user's language, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

from domain.core.i18n import t
from domain.core.settings import Settings
from domain.plan.plan_io import PlanError, load_plan
from domain.plan.run_plan import RunPlan


def load_plan_file(path: str, settings: Settings, lang: str) -> RunPlan | None:
    """The plan in ``path``, or None after printing why it cannot be read or is invalid."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(t("cli.cannot_read", lang, path=path, detail=exc), file=sys.stderr)
        return None
    try:
        return load_plan(text, max_bytes=settings.max_plan_bytes)
    except PlanError as exc:
        print(t("cli.plan_invalid", lang, path=path), file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem.field}: {problem.text(lang)}" if problem.field else f"  - {problem.text(lang)}",
                  file=sys.stderr)
        return None
