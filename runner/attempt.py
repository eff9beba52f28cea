"""One attempt on one host: launch the topology, sweep it with bench_serving, tear it down.

The same code runs in the local daemon and on a Ray node (runner/ray_executor.py).  It
never talks to DuckDB itself: every write goes through an ``AttemptWriter``.  Locally that
is the Store, bound to the attempt and fenced by the lease (``StoreWriter`` in
runner/lease.py: a refused write raises ``Fenced``); on a Ray node it is a stream of
events that the daemon on the head applies to the Store, so the daemon stays the only
writer of the database.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from db.bootstrap_memo import keep_intervals
from db.store import ProcessGroup, utcnow
from domain.core.settings import ExternalEndpoint, Settings
from domain.core.states import AttemptStatus, FailureKind
from domain.engines import SGLANG, adapter_for
from domain.flags.dialects.vllm import load_vllm_policy, validate_vllm_args
from domain.flags.policy import Policy
from domain.flags.schema import Schema, known_versions
from domain.flags.validate import validate_server_args
from domain.plan.checks import schema_version_for, vllm_version_for
from domain.plan.gpu_claim import plan_gpu_ids
from domain.plan.run_plan import BenchmarkPlan, Point, RunPlan, configuration_id, point_conditions
from domain.plan.topology import layout
from domain.results.bench_record import BadRecord, json_safe, last_record, metrics_from_record
from domain.results.speculative import speculative_conditions
from runner import external, host, server_process
from runner import topology as topo
from runner.backend_probe import missing_backend
from runner.bench_client import (
    BenchCancelled,
    BenchClient,
    BenchError,
    ClientKey,
    KeptClient,
    MeasuredRequest,
    OneShotBenchClient,
    PointOutcome,
    TokenizerUnavailable,
    WarmBenchClient,
    bench_env,
    bench_tokenizer,
    build_bench_argv,
    client_conditions,
    requests_from_details,
    requests_from_driver,
    without_details,
    write_request_samples,
)
from runner.lease import StopState
from runner.lifeline import wrap
from runner.liveness import LivenessProbe, LivenessRule
from runner.model_access import model_problem, server_env
from runner.quality_step import quality_record
from runner.server_log import LogRotation
from runner.telemetry import (
    GpuScopeError,
    GpuSet,
    NvmlReader,
    Sample,
    Sampler,
    metrics_reader,
    summarise,
    write_parquet,
)
from runner.workload_run import WorkloadFileError, checked_workload_label, driver_request

GPU_MEMORY_TOLERANCE_GB = 1.0


class AttemptWriter(Protocol):
    """Every write an attempt makes; each one is fenced by the lease where it lands."""

    def move(self, current: AttemptStatus, new: AttemptStatus) -> None: ...
    def record_child(self, group: ProcessGroup) -> None: ...
    def record_startup(self, **facts: Any) -> None: ...
    def set_current_point(self, key: str) -> None: ...
    def insert_point(self, **point: Any) -> None: ...
    def record_raw_output(self, raw: str) -> None: ...
    def audit(self, action: str, details: dict[str, Any]) -> None: ...
    def cancel_requested(self) -> bool: ...
    def record_quality(self, record: dict[str, Any]) -> None: ...
    def quality_reference(self, plan: RunPlan) -> tuple[int, dict[str, Any]] | None: ...


def _no_groups() -> set[int]:
    return set()


@dataclass
class HostState:
    """What an attempt tells the host it runs on (a port left taken, a reason to stop
    claiming) and asks it: the process groups of the runner's other runs, which the GPU
    guard does not count as foreign (none on a Ray node, where each task has its own GPUs)."""

    mark_unhealthy: Callable[[str], None]
    stuck_port: Callable[[int], None]
    own_groups: Callable[[], set[int]] = _no_groups


@dataclass
class AttemptContext:
    attempt_id: int
    run_id: int
    attempt_no: int
    plan: RunPlan
    settings: Settings
    writer: AttemptWriter
    stop: StopState
    cancel: threading.Event = field(default_factory=threading.Event)
    fenced: threading.Event = field(default_factory=threading.Event)
    status: AttemptStatus = AttemptStatus.CLAIMED
    server: topo.Deployment | None = None
    client: BenchClient | None = None
    points_done: int = 0
    launch_idx: int = 0  # which launch of the server the points now run on (a fresh one per repeat, if asked)
    launches: list[dict[str, Any]] = field(default_factory=list)  # each launch's start-up facts, in order
    engine_version: str | None = None  # the SGLang version launched (its flag schema, for the emulator)
    gpus: GpuSet = None  # the run's GPUs as NVML UUIDs (None: every GPU; no NVML, or an emulated run's pretend GPUs)
    baseline_gpu_gb: dict[str, float] | None = None  # GB in use per GPU of the run before launch; teardown gets back
    gpu_health: dict[str, Any] | None = None  # host.gpu_health of the run's GPUs before launch
    # A cancel that came from the runner stopping (not the user) sends the run back to the queue.
    stopped_by_runner: bool = False
    # On a Ray node the kernel kills servers and clients with the worker process.
    die_with_parent: bool = False
    # Why the sweep stopped early on its plan's stop_on_sla (None: it did not): the run
    # succeeds with the points measured, the rest recorded as skipped (AttemptExecution.run).
    sla_stop: str | None = None
    workload_label: str | None = None  # the point's workload with its file's hash (runner/workload_run.py)
    hostname: str = field(default_factory=socket.gethostname)

    @property
    def attempt_dir(self) -> Path:
        return self.settings.work_dir / f"attempt-{self.attempt_id}"

    def move(self, new: AttemptStatus) -> None:
        self.writer.move(self.status, new)
        self.status = new

    def interrupted(self) -> bool:
        """True when the attempt must stop now (cold stop, cancel, or a lost lease)."""
        if self.fenced.is_set():
            return True
        if self.stop.cold.is_set():
            self.stopped_by_runner = True
            return True
        return self.cancel.is_set()


@dataclass
class AttemptExecution:
    """The launch, the sweep and the teardown of one attempt (no claim, no lease: the
    daemon or the Ray executor around it owns those)."""

    ctx: AttemptContext
    nvml: NvmlReader | None
    nvml_reason: str | None
    host_info: dict[str, Any]
    sglang_version: str | None
    policy: Policy
    policy_sha256: str | None
    host_state: HostState
    # The schema extracted from the SGLang installed where the attempt runs (a Ray node's report).
    installed_schema: dict[str, Any] | None = None
    # The daemon's idle warm client between runs (None: every attempt starts its own).
    kept_client: KeptClient | None = None
    vllm_version: str | None = None  # the vLLM installed at BENCHDECK_VLLM_PYTHON (None: none)
    _client_key: ClientKey | None = None
    _endpoint: ExternalEndpoint | None = None  # engine: external: the listed endpoint (runner/external.py)

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    # --- the attempt ------------------------------------------------------------------------
    def run(self) -> None:
        ctx, plan = self.ctx, self.ctx.plan
        if plan.is_external:  # no flags, no GPUs of ours: the endpoint must be listed here, before any request
            ctx.engine_version = plan.engine_version
            self._endpoint = external.endpoint_for(plan, self.settings)
        else:
            version = vllm_version_for(plan, self.vllm_version) if plan.is_vllm else schema_version_for(
                plan, self._host_version_for(plan))
            ctx.engine_version = version
            self._validate_at_the_edge(plan, version)
            missing = model_problem(plan, self.settings)
            if missing is not None:  # the same plan finds the same disk: never retried
                raise server_process.AttemptFailure(FailureKind.BAD_ARGS, missing)
            ctx.gpus = self._run_gpus()
            self._guard_gpus()
        if ctx.writer.cancel_requested():
            ctx.cancel.set()  # cancelled between the claim and the launch: nothing was started
            raise server_process.AttemptCancelled("cancelled before launch")
        ctx.move(AttemptStatus.STARTING)
        ctx.attempt_dir.mkdir(parents=True, exist_ok=True)
        if self._endpoint is not None:
            self._connect_external(self._endpoint)
        else:
            ctx.baseline_gpu_gb = host.gpu_memory_by_gpu(self.nvml, ctx.gpus)
            ctx.gpu_health = host.gpu_health(self.nvml, ctx.gpus)
            self._launch()
        ctx.client = self._start_client()
        self._record_startup()
        ctx.move(AttemptStatus.BENCHMARKING)
        points = sweep_order(plan.benchmark, plan.points())
        for index, point in enumerate(points):
            self._check_stop()
            if plan.benchmark.fresh_launch_per_repeat and point.repeat_idx != ctx.launch_idx:
                self._relaunch(point.repeat_idx)
                self._check_stop()
            self._run_point(point, later=points[index + 1:])
            ctx.points_done += 1
            if ctx.sla_stop is not None:
                return
        if plan.quality is not None:
            self._check_stop()
            self._probe_quality()

    def _probe_quality(self) -> None:
        """The quality probe on this launch (runner/quality_step.py)."""
        ctx = self.ctx
        assert ctx.server is not None and ctx.client is not None  # noqa: S101 - launched, swept
        ctx.writer.set_current_point("quality")
        ctx.writer.record_quality(quality_record(ctx.plan, ctx.server.base_url, self.settings.tokenizer_dir,
                                                 ctx.writer.quality_reference(ctx.plan)))

    def _check_stop(self) -> None:
        """Before each point (and each relaunch): a warm stop ends the attempt between
        points, a cold stop, a cancel or a lost lease at once."""
        ctx = self.ctx
        if ctx.stop.warm.is_set():
            ctx.stopped_by_runner = True
            raise server_process.AttemptCancelled("runner stopping")
        if ctx.interrupted():
            raise server_process.AttemptCancelled("cancelled")

    def _startup_interrupted(self) -> bool:
        """While the servers load, a warm stop ends the wait as a cold one does: a large
        model's load can outlast the runner unit's stop timeout (TimeoutStopSec), and no
        point is under way to finish.  The load is stopped and the run goes back to the queue."""
        if self.ctx.stop.warm.is_set():
            self.ctx.stopped_by_runner = True
            return True
        return self.ctx.interrupted()

    def _launch(self) -> None:
        """Start the topology for launch ``ctx.launch_idx`` and check who answers; its
        start-up facts join ``ctx.launches``.  A later launch logs into its own folder
        (``launch-<i>/``): start-up facts are parsed from the log's first matching lines."""
        ctx, plan, settings = self.ctx, self.ctx.plan, self.settings
        launch_dir = ctx.attempt_dir if ctx.launch_idx == 0 else ctx.attempt_dir / f"launch-{ctx.launch_idx}"
        ctx.server = topo.Deployment(plan.topology.kind)
        launcher = topo.Launcher(
            plan=plan, version=str(ctx.engine_version), sglang_python=str(settings.sglang_python or ""),
            router_python=str(settings.router_python),
            tokenizer_dir=settings.tokenizer_dir if plan.emulated else None,
            attempt_dir=launch_dir, env=launch_environment(plan, server_env(plan, settings)),
            ports=topo.PortPicker(*settings.engine_port_range),
            on_launch=self._on_launch, rotation=LogRotation.from_settings(settings),
            wrap_argv=wrap if ctx.die_with_parent else None, before_launch=self._audit_launch,
            vllm_python=str(settings.vllm_python or ""),
        )
        try:
            ready = topo.deploy(launcher, ctx.server, budget_s=settings.startup_timeout_s,
                                cancelled=self._startup_interrupted)
        except server_process.PortTaken as exc:
            self.host_state.stuck_port(exc.port)  # taken between the pick and the launch: someone else is there
            self.host_state.mark_unhealthy(f"port {exc.port} taken at launch (a stale server?)")
            raise
        for member in ctx.server.members:
            self._check_answering_server(member)
        ctx.launches.append(self._startup_facts(ctx.server, ready))

    def _connect_external(self, endpoint: ExternalEndpoint) -> None:
        """engine: external: nothing is launched; the endpoint stands where the topology would
        (runner/external.py), and its start-up facts are what /v1/models says beside what the
        plan declares.  The audit row says who sent requests where, as a launch's does."""
        ctx = self.ctx
        ctx.server = external.ExternalDeployment("external", endpoint=endpoint)
        ctx.writer.audit("external_target", {
            "attempt_id": ctx.attempt_id, "attempt_no": ctx.attempt_no, **ctx.server.describe(),
            "config_hash": configuration_id(ctx.plan.configuration_snapshot()), "host": ctx.hostname,
            "declared": ctx.plan.external.declared() if ctx.plan.external else None,
        })
        ready_s = external.wait_ready(endpoint, budget_s=self.settings.startup_timeout_s, cancelled=ctx.interrupted)
        facts = external.startup_facts(ctx.plan, endpoint, ready_s)
        ctx.launches.append({**facts, "host": ctx.hostname, "launch_idx": 0, "argv": []})

    def _record_startup(self) -> None:
        """The first launch's facts and argv, as for any attempt; with a fresh launch per
        repeat, every launch so far under ``launches`` (index = ``launch_idx``, with its argv)."""
        ctx = self.ctx
        assert ctx.server is not None and ctx.client is not None  # noqa: S101 - launched, client started
        facts = {key: value for key, value in ctx.launches[0].items() if key != "argv"}  # argv: its own column
        if ctx.plan.benchmark.fresh_launch_per_repeat:
            facts["launches"] = ctx.launches
        ctx.writer.record_startup(
            server_argv=ctx.launches[0]["argv"], startup_facts=facts, host_info=self._attempt_host_info(),
            bench_client=self._bench_client_facts(ctx.client),
            telemetry_dir=str(ctx.attempt_dir / "telemetry"),
        )

    def _bench_client_facts(self, client: BenchClient) -> dict[str, Any]:
        """The client as the attempt records it; ``runs_served_before`` > 0 says its process
        was started for an earlier run and kept (``KeptClient``)."""
        facts: dict[str, Any] = {"module": client.module, "version": client.version, "mode": client.mode,
                                 "python": str(self.settings.bench_python)}
        if isinstance(client, WarmBenchClient):
            facts["runs_served_before"] = client.runs_served
        return facts

    def _relaunch(self, launch_idx: int) -> None:
        """Tear the servers down as the attempt's teardown does (same grace, same port and
        GPU-memory checks) and launch them again for the next repeat.  Something left
        behind fails the attempt as host_unhealthy: the next launch would measure it."""
        ctx = self.ctx
        problems = self._stop_servers(self.settings.stop_grace_s)
        if problems:
            raise server_process.AttemptFailure(
                FailureKind.HOST_UNHEALTHY, f"before the launch for repeat {launch_idx}: {'; '.join(problems)}",
                "the previous launch's processes did not let go of the host")
        self._guard_gpus()
        ctx.launch_idx = launch_idx
        self._launch()
        self._record_startup()

    def _startup_facts(self, deployment: topo.Deployment, ready: dict[str, float]) -> dict[str, Any]:
        """The single server's facts as before; with a topology, each role's facts too."""
        first = deployment.workers[0]
        facts = server_process.startup_record(first.server, ready[first.name])
        if self.ctx.plan.is_vllm:  # vLLM's log never says so; the plan does
            facts["emulated"] = self.ctx.plan.emulated
        facts["host"] = self.ctx.hostname
        facts["launch_idx"] = self.ctx.launch_idx
        facts["argv"] = first.server.argv
        if deployment.kind != "aggregated":
            facts["topology"] = deployment.describe()
            facts["roles"] = {m.name: server_process.startup_record(m.server, ready[m.name])
                              for m in deployment.workers}
            facts["seconds_to_ready"] = round(max(ready.values()), 3)
        return facts

    def _audit_launch(self, name: str, argv: list[str], ports: dict[str, int]) -> None:
        """Who launched what: the exact argv (a list, never a shell string) and the
        configuration hash (the configurations table's id), before the process starts."""
        ctx = self.ctx
        ctx.writer.audit("launch", {
            "attempt_id": ctx.attempt_id, "attempt_no": ctx.attempt_no, "member": name, "argv": argv,
            "config_hash": configuration_id(ctx.plan.configuration_snapshot()),
            "argv_sha256": hashlib.sha256(json.dumps(argv).encode()).hexdigest(),
            "engine_version": ctx.engine_version, "port": ports.get("http"), "ports": ports,
            "policy_sha256": self.policy_sha256, "host": ctx.hostname, "launch_idx": ctx.launch_idx,
        })

    def _on_launch(self, member: topo.Member) -> None:
        child = member.server.child
        self.ctx.writer.record_child(ProcessGroup(child.pgid, child.started_at, member.name))

    def _check_answering_server(self, member: topo.Member) -> None:
        """/health said 200, but from whom?  A stale server that took the port between the
        check and our bind answers too (SGLang's CI once passed against one); our child then
        fails to bind.  The listening socket must belong to the launched process tree."""
        server = member.server
        if host.listens_on(server.child.popen.pid, server.port):
            return
        self.host_state.stuck_port(server.port)
        reason = f"port {server.port} answered /health, but not from the launched {member.name} (a stale server?)"
        self.host_state.mark_unhealthy(reason)
        raise server_process.AttemptFailure(FailureKind.HOST_UNHEALTHY, reason,
                                    "find and stop the process listening on that port")

    def _host_version_for(self, plan: RunPlan) -> str | None:
        """The host's SGLang version for an unpinned plan; the emulator speaks only shipped
        versions, so an emulator plan on a host with another version takes the newest shipped."""
        if (plan.engine == "sglang" and not plan.emulated) or self.sglang_version in known_versions():
            return self.sglang_version
        return None

    def _installed_schema_of(self, version: str) -> Schema | None:
        """The installed SGLang's own schema when the attempt launches that version; else None
        (the shipped schema of ``version``)."""
        if self.installed_schema is None or self.installed_schema.get("sglang_version") != version:
            return None
        return Schema.from_dict(self.installed_schema)

    def _validate_at_the_edge(self, plan: RunPlan, version: str) -> None:
        """The form and the CLI validated already; the runner checks again before launch,
        the plan-wide flags and each topology role's own."""
        if plan.is_vllm:
            self._validate_vllm_at_the_edge(plan, version)
            return
        checks = [("", plan.server_args)] + [
            (f"{role}: ", {**plan.server_args, **group.server_args}) for role, group in plan.topology.groups()]
        for prefix, args in checks:
            report = validate_server_args(args, version, model_dirs=self.settings.model_dirs, model=plan.model,
                                          policy=self.policy, schema=self._installed_schema_of(version))
            if not report.ok:
                details = "; ".join(issue.message("en") for issue in report.errors)
                raise server_process.AttemptFailure(FailureKind.BAD_ARGS,
                                            f"{prefix}flags rejected for SGLang {version}: {details}")
        missing = missing_backend(plan, str(self.settings.sglang_python or ""))
        if missing is not None:
            raise server_process.AttemptFailure(FailureKind.BAD_ARGS, missing)

    def _validate_vllm_at_the_edge(self, plan: RunPlan, version: str) -> None:
        """A vLLM plan's flags against that version's schema and vLLM's policy file (the
        runner's SGLang policy does not name vLLM's flags); a real vLLM needs its interpreter."""
        report = validate_vllm_args(plan.server_args, version, model_dirs=self.settings.model_dirs, model=plan.model,
                                    policy=load_vllm_policy())
        if not report.ok:
            details = "; ".join(issue.message("en") for issue in report.errors)
            raise server_process.AttemptFailure(FailureKind.BAD_ARGS, f"flags rejected for vLLM {version}: {details}")
        if plan.is_vllm and not plan.emulated and self.settings.vllm_python is None:
            raise server_process.AttemptFailure(FailureKind.BAD_ARGS, "engine vllm needs BENCHDECK_VLLM_PYTHON on "
                                                "the runner host")

    def _run_gpus(self) -> GpuSet:
        """The UUIDs of the GPUs the topology's servers use (host.run_gpus).  An emulated run
        holds no real GPU: where the host lacks the GPUs its plan pretends to, it is
        measured across the host, as before scoping."""
        plan = self.ctx.plan
        ids = [i for slot in layout(plan.topology, plan.server_args, plan.gpu.count) for i in slot.gpu_ids]
        try:
            return host.run_gpus(self.nvml, ids, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except GpuScopeError as exc:
            if plan.emulated:
                return None
            raise server_process.AttemptFailure(
                FailureKind.HOST_UNHEALTHY, f"the run's GPUs: {exc}",
                "the plan asks for GPUs this runner was not given (CUDA_VISIBLE_DEVICES, BENCHDECK_RUNNER_GPU_COUNT)",
            ) from exc

    def _attempt_host_info(self) -> dict[str, Any]:
        """The host's facts, plus the run's own GPUs as NVML measures them (an external
        server's GPUs are not this host's to measure)."""
        if self.ctx.plan.is_external:
            return {**self.host_info, "run_gpus": {"gpus": [], "note": external.GPU_NOT_HERE}}
        if self.nvml is None:
            return self.host_info
        return {**self.host_info, "run_gpus": host.gpu_hardware(self.nvml, self.ctx.gpus),
                "health": self.ctx.gpu_health}

    def _guard_gpus(self) -> None:
        """Checked before the claim already (pre-flight); again here, on the run's GPUs only,
        for a process that appeared in between."""
        foreign = host.foreign_gpu_processes(self.nvml, set(), idle_memory_gb=self.settings.gpu_idle_memory_gb,
                                             gpus=self.ctx.gpus, own_groups=self.host_state.own_groups())
        if self.nvml is None:  # simulated users name the runner's GPU ids: only the run's own count
            foreign = [entry for entry in foreign if entry[0] in plan_gpu_ids(self.ctx.plan)]
        if foreign:
            reason = foreign_reason(self.nvml, foreign)
            self.host_state.mark_unhealthy(reason)
            raise server_process.AttemptFailure(FailureKind.HOST_UNHEALTHY, reason,
                                                "stop that process, then the host recovers")

    def _start_client(self) -> BenchClient:
        """A warm client for the sweep; one process per point where the client's version
        cannot be driven in-process (or where BENCHDECK_BENCH_MODE asks for it)."""
        ctx, settings = self.ctx, self.settings
        try:
            tokenizer = (external.bench_tokenizer_for(ctx.plan, self._endpoint, settings.tokenizer_dir)
                         if self._endpoint is not None else bench_tokenizer(ctx.plan, settings.tokenizer_dir))
        except TokenizerUnavailable as exc:  # the same plan fails the same way again: never retried
            raise server_process.AttemptFailure(FailureKind.BAD_ARGS, str(exc)) from exc
        env = bench_env(tokenizer.path)
        log_path = ctx.attempt_dir / "bench.log"
        wrap_argv = wrap if ctx.die_with_parent else None
        client: BenchClient
        if settings.bench_mode != "per-point" and wrap_argv is None and self.kept_client is not None:
            self._client_key = ClientKey.of(settings.bench_python, env, tokenizer)
            kept = self.kept_client.take(self._client_key)
            if kept is not None:
                kept.tokenizer = tokenizer  # the same files (the key says so), described as this run names them
                return self._reuse_client(kept, log_path)
        if settings.bench_mode != "per-point":
            client = WarmBenchClient(settings.bench_python, log_path, env, wrap_argv=wrap_argv, tokenizer=tokenizer)
            try:
                client.start()
                return client
            except BenchError as exc:
                if settings.bench_mode == "warm" or "unsupported" not in str(exc):
                    raise server_process.AttemptFailure(
                        FailureKind.BENCH_FAILED, str(exc),
                        f"is BENCHDECK_BENCH_PYTHON ({settings.bench_python}) an SGLang environment?",
                    ) from exc
            finally:
                if client.child is not None:
                    self._record_bench(client.child)
        client = OneShotBenchClient(settings.bench_python, log_path, env, on_start=self._record_bench,
                                    wrap_argv=wrap_argv, tokenizer=tokenizer)
        try:
            client.start()
        except BenchError as exc:
            raise server_process.AttemptFailure(FailureKind.BENCH_FAILED, str(exc)) from exc
        return client

    def _reuse_client(self, client: WarmBenchClient, log_path: Path) -> WarmBenchClient:
        """The daemon's idle client for this attempt: its group recorded with this attempt
        (reaped with it if the runner dies), its prints from now on in this attempt's log."""
        assert client.child is not None  # noqa: S101 - take() hands over only a live client
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log_file:
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(client.started_at or time.time()))
            log_file.write(f"benchdeck: bench client pid {client.child.popen.pid} kept from an earlier run "
                           f"(started {started}; {client.runs_served} run(s) served before this one)\n")
        client.log_path = log_path
        self._record_bench(client.child)
        return client

    def _record_bench(self, child: Any) -> None:
        self.ctx.writer.record_child(ProcessGroup(child.pgid, child.started_at, "bench"))

    def _run_point(self, point: Point, later: list[Point]) -> None:
        ctx = self.ctx
        assert ctx.server is not None and ctx.client is not None  # noqa: S101 - set by run()
        ctx.writer.set_current_point(point.key)
        try:
            ctx.workload_label = checked_workload_label(ctx.plan)
        except (WorkloadFileError, OSError) as exc:
            raise server_process.AttemptFailure(FailureKind.BAD_ARGS, f"workload file at {point.key}: {exc}",
                                                "fix the file; runner check shows each problem's line") from exc
        output = ctx.attempt_dir / "records" / f"{point.key.replace('/', '_')}.jsonl"
        output.parent.mkdir(parents=True, exist_ok=True)
        requests_file = output.with_suffix(".requests.jsonl")
        requests_file.unlink(missing_ok=True)
        tokenizer = ctx.client.tokenizer.path if ctx.client.tokenizer else self.settings.tokenizer_dir
        argv = build_bench_argv(ctx.plan, point, base_url=ctx.server.base_url, tokenizer=tokenizer,
                                output_file=output, known_flags=ctx.client.known_flags,
                                output_details=isinstance(ctx.client, OneShotBenchClient))
        samplers = self._start_samplers(ctx.server)
        liveness = self._start_liveness(ctx.server)
        started = utcnow()
        try:
            result = ctx.client.run_point(point.key, argv, timeout_s=self.settings.point_timeout_s,
                                          cancelled=lambda: ctx.interrupted() or liveness.dead,
                                          requests_file=requests_file, dataset=driver_request(ctx.plan))
        except BenchCancelled:
            if liveness.verdict is None or ctx.interrupted():
                raise
            raise self._scheduler_failure(point.key, liveness.verdict) from None
        except BenchError as exc:
            raise self._point_failure(f"bench client failed at {point.key}: {exc}") from exc
        finally:
            liveness.stop()
            samples = [s for sampler in samplers for s in sampler.stop()]
        finished = utcnow()
        if not ctx.server.alive:
            raise ctx.server.crash_failure(default=FailureKind.SERVER_CRASH,
                                           what=f"the server died during {point.key}")
        if not result.ok:
            raise self._point_failure(f"bench_serving failed at {point.key}: {result.error}")
        raw_text = output.read_text(encoding="utf-8", errors="replace") if output.exists() else ""
        try:
            record = last_record(raw_text)
            metrics = metrics_from_record(record, requested=point.num_prompts)
        except BadRecord as exc:
            ctx.writer.record_raw_output(raw_text[-65_536:])
            raise server_process.AttemptFailure(FailureKind.BAD_OUTPUT,
                                                f"unreadable bench record at {point.key}: {exc}",
                                        "the raw output is kept with the attempt") from exc
        stop = self._sla_stop(point, metrics, later)
        self._store_point(point, record, metrics, samples, result, started, finished, stop)

    def _sla_stop(self, point: Point, metrics: dict[str, Any], later: list[Point]) -> dict[str, Any] | None:
        """The early stop of a sweep whose point broke the plan's ``stop_on_sla``: what broke
        and the points that will not be measured (kept in this point's ``timing`` and in an
        ``sla_stop`` audit row, so the run shows why it has fewer points than planned)."""
        rule = self.ctx.plan.benchmark.stop_on_sla
        if rule is None:
            return None
        broken = rule.violations(point.concurrency, metrics.get("ttft_p99_ms"), metrics.get("tpot_p99_ms"))
        if not broken or not later:
            return None
        skipped = [p.key for p in later]
        self.ctx.sla_stop = (f"stopped early at {point.key}: {'; '.join(broken)} (stop_on_sla); "
                             f"{len(skipped)} point(s) skipped: {', '.join(skipped)}")
        note = {"at": point.key, "broken": broken, "skipped": skipped}
        self.ctx.writer.audit("sla_stop", {"attempt_id": self.ctx.attempt_id, **note})
        return note

    def _point_failure(self, message: str) -> server_process.AttemptFailure:
        server = self.ctx.server
        assert server is not None  # noqa: S101
        if not server.alive:
            return server.crash_failure(default=FailureKind.SERVER_CRASH, what=message)
        return server_process.AttemptFailure(FailureKind.BENCH_FAILED, message,
                                             "see bench.log in the attempt directory")

    def _start_liveness(self, deployment: topo.Deployment) -> LivenessProbe:
        """/health_generate on every server, not the router (runner/liveness.py says why)."""
        s = self.settings
        rule = LivenessRule(interval_s=s.liveness_interval_s, failures=s.liveness_failures,
                            window_s=s.liveness_window_s, timeout_s=s.liveness_probe_timeout_s)
        if isinstance(deployment, external.ExternalDeployment):  # runner/external.py says why /v1/models
            return LivenessProbe([(deployment.endpoint.name, deployment.base_url)], rule,
                                 path=external.MODELS_PATH).start()
        # vLLM has no /health_generate; its /health asks the engine core (check_health) and
        # answers 503 once the engine is dead (domain/engines/vllm_log.py, the fact sheet's source lines).
        path = "/health" if self.ctx.plan.is_vllm else "/health_generate"
        return LivenessProbe([(m.name, m.server.base_url) for m in deployment.workers], rule, path=path).start()

    def _scheduler_failure(self, point_key: str, verdict: str) -> server_process.AttemptFailure:
        """The point is stopped (its client is killed at teardown, as on a point timeout)."""
        server = self.ctx.server
        assert server is not None  # noqa: S101
        if isinstance(server, external.ExternalDeployment):  # no log, no process: what the probe saw
            return server.crash_failure(default=FailureKind.SERVER_CRASH, what=f"{verdict} (at {point_key})")
        if not server.alive:  # it died meanwhile: its own log says more than the probe
            return server.crash_failure(default=FailureKind.SERVER_CRASH, what=f"the server died during {point_key}")
        return server_process.AttemptFailure(FailureKind.SERVER_CRASH, f"{verdict} (at {point_key})",
                                             "the server's log in the attempt directory shows where its "
                                             "scheduler stopped")

    def _start_samplers(self, deployment: topo.Deployment) -> list[Sampler]:
        """Every worker's /metrics (per role under a topology) and NVML; an external
        endpoint's /metrics only (runner/external.py)."""
        if isinstance(deployment, external.ExternalDeployment):
            return self._start(Sampler(_server_reader(url, "server", reader), hz=self.settings.telemetry_hz)
                               for url, reader in external.samplers_for(self.ctx.plan, deployment))
        samplers = []
        for name, url in deployment.metrics_urls():
            source = "server" if deployment.kind == "aggregated" else f"server:{name}"
            # SGLang's router (under a vLLM plan too) is read as SGLang's
            engine = SGLANG if name == "router" else adapter_for(self.ctx.plan.engine)
            reader = metrics_reader(engine.metrics)
            samplers.append(Sampler(_server_reader(url, source, reader), hz=self.settings.telemetry_hz))
        if self.nvml is not None:
            samplers.append(Sampler(self.nvml.reader(self.ctx.gpus), hz=self.settings.telemetry_hz))
        return self._start(samplers)

    @staticmethod
    def _start(samplers: Iterable[Sampler]) -> list[Sampler]:
        started = list(samplers)
        for sampler in started:
            sampler.start()
        return started

    def _store_point(self, point: Point, record: dict[str, Any], metrics: dict[str, Any],
                     samples: list[Any], result: PointOutcome, started: Any, finished: Any,
                     sla_stop: dict[str, Any] | None = None) -> None:
        ctx = self.ctx
        measure_started = result.measure_started_at
        summaries = summarise(samples, since=measure_started)
        if self._endpoint is not None:
            summaries += external.unavailable_rows(ctx.plan, self._endpoint)
        elif self.nvml is None:
            summaries.append({"source": "gpu", "device": None, "metric": "unavailable", "n": 0, "mean": None,
                              "p50": None, "max": None, "note": self.nvml_reason})
        write_parquet(samples, ctx.attempt_dir / "telemetry" / f"{point.key.replace('/', '_')}.parquet",
                      point_key=point.key, since=measure_started)
        request_samples = self._write_request_samples(point, record, result)
        if request_samples is not None:  # the intervals a comparison will ask for, computed here, once
            keep_intervals(Path(request_samples["path"]), metrics.get("duration_s"))
        conditions = point_conditions(ctx.plan, point)
        conditions.update(engine_version=ctx.engine_version, bench_tool="sglang.bench_serving",
                          bench_version=ctx.client.version if ctx.client else None,
                          bench_module=ctx.client.module if ctx.client else None,
                          engine=ctx.plan.engine, emulated=ctx.plan.emulated,
                          warmup_excluded_from_telemetry=measure_started is not None,
                          launch_idx=ctx.launch_idx, **client_conditions(ctx.client, result))
        conditions.update(speculative_conditions(ctx.plan, record))
        if ctx.plan.is_external:
            conditions.update(external.point_conditions(ctx.plan))
        if ctx.workload_label is not None:
            conditions["workload"] = ctx.workload_label  # with the file's hash, read before the point ran
        ctx.writer.insert_point(
            scenario=point.scenario.name, concurrency=point.concurrency, repeat_idx=point.repeat_idx,
            conditions=conditions, started_at=started, finished_at=finished, metrics=metrics,
            raw_record=json_safe(without_details(record)), telemetry=summaries,
            timing={"mode": ctx.client.mode if ctx.client else None, "host": ctx.hostname, **result.phases,
                    **({"sla_stop": sla_stop} if sla_stop else {})},
            request_samples=request_samples,
        )

    def _write_request_samples(self, point: Point, record: dict[str, Any],
                               result: PointOutcome) -> dict[str, Any] | None:
        """Every measured request of the point as one Parquet file under the attempt
        directory: from the warm driver's file, else from the record's ``--output-details``
        arrays.  None where the client left neither (the point is stored without them)."""
        requests: list[MeasuredRequest] | None = None
        if result.requests_file is not None and result.requests_file.is_file():
            requests = requests_from_driver(result.requests_file)
        if requests is None:
            requests = requests_from_details(record)
        if requests is None:
            return None
        path = self.ctx.attempt_dir / "requests" / f"{point.key.replace('/', '_')}.parquet"
        write_request_samples(requests, path)
        return {"path": str(path), "requests": len(requests)}

    def teardown(self, *, succeeded: bool = False) -> None:
        """Stop the client (after a succeeded attempt, an idle warm one may be kept for the
        daemon's next run instead) and every server group; then check the ports and GPU memory."""
        ctx = self.ctx
        grace = 0.0 if ctx.stop.cold.is_set() else self.settings.stop_grace_s
        if ctx.client is not None and not (succeeded and self._keep_client(ctx.client)):
            ctx.client.close(grace_s=min(grace, 5.0))
        self._stop_servers(grace)

    def _keep_client(self, client: BenchClient) -> bool:
        """Give an idle warm client back to the daemon for its next run; never after a
        cancel or a stop of the runner (those stop every process of the attempt)."""
        ctx = self.ctx
        if self.kept_client is None or self._client_key is None or not isinstance(client, WarmBenchClient):
            return False
        if ctx.interrupted() or ctx.stop.warm.is_set():
            return False
        return self.kept_client.keep(self._client_key, client)

    def _stop_servers(self, grace: float) -> list[str]:
        """Stop every server group, then check its ports and the GPUs' memory; what is left
        marks the host unhealthy and is returned (empty: all let go)."""
        ctx = self.ctx
        if ctx.server is None or not ctx.server.members:
            return []
        problems = []
        for port in ctx.server.stop(grace):
            self.host_state.stuck_port(port)
            problems.append(f"port {port} still taken after teardown")
            self.host_state.mark_unhealthy(problems[-1])
        held = self._check_gpu_memory()
        return problems + ([held] if held else [])

    def _held_gpu_memory(self, baseline: dict[str, float]) -> list[str]:
        now = host.gpu_memory_by_gpu(self.nvml, self.ctx.gpus) or {}
        return [f"{uuid} {gb:.1f} GB, baseline {baseline[uuid]:.1f} GB" for uuid, gb in now.items()
                if uuid in baseline and gb > baseline[uuid] + GPU_MEMORY_TOLERANCE_GB]

    def _check_gpu_memory(self) -> str | None:
        """Each of the run's GPUs back to what was in use before launch; other GPUs are other
        runs'.  The driver frees a killed server's memory a moment after its processes are
        gone, so the check waits up to BENCHDECK_GPU_SETTLE_S for it; a GPU still holding
        memory then marks the host unhealthy; the reason is returned."""
        baseline = self.ctx.baseline_gpu_gb
        if baseline is None:
            return None
        deadline = time.monotonic() + self.settings.gpu_settle_s
        held = self._held_gpu_memory(baseline)
        while held and time.monotonic() < deadline:
            time.sleep(GPU_SETTLE_POLL_S)
            held = self._held_gpu_memory(baseline)
        if not held:
            return None
        reason = f"GPU memory after teardown (waited {self.settings.gpu_settle_s:g} s): {'; '.join(held)}"
        self.host_state.mark_unhealthy(reason)
        return reason


