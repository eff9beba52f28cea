"""The GPUs a run would use on its runner, and the runner's GPUs a foreign process holds.

The claim-time GPU guard is scoped to the run: a runner publishes which of its GPUs a
foreign process holds (``busy_gpus`` in its runners row's info, written by runner/daemon.py
before each claim), keyed by the ids a topology's layout uses (0 = the runner's first GPU).
It claims a run only when none of that run's GPUs is among them, and a run that waits for
them says so (domain/plan/claimability.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from domain.plan.run_plan import RunPlan
from domain.plan.topology import layout

BUSY_GPUS_KEY = "busy_gpus"


def plan_gpu_ids(plan: RunPlan) -> frozenset[int]:
    """The runner's GPU ids the plan's servers take (none for an external server)."""
    if plan.is_external:
        return frozenset()
    return frozenset(i for slot in layout(plan.topology, plan.server_args, plan.gpu.count) for i in slot.gpu_ids)


def plan_json_gpu_ids(plan_json: str | None) -> frozenset[int] | None:
    """``plan_gpu_ids`` of a stored plan; None when there is none to read."""
    if not plan_json:
        return None
    try:
        return plan_gpu_ids(RunPlan.model_validate_json(plan_json))
    except ValueError:
        return None


def busy_gpus_of(info_json: str | None) -> dict[int, str]:
    """The runner's GPU ids a foreign process holds, each with its reason, from its info."""
    try:
        info = json.loads(info_json or "{}")
    except (TypeError, ValueError):
        return {}
    busy = info.get(BUSY_GPUS_KEY) if isinstance(info, dict) else None
    if not isinstance(busy, dict):
        return {}
    return {int(gpu): str(reason) for gpu, reason in busy.items() if str(gpu).isdigit()}


def held_by_others(gpu_ids: frozenset[int], busy: Mapping[int, str]) -> dict[int, str]:
    """Those of ``gpu_ids`` that a foreign process holds, with the reasons."""
    return {gpu: busy[gpu] for gpu in sorted(gpu_ids) if gpu in busy}
