"""Start, watch and stop a whole topology: one server, or workers plus the SGLang router.

Order, as SGLang's own PD fixture does it: every worker (prefill before decode), wait
until each answers ``/health``; then the router, wait for its ``/health`` and until its
``/workers`` lists every worker healthy (the router registers workers in the background,
so its ``/health`` alone says nothing about them).  The benchmark goes through the router.
Teardown stops the router first, then the workers, each its own process group.

Each member gets its own ports (HTTP, NCCL, and the PD bootstrap port on prefill
servers), picked distinct and free from ``BENCHDECK_ENGINE_PORT_RANGE``, and its own GPUs
through ``CUDA_VISIBLE_DEVICES`` (indexes into the GPUs this runner was given).  A server
under attention DP also binds ports SGLang derives from its ``--port``
(``dp_attention_ports``); those are reserved with its HTTP port.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from domain.core.states import FailureKind
from domain.plan.command import router_argv as build_router_argv
from domain.plan.command import worker_argv
from domain.plan.run_plan import RunPlan
from domain.plan.topology import ServerSlot, layout
from runner import server_process
from runner.process import pick_free_port, port_is_free
from runner.server_log import DEFAULT_ROTATION, LogRotation


@dataclass
class Member:
    """One process of the topology: a worker (server/replica/prefill/decode) or the router."""

    name: str
    role: str
    server: server_process.EngineServer
    gpu_ids: tuple[int, ...] = ()
    ports: dict[str, int] = field(default_factory=dict)


@dataclass
class Deployment:
    kind: str
    members: list[Member] = field(default_factory=list)

    @property
    def front(self) -> Member:
        """What the benchmark talks to: the router, or the only server."""
        return self.members[-1] if self.kind != "aggregated" else self.members[0]

    @property
    def base_url(self) -> str:
        return self.front.server.base_url

    @property
    def workers(self) -> list[Member]:
        return [m for m in self.members if m.role != "router"]

    def dead(self) -> Member | None:
        return next((m for m in self.members if not m.server.child.alive), None)

    @property
    def alive(self) -> bool:
        return self.dead() is None

    def crash_failure(self, *, default: FailureKind, what: str) -> server_process.AttemptFailure:
        member = self.dead() or self.front
        failure = member.server.crash_failure(default=default, what=what)
        if self.kind == "aggregated":
            return failure
        return server_process.AttemptFailure(failure.kind, f"{member.name}: {failure}", failure.hint)

    def log_tail(self, max_bytes: int = 16_384) -> str:
        if self.kind == "aggregated":
            return self.members[0].server.log_tail(max_bytes)
        share = max(2048, max_bytes // max(1, len(self.members)))
        return "\n".join(f"===== {m.name} =====\n{m.server.log_tail(share)}" for m in self.members)

    def stop(self, grace_s: float) -> list[int]:
        """Router first (no new requests reach the workers), then the workers in reverse
        launch order; returns the ports still taken afterwards."""
        for member in reversed(self.members):
            member.server.stop(grace_s)
        return [p for m in self.members for p in m.ports.values() if not port_is_free(p)]

    def metrics_urls(self) -> list[tuple[str, str]]:
        """(member, URL) of every worker's /metrics: telemetry is kept per role."""
        return [(m.name, m.server.base_url) for m in self.workers]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "members": [
            {"name": m.name, "role": m.role, "gpu_ids": list(m.gpu_ids), "ports": m.ports,
             "argv": m.server.argv, "pgid": m.server.child.pgid} for m in self.members]}


# SGLang 0.5.23 (srt/server_args.py PortArgs.init_new): under attention DP on one node
# without --dist-init-addr, the scheduler processes talk over TCP on ports derived from
# --port: the torch distributed init port at +233, then six more above it; the DP
# controller (srt/managers/data_parallel_controller.py) binds +13 for its port handshake.
ZMQ_TCP_PORT_DELTA = 233
DERIVED_PORT_COUNT = 6
HANDSHAKE_PORT_DELTA = 13
MAX_PORT = 65535


