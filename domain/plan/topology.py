"""Topologies: one server, N replicas behind the SGLang router, or prefill/decode
disaggregation (P prefill servers + D decode servers + the router in PD mode).

The plan states the shape (how many servers of each role, GPUs per server, each role's
own flags, optionally which GPUs); this module lays it out on the host's GPUs and says
what is wrong with it.  Ports (HTTP, NCCL, PD bootstrap) are picked by the runner at
launch, distinct and checked free; the page shows them as placeholders.

The router's ``--max-concurrent-requests`` is always written out: one router version
defaults to 256 (with a queue of 100), which would silently cap a sweep above that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FlagValue = bool | int | float | str | list[int] | list[float] | list[str]
Policy = Literal["random", "round_robin", "cache_aware", "power_of_two"]
Kind = Literal["aggregated", "router", "pd"]

# Flags a role may not carry: the runner sets them from the topology.
TOPOLOGY_OWNED = ("disaggregation-mode",)
MAX_SERVERS_PER_ROLE = 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkerGroup(_Strict):
    """Servers of one role: how many, GPUs each, their own flags, optional GPU ids."""

    count: Annotated[int, Field(ge=1, le=MAX_SERVERS_PER_ROLE, strict=True)] = 1
    gpus_per_server: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    server_args: dict[str, FlagValue] = Field(default_factory=dict)
    # Explicit GPU ids per server (indexes into the runner's GPUs); None = packed in order.
    gpu_ids: list[list[Annotated[int, Field(ge=0, le=63)]]] | None = None

    @model_validator(mode="after")
    def _explicit_ids_match(self) -> WorkerGroup:
        if self.gpu_ids is not None:
            if len(self.gpu_ids) != self.count:
                raise ValueError(f"gpu_ids lists {len(self.gpu_ids)} servers, count is {self.count}")
            for ids in self.gpu_ids:
                if len(ids) != self.gpus_per_server:
                    raise ValueError(f"gpu_ids {ids} has {len(ids)} GPUs, gpus_per_server is {self.gpus_per_server}")
        return self


class Topology(_Strict):
    kind: Kind = "aggregated"
    replicas: WorkerGroup | None = None  # router: the DP replicas
    prefill: WorkerGroup | None = None  # pd
    decode: WorkerGroup | None = None  # pd
    policy: Policy = "cache_aware"  # router: --policy; pd: --prefill-policy
    decode_policy: Policy = "round_robin"  # pd: --decode-policy
    # None: the sweep's highest concurrency (written explicitly either way).
    router_max_concurrent_requests: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] | None = None

    @model_validator(mode="after")
    def _roles_for_kind(self) -> Topology:
        needed = {"aggregated": set(), "router": {"replicas"}, "pd": {"prefill", "decode"}}[self.kind]
        present = {name for name in ("replicas", "prefill", "decode") if getattr(self, name) is not None}
        if present - needed:
            raise ValueError(f"{self.kind} topology takes no {', '.join(sorted(present - needed))}")
        if needed - present:
            raise ValueError(f"{self.kind} topology needs {', '.join(sorted(needed - present))}")
        return self

    def groups(self) -> list[tuple[str, WorkerGroup]]:
        """(role, group) in launch order: prefill before decode, as SGLang's docs do."""
        if self.kind == "router" and self.replicas:
            return [("replica", self.replicas)]
        if self.kind == "pd" and self.prefill and self.decode:
            return [("prefill", self.prefill), ("decode", self.decode)]
        return []

    def label(self) -> str:
        """The comparability value: kind, P:D ratio and the GPU split, in one string."""
        if self.kind == "router" and self.replicas:
            return f"router {self.replicas.count}×{self.replicas.gpus_per_server}GPU ({self.policy})"
        if self.kind == "pd" and self.prefill and self.decode:
            p, d = self.prefill, self.decode
            return f"pd {p.count}P{d.count}D (P {p.count}×{p.gpus_per_server}GPU, D {d.count}×{d.gpus_per_server}GPU)"
        return "aggregated"

    def snapshot(self) -> dict[str, Any]:
        """What identifies the topology in a configuration (aggregated stays {"kind": ...}
        so configuration ids from before topologies existed do not change)."""
        if self.kind == "aggregated":
            return {"kind": "aggregated"}
        return self.model_dump(mode="json") | {"label": self.label()}