GPU_SETTLE_POLL_S = 0.5


def launch_environment(plan: RunPlan, base: dict[str, str]) -> dict[str, str]:
    """The servers' environment (``base``), plus SGLang's simulated-acceptance variables when
    the plan pins the acceptance (domain/plan/quality.py)."""
    pinned = plan.pinned_acceptance.environment() if plan.pinned_acceptance is not None else {}
    return {**base, **pinned}


def sweep_order(bench: BenchmarkPlan, points: list[Point]) -> list[Point]:
    """The plan's order (each point's repeats back to back); with a fresh launch per
    repeat, repeat-major instead (every point of repeat 0, then of repeat 1, ...) so each
    launch serves one whole repeat.  The sort is stable: the plan's order within a repeat."""
    if not bench.fresh_launch_per_repeat:
        return points
    return sorted(points, key=lambda point: point.repeat_idx)


def _server_reader(url: str, source: str,
                   reader: Callable[[str, float], list[Sample]]) -> Callable[[float], list[Sample]]:
    def read(now: float) -> list[Sample]:
        samples = reader(url, now)
        if source == "server":
            return samples
        return [Sample(s.ts, source, s.device, s.metric, s.value) for s in samples]

    return read


def foreign_reason(nvml: NvmlReader | None, foreign: list[tuple[int, int, float]]) -> str:
    found = ", ".join(f"GPU{g}{_uuid_of(nvml, g)} pid {p or '?'} ({gb:.1f} GB)" for g, p, gb in foreign)
    source = host.gpu_guard_source(nvml)
    label = f" [SIMULATED via {host.SIMULATED_GPU_USERS_ENV}]" if source == "simulated" else ""
    return f"foreign process on the GPUs: {found}{label}"


def _uuid_of(nvml: NvmlReader | None, index: int) -> str:
    """The GPU's UUID, bracketed, to follow its NVML index in a message (indexes alone are ambiguous)."""
    if nvml is None or index >= len(nvml.uuids):
        return ""
    return f" ({nvml.uuids[index]})"