def _int_flag(args: dict[str, Any], *names: str) -> int:
    value = next((args[name] for name in names if name in args), 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def attention_dp(args: dict[str, Any]) -> bool:
    """Whether these flags turn on attention DP: ``--attn-dp-size`` > 1, or the deprecated
    ``--dp-size N --enable-dp-attention`` (SGLang turns it into ``--attn-dp-size N``).
    Plain ``--dp-size`` replicas talk over IPC and derive no port."""
    if _int_flag(args, "attn-dp-size", "attention-data-parallel-size") > 1:
        return True
    return args.get("enable-dp-attention") is True and _int_flag(args, "dp-size", "data-parallel-size") > 1


def dp_attention_ports(port: int, args: dict[str, Any]) -> tuple[int, ...]:
    """The ports a server started with ``--port port`` and these flags binds besides it,
    computed as SGLang does (below ``port`` where above would pass 65535); none when the
    flags name ``--dist-init-addr`` or more nodes: those ports then come from the address."""
    if not attention_dp(args) or args.get("dist-init-addr") or args.get("nccl-init-addr") \
            or _int_flag(args, "nnodes") > 1:
        return ()
    dist_init = port + ZMQ_TCP_PORT_DELTA
    if dist_init > MAX_PORT:
        dist_init = port - ZMQ_TCP_PORT_DELTA
    base = dist_init + 1
    if dist_init + DERIVED_PORT_COUNT > MAX_PORT:
        base = dist_init - DERIVED_PORT_COUNT - 1
    return (port + HANDSHAKE_PORT_DELTA, dist_init, *range(base, base + DERIVED_PORT_COUNT))


class PortPicker:
    """Distinct free ports from the engine range for one topology.  A port picked with
    ``derived`` (the ports a server binds because of it) is accepted only where those are
    free and not handed out too; they are reserved with it, never handed out afterwards."""

    def __init__(self, low: int, high: int):
        self.low, self.high, self.taken = low, high, set[int]()

    def __call__(self, derived: Callable[[int], tuple[int, ...]] | None = None) -> int:
        refused: set[int] = set()
        while True:
            port = self._pick(self.taken | refused)
            extra = derived(port) if derived is not None else ()
            if all(p not in self.taken and port_is_free(p) for p in extra):
                self.taken.update((port, *extra))
                return port
            refused.add(port)

    def _pick(self, exclude: set[int]) -> int:
        try:
            return pick_free_port(self.low, self.high, exclude=exclude)
        except RuntimeError as exc:
            raise server_process.AttemptFailure(FailureKind.HOST_UNHEALTHY, f"{exc} (BENCHDECK_ENGINE_PORT_RANGE)",
                                        "free ports in BENCHDECK_ENGINE_PORT_RANGE or widen it") from exc


def visible_devices(gpu_ids: tuple[int, ...], inherited: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a member: its GPU indexes, mapped through the runner's own
    CUDA_VISIBLE_DEVICES when the host gave the runner a subset."""
    if inherited:
        pool = [d.strip() for d in inherited.split(",") if d.strip()]
        return ",".join(pool[i] for i in gpu_ids if i < len(pool))
    return ",".join(str(i) for i in gpu_ids)


@dataclass
class Launcher:
    """What deploy() needs from the runner: interpreters, ports, logs, and a callback that
    records each process group (reaping after a crash) and audits each launch."""

    plan: RunPlan
    version: str
    sglang_python: str
    router_python: str
    tokenizer_dir: Path | None
    attempt_dir: Path
    env: dict[str, str]
    ports: PortPicker
    on_launch: Callable[[Member], None]
    rotation: LogRotation = DEFAULT_ROTATION
    # Called with (member name, argv, ports) just before each process starts: the audit row.
    before_launch: Callable[[str, list[str], dict[str, int]], None] | None = None
    # On a Ray node: runner.lifeline.wrap, so servers die with the worker process.
    wrap_argv: Callable[[list[str]], list[str]] | None = None
    vllm_python: str = ""  # BENCHDECK_VLLM_PYTHON, for engine: vllm

    @property
    def engine(self) -> str:
        """Whose log and endpoints the servers have: "vllm" for both vLLM engines, else "sglang"."""
        return "vllm" if self.plan.is_vllm else "sglang"

    def _launch(self, name: str, argv: list[str], ports: dict[str, int], log_name: str,
                env: dict[str, str]) -> server_process.EngineServer:
        if self.before_launch is not None:
            self.before_launch(name, argv, ports)
        command = self.wrap_argv(argv) if self.wrap_argv else argv
        server = server_process.launch(command, port=ports["http"], log_path=self.attempt_dir / log_name, env=env,
                               rotation=self.rotation, engine=self.engine if name != "router" else "sglang")
        server.argv = argv  # what was asked for, without the lifeline wrapper
        return server

    def worker_argv(self, slot: ServerSlot, ports: dict[str, int]) -> list[str]:
        python = self.vllm_python if self.plan.is_vllm and not self.plan.emulated else self.sglang_python
        return worker_argv(self.plan, slot, python=python, ports=ports, version=self.version,
                           tokenizer_dir=self.tokenizer_dir)

    def launch_worker(self, slot: ServerSlot) -> Member:
        ports = {"http": self.ports(lambda port: dp_attention_ports(port, slot.server_args))}
        if slot.role != "server":
            ports["nccl"] = self.ports()
        if slot.role == "prefill":
            ports["bootstrap"] = self.ports()
        env = dict(self.env)
        if self.engine == "vllm":
            # /reset_prefix_cache, which bench_serving's --flush-cache posts to a vLLM backend
            # after the warmup (its warmup repeats the first measured prompt), exists only in
            # vLLM's development mode; the server listens on loopback only (command.py).
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if slot.role != "server":
            env["CUDA_VISIBLE_DEVICES"] = visible_devices(slot.gpu_ids, self.env.get("CUDA_VISIBLE_DEVICES"))
        log_name = "server.log" if slot.role == "server" else f"{slot.name}.log"
        argv = self.worker_argv(slot, ports)
        member = Member(slot.name, slot.role, self._launch(slot.name, argv, ports, log_name, env), slot.gpu_ids,
                        ports)
        self.on_launch(member)
        return member

    def launch_router(self, workers: list[Member]) -> Member:
        ports = {"http": self.ports(), "metrics": self.ports()}
        topology = self.plan.topology
        argv = build_router_argv(
            topology, python=self.router_python, port=ports["http"], metrics_port=ports["metrics"],
            sweep_max_concurrency=max(self.plan.benchmark.concurrency),
            workers=[w.server.base_url for w in workers],
            prefill=[(w.server.base_url, w.ports["bootstrap"]) for w in workers if w.role == "prefill"],
            decode=[w.server.base_url for w in workers if w.role == "decode"],
        )
        member = Member("router", "router", self._launch("router", argv, ports, "router.log", dict(self.env)),
                        (), ports)
        self.on_launch(member)
        return member


def deploy(launcher: Launcher, deployment: Deployment, *, budget_s: float,
           cancelled: Callable[[], bool]) -> dict[str, float]:
    """Start every member in order and wait for each; members are appended to
    ``deployment`` as they start, so a failure half-way still tears all of them down.
    Returns seconds to ready per member."""
    plan = launcher.plan
    start = time.monotonic()
    ready: dict[str, float] = {}
    for slot in layout(plan.topology, plan.server_args, plan.gpu.count):
        deployment.members.append(launcher.launch_worker(slot))
    for member in list(deployment.members):
        left = budget_s - (time.monotonic() - start)
        ready[member.name] = _wait_member(deployment, member, left, cancelled)
    if plan.topology.kind != "aggregated":
        router = launcher.launch_router(deployment.workers)
        deployment.members.append(router)
        left = budget_s - (time.monotonic() - start)
        ready["router"] = _wait_member(deployment, router, left, cancelled)
        wait_router_sees_workers(deployment, router, len(deployment.workers),
                                 budget_s - (time.monotonic() - start), cancelled)
        ready["router"] = time.monotonic() - start
    return ready


def _wait_member(deployment: Deployment, member: Member, budget_s: float, cancelled: Callable[[], bool]) -> float:
    """Ready when it answers /health; any member dying meanwhile fails the whole start-up."""
    def stop_waiting() -> bool:
        dead = deployment.dead()
        if dead is not None and dead is not member:
            raise deployment.crash_failure(default=FailureKind.SERVER_CRASH, what="exited during start-up")
        return cancelled()

    try:
        return server_process.wait_ready(member.server, budget_s=max(budget_s, 0.0), cancelled=stop_waiting)
    except server_process.AttemptFailure as exc:
        if deployment.kind == "aggregated" or str(exc).startswith(member.name):
            raise
        raise server_process.AttemptFailure(exc.kind, f"{member.name}: {exc}", exc.hint) from exc


def wait_router_sees_workers(deployment: Deployment, router: Member, expected: int, budget_s: float,
                             cancelled: Callable[[], bool]) -> None:
    deadline = time.monotonic() + max(budget_s, 0.0)
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if not deployment.alive:
            raise deployment.crash_failure(default=FailureKind.SERVER_CRASH, what="exited during start-up")
        if cancelled():
            raise server_process.AttemptCancelled("cancelled during router start-up")
        seen = router_workers(router.server.base_url)
        if len(seen) >= expected and all(w.get("is_healthy") for w in seen):
            return
        time.sleep(0.25)
    raise server_process.AttemptFailure(
        FailureKind.STARTUP_TIMEOUT,
        f"router: {sum(bool(w.get('is_healthy')) for w in seen)} of {expected} workers registered healthy in time",
        "see router.log: the router checks each worker's /health and model info before routing to it",
    )


def router_workers(base_url: str) -> list[dict[str, Any]]:
    try:
        response = requests.get(f"{base_url}/workers", timeout=2)
        if response.status_code == 200:
            return list(response.json().get("workers", []))
    except (requests.RequestException, ValueError):
        pass
    return []