@dataclass(frozen=True)
class ServerSlot:
    """One server of a topology as the runner launches it."""

    role: str  # server | replica | prefill | decode
    index: int
    gpu_ids: tuple[int, ...]
    server_args: dict[str, FlagValue]

    @property
    def name(self) -> str:
        return self.role if self.role == "server" else f"{self.role}-{self.index}"


def layout(topology: Topology, base_args: dict[str, FlagValue], gpu_count: int) -> list[ServerSlot]:
    """Every server with its GPUs and flags (plan-wide flags, then the role's own)."""
    if topology.kind == "aggregated":
        return [ServerSlot("server", 0, tuple(range(gpu_count)), dict(base_args))]
    slots, next_gpu = [], 0
    for role, group in topology.groups():
        for index in range(group.count):
            if group.gpu_ids is not None:
                ids = tuple(group.gpu_ids[index])
            else:
                ids = tuple(range(next_gpu, next_gpu + group.gpus_per_server))
                next_gpu += group.gpus_per_server
            args = {**base_args, **group.server_args}
            if role in ("prefill", "decode"):
                args["disaggregation-mode"] = role
            slots.append(ServerSlot(role, index, ids, args))
    return slots


def snapshot_gpus(snapshot: dict[str, Any], gpu_count: int | None) -> int | None:
    """The GPUs a topology's servers use, all roles together, from its stored snapshot
    (``Topology.snapshot``): an aggregated server uses the plan's ``gpu_count``; the roles
    of a router or PD topology use count × gpus_per_server each, whatever the plan's count."""
    groups = [snapshot[role] for role in ("replicas", "prefill", "decode") if isinstance(snapshot.get(role), dict)]
    if snapshot.get("kind", "aggregated") == "aggregated" or not groups:
        return gpu_count
    return sum(int(group.get("count", 1)) * int(group.get("gpus_per_server", 1)) for group in groups)


def _int_flag(args: dict[str, FlagValue], *names: str) -> int:
    for name in names:
        value = args.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 1


def layout_problems(topology: Topology, base_args: dict[str, FlagValue], gpu_count: int) -> list[str]:
    """What makes this layout impossible on a host with ``gpu_count`` GPUs."""
    problems: list[str] = []
    for role, group in topology.groups():
        owned = sorted(set(group.server_args) & set(TOPOLOGY_OWNED))
        if owned:
            problems.append(f"{role}: --{owned[0]} is set by the topology, not by the role's flags")
    if problems:
        return problems
    slots = layout(topology, base_args, gpu_count)
    owner: dict[int, str] = {}
    for slot in slots:
        for gpu in slot.gpu_ids:
            if gpu >= gpu_count:
                problems.append(f"{slot.name}: GPU {gpu} does not exist on a {gpu_count}-GPU host")
            elif gpu in owner:
                problems.append(f"{slot.name}: GPU {gpu} is already used by {owner[gpu]}")
            else:
                owner[gpu] = slot.name
        if topology.kind == "aggregated":
            continue  # one server on every GPU: the flag checks judge its parallelism
        needed = (_int_flag(slot.server_args, "tp-size", "tensor-parallel-size", "tp")
                  * _int_flag(slot.server_args, "pp-size", "pipeline-parallel-size")
                  * _int_flag(slot.server_args, "dp-size", "data-parallel-size"))
        if needed > len(slot.gpu_ids):
            problems.append(f"{slot.name}: its parallelism needs {needed} GPUs, it is given {len(slot.gpu_ids)}")
    return problems


def router_concurrency_cap(topology: Topology, sweep_max_concurrency: int) -> int:
    return topology.router_max_concurrent_requests or sweep_max_concurrency
