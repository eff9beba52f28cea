"""Whether this host's SGLang environment can load each PD role's KV transfer backend.

The app never imports SGLang, so the SGLang interpreter is asked (``find_spec``, which
imports nothing of the backend) once per interpreter and module.  A run whose backend's
package is absent is refused before launch as ``bad_args``: otherwise every prefill
and decode server would die at start-up on the import (domain/plan/transfer_backend.py).
"""

from __future__ import annotations

import functools
import subprocess

from domain.core.i18n import t
from domain.plan.run_plan import RunPlan
from domain.plan.transfer_backend import BACKEND_FLAG, role_backends

PROBE = "import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]) is not None)"
PROBE_TIMEOUT_S = 60.0


@functools.cache
def module_installed(python: str, module: str) -> bool | None:
    """Whether ``python`` can import ``module``; None when the interpreter could not be
    asked (then the server's own start-up says what is wrong)."""
    try:
        done = subprocess.run([python, "-c", PROBE, module], capture_output=True, text=True,  # noqa: S603 - fixed argv
                              timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return {"True": True, "False": False}.get(answer[0]) if answer else None


def missing_backend(plan: RunPlan, sglang_python: str) -> str | None:
    """Why the run cannot start on this host (the first role whose backend's package the
    SGLang environment lacks), in English as attempt messages are; None when it can."""
    if plan.engine != "sglang" or plan.emulated or not sglang_python:
        return None
    for role in role_backends(plan):
        needs = role.needs
        if needs is None or module_installed(sglang_python, needs[0]) is not False:
            continue
        facts = {"role": role.role, "backend": role.backend, "package": needs[1], "module": needs[0],
                 "python": sglang_python, "flag": BACKEND_FLAG}
        if role.named:
            return t("runner.pd_backend_missing", "en", **facts)
        return t("runner.pd_default_backend_missing", "en", **facts)
    return None
