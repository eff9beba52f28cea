"""The KV transfer backend each PD role uses, and the Python package it needs.

A prefill or decode server imports its backend's package only when it starts, so a
missing one shows as a start-up crash.  ``requirements-sglang.txt`` carries none of them
(the mooncake wheel is about 100 MB), so a PD plan that leaves the backend to SGLang's
default is warned here, and the runner, which can ask its SGLang interpreter, refuses
the run before launch when the package is absent (``runner/backend_probe.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.plan.run_plan import RunPlan

BACKEND_FLAG = "disaggregation-transfer-backend"
# SGLang's default for BACKEND_FLAG, used when a PD role leaves it unset.
DEFAULT_BACKEND = "mooncake"

# backend -> (module imported at start-up, package that provides it); None: needs nothing.
# mooncake_tcp is mooncake with its TCP transport.  Read from SGLang 0.5.23's
# srt/disaggregation/ (mooncake, nixl, mori and ascend each import their own package).
BACKEND_PACKAGES: dict[str, tuple[str, str] | None] = {
    "mooncake": ("mooncake", "mooncake-transfer-engine"),
    "mooncake_tcp": ("mooncake", "mooncake-transfer-engine"),
    "nixl": ("nixl", "nixl"),
    "mori": ("mori", "mori"),
    "ascend": ("memfabric_hybrid", "memfabric-hybrid"),
    "fake": None,
}


def kv_backend(server_args: dict[str, Any]) -> str:
    """The KV transfer backend a PD role's flags choose."""
    return server_args.get(BACKEND_FLAG) or DEFAULT_BACKEND


@dataclass(frozen=True)
class RoleBackend:
    role: str
    backend: str
    named: bool  # False: the plan leaves it to SGLang's default

    @property
    def needs(self) -> tuple[str, str] | None:
        """(module, package) the backend imports, None when it needs none or is unknown."""
        return BACKEND_PACKAGES.get(self.backend)


def role_backends(plan: RunPlan) -> list[RoleBackend]:
    """Each PD role's backend, from its own flags over the plan-wide ones; [] off PD."""
    if plan.topology.kind != "pd":
        return []
    result = []
    for role, group in plan.topology.groups():
        chosen = {**plan.server_args, **group.server_args}.get(BACKEND_FLAG)
        named = isinstance(chosen, str) and bool(chosen)
        result.append(RoleBackend(role, str(chosen) if named else DEFAULT_BACKEND, named))
    return result


def unnamed_backend_roles(plan: RunPlan) -> list[str]:
    """The PD roles of a real-SGLang plan that leave the backend to the default, whose
    package the SGLang environment may lack (the emulator needs none)."""
    if plan.engine != "sglang" or plan.emulated:
        return []
    return [rb.role for rb in role_backends(plan) if not rb.named]
