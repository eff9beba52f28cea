"""The runner daemon: claim a run, launch its engine, sweep it with bench_serving, store it.

Shape (after rq and procrastinate):
- ``run_once()`` reaps expired leases (killing the process groups they recorded), then
  claims at most one run this host can serve and executes it; ``work(burst=True)``
  drains the queue and returns, ``serve()`` loops until stopped.
- An attempt's final status is decided once, in ``finally``; every move is a guarded
  UPDATE, and a lost race means someone else (lease expiry) already ended it.
- A heartbeat thread renews the lease and watches for a cancel request.  A lost lease is
  a fence: the attempt stops writing at once.
- First SIGTERM/SIGINT: warm stop (finish the current point, requeue the run); second:
  cold stop (kill the children now, requeue the run).  Either way nothing is left running.
- Before each claim a pre-flight check (foreign GPU users, disk space under the work
  directory, a free engine port, a port left taken by a teardown, a readable flag policy)
  decides whether this host may claim at all; a failing check flags the host unhealthy in
  the runners table and the run stays queued.  The host recovers by itself once the check
  passes again.
- Every launch writes an audit row (actor = the runner id) with the exact argv and the
  configuration hash; a change of the flag policy file between claims writes a
  ``policy_changed`` row with the old and new sha256.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import filelock

from db import LostRace, RunnerCapabilities, Store
from db.connection import lock_path_for
from db.store import Claim, ProcessGroup, utcnow
from domain.bench_record import BadRecord, json_safe, last_record, metrics_from_record
from domain.checks import schema_version_for
from domain.command import server_argv
from domain.flags._data import DataFileError, load_yaml_file
from domain.flags.policy import DEFAULT_POLICY_PATH, Policy, load_policy
from domain.flags.validate import validate_server_args
from domain.plan import Point, RunPlan, configuration_id, point_conditions
from domain.settings import Settings
from domain.states import NEVER_RETRIED, AttemptStatus, FailureKind
from runner import engine, host
from runner.bench_client import (
    BenchCancelled,
    BenchClient,
    BenchError,
    OneShotBenchClient,
    PointOutcome,
    WarmBenchClient,
    bench_env,
    build_bench_argv,
)
from runner.process import kill_recorded_group, pick_free_port, port_is_free
from runner.telemetry import NvmlReader, Sampler, open_nvml, read_server_metrics, summarise, write_parquet

log = logging.getLogger("benchdeck.runner")
GPU_MEMORY_TOLERANCE_GB = 1.0
# Exit code of ``work``/``serve`` when the database cannot be opened (a WAL that will not replay).
EXIT_DB_UNUSABLE = 2
# Failures a full disk can cause on the way (a log, a record or a Parquet file that could
# not be written): re-read as disk_full when the work directory is in fact full.
_DISK_SYMPTOMS = frozenset({FailureKind.SERVER_CRASH, FailureKind.BENCH_FAILED, FailureKind.BAD_OUTPUT,
                            FailureKind.STARTUP_TIMEOUT, FailureKind.RUNNER_LOST})


class Fenced(Exception):
    """This runner's lease on the attempt was lost; another party already ended it."""


@dataclass
class StopState:
    """Warm stop after the first signal, cold after the second."""

    warm: threading.Event = field(default_factory=threading.Event)
    cold: threading.Event = field(default_factory=threading.Event)

    def request(self) -> None:
        if self.warm.is_set():
            self.cold.set()
        self.warm.set()


@dataclass
class AttemptContext:
    claim: Claim
    settings: Settings
    store: Store
    runner_id: str
    stop: StopState
    cancel: threading.Event = field(default_factory=threading.Event)
    fenced: threading.Event = field(default_factory=threading.Event)
    status: AttemptStatus = AttemptStatus.CLAIMED
    server: engine.EngineServer | None = None
    client: BenchClient | None = None
    points_done: int = 0
    engine_version: str | None = None  # the SGLang version launched (its flag schema, for the emulator)
    baseline_gpu_gb: float | None = None  # GPU memory in use before launch; teardown must get back to it
    # A cancel that came from the runner stopping (not the user) sends the run back to the queue.
    stopped_by_runner: bool = False

    @property
    def plan(self) -> RunPlan:
        return self.claim.plan

    @property
    def attempt_dir(self) -> Path:
        return self.settings.work_dir / f"attempt-{self.claim.attempt_id}"

    def move(self, new: AttemptStatus) -> None:
        try:
            self.store.move_attempt(self.claim.attempt_id, self.runner_id, self.status, new)
        except LostRace as exc:
            raise Fenced(str(exc)) from exc
        self.status = new

    def interrupted(self) -> bool:
        """True when the attempt must stop now (cold stop, cancel, or a lost lease)."""
        if self.fenced.is_set():
            return True
        if self.stop.cold.is_set():
            self.stopped_by_runner = True
            return True
        return self.cancel.is_set()


class Heartbeat(threading.Thread):
    """Renews the lease every ``heartbeat_s``; sets ``fenced`` if it was lost and
    ``cancel`` when the user asked to cancel the run."""

    def __init__(self, ctx: AttemptContext):
        super().__init__(daemon=True, name="heartbeat")
        self.ctx = ctx
        self._done = threading.Event()

    def run(self) -> None:
        ctx, settings = self.ctx, self.ctx.settings
        while not self._done.wait(settings.heartbeat_s):
            try:
                if not ctx.store.heartbeat(ctx.claim.attempt_id, ctx.runner_id, lease_s=settings.lease_s):
                    ctx.fenced.set()
                    return
                if ctx.store.cancel_requested_by(ctx.claim.run_id):
                    ctx.cancel.set()
            except Exception:  # a busy DB delays one beat; the lease covers several
                log.exception("heartbeat failed")

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=10)


class Runner:
    def __init__(self, settings: Settings, store: Store | None = None):
        self.settings = settings
        self.store = store or Store.from_settings(settings)
        self.stop = StopState()
        self.nvml, self.nvml_reason = open_nvml()
        self.sglang_version = self._detect_sglang_version()
        self.healthy = True
        self.unhealthy_reason: str | None = None
        self._stuck_port: int | None = None  # a port a teardown left taken: unhealthy until it is free
        self._policy_sha256: str | None = None  # the flag policy file's content at the last claim
        self._policy_loaded: tuple[str, Policy] | None = None  # (content sha256, the policy read from it)
        self.caps = RunnerCapabilities(settings.runner_id, settings.runner_gpu_type, settings.runner_gpu_count,
                                       self.sglang_version)

    # --- start-up -----------------------------------------------------------------------
    def _detect_sglang_version(self) -> str | None:
        """Real SGLang only where an administrator configured its interpreter."""
        if self.settings.sglang_python is None:
            return None
        from runner.schema_sync import installed_schema

        schema = installed_schema(self.settings.sglang_python)
        self._installed_schema = schema
        return str(schema["sglang_version"])

    def start(self) -> None:
        kept = keep_leftover_wal(self.store.db_path, self.store.lock_timeout_s)
        self.store.migrate()
        if kept is not None:
            self.store.audit(self.caps.runner_id, "wal_recovered", None,
                             {"db": str(self.store.db_path), "kept_copy": str(kept)})
        self._policy_sha256 = self._policy_digest()
        info = host.host_info(self.nvml, self.nvml_reason)
        self.host_info = info
        self.store.register_runner(
            self.caps.runner_id, host=info["hostname"], gpu_type=self.caps.gpu_type, gpu_count=self.caps.gpu_count,
            sglang_version=self.sglang_version, healthy=True, unhealthy_reason=None,
            info={"gpu": info["gpu"], "demo_mode": self.sglang_version is None},
        )
        if self.sglang_version is not None:
            self.store.store_schema(self.sglang_version, info["hostname"], self._installed_schema)
        self.reap_expired()

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: Any) -> None:
            log.warning("signal %s: %s stop", signum, "cold" if self.stop.warm.is_set() else "warm")
            self.stop.request()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    # --- the loop -------------------------------------------------------------------------
    def reap_expired(self) -> None:
        """Fail attempts whose lease expired (runner_lost) and kill the groups they recorded."""
        for expired in self.store.expire_leases(retry_allowed=True, max_attempts=self.settings.max_attempts):
            for group in expired.groups:
                killed = kill_recorded_group(group.pgid, group.started_at, grace_s=self.settings.stop_grace_s)
                log.warning("attempt %s lost its runner; %s group %s %s", expired.attempt_id, group.role,
                            group.pgid, "killed" if killed else "already gone")

    def run_once(self) -> bool:
        """One pass of the claim loop; True if a run was executed."""
        self.reap_expired()
        self._check_health()
        if not self.healthy or self.stop.warm.is_set():
            return False
        claim = self.store.claim_next(self.caps, lease_s=self.settings.lease_s)
        if claim is None:
            return False
        self._note_policy(claim.run_id)
        self.execute(claim)
        return True

    def work(self, *, burst: bool) -> int:
        try:
            self.start()
        except duckdb.Error as exc:
            wal = self.store.db_path.with_name(self.store.db_path.name + ".wal")
            log.critical("cannot open the database %s: %s. The runner stops here and changes nothing: the "
                         "WAL %s is left as it is (DuckDB did not replay it). Restore the database or the WAL "
                         "from a backup, or move the WAL aside knowing its writes are lost, then restart.",
                         self.store.db_path, exc, wal)
            return EXIT_DB_UNUSABLE
        while not self.stop.warm.is_set():
            ran = self.run_once()
            if not ran:
                if burst:
                    break
                self.stop.warm.wait(self.settings.poll_s)
            self.store.runner_heartbeat(self.caps.runner_id, healthy=self.healthy,
                                        unhealthy_reason=self.unhealthy_reason)
        return 0

    def _check_health(self) -> None:
        """Pre-flight before a claim: an unhealthy host claims nothing (the run stays queued)
        and recovers by itself once every check passes again."""
        reason = self._preflight()
        if reason is not None:
            if self.healthy or reason != self.unhealthy_reason:
                log.warning("host unhealthy, claiming nothing: %s", reason)
                self._mark_unhealthy(reason)
        elif not self.healthy:
            log.info("host healthy again (was: %s)", self.unhealthy_reason)
            self.healthy, self.unhealthy_reason = True, None
            self.store.runner_heartbeat(self.caps.runner_id, healthy=True, unhealthy_reason=None)

    def _preflight(self) -> str | None:
        """Why this host must not start a run now, or None."""
        if self._stuck_port is not None:
            if not port_is_free(self._stuck_port):
                return f"port {self._stuck_port} still taken after a teardown (a stale server?)"
            self._stuck_port = None
        foreign = host.foreign_gpu_processes(self.nvml, set(), idle_memory_gb=self.settings.gpu_idle_memory_gb)
        if foreign:
            return self._foreign_reason(foreign)
        full = host.disk_full(self.settings.work_dir)
        if full is not None:
            return f"disk full: {full}"
        try:
            pick_free_port(*self.settings.engine_port_range)
        except RuntimeError as exc:
            return f"{exc} (BENCHDECK_ENGINE_PORT_RANGE)"
        return self._policy_problem()

    def _foreign_reason(self, foreign: list[tuple[int, int, float]]) -> str:
        found = ", ".join(f"GPU{g} pid {p or '?'} ({gb:.1f} GB)" for g, p, gb in foreign)
        source = host.gpu_guard_source(self.nvml)
        label = f" [SIMULATED via {host.SIMULATED_GPU_USERS_ENV}]" if source == "simulated" else ""
        return f"foreign process on the GPUs: {found}{label}"

    def _mark_unhealthy(self, reason: str) -> None:
        self.healthy, self.unhealthy_reason = False, reason
        self.store.runner_heartbeat(self.caps.runner_id, healthy=False, unhealthy_reason=reason)

    # --- the flag policy file -------------------------------------------------------------
    def _policy_path(self) -> Path:
        return self.settings.flag_policy_file or DEFAULT_POLICY_PATH

    def _policy_digest(self) -> str:
        try:
            return hashlib.sha256(self._policy_path().read_bytes()).hexdigest()
        except FileNotFoundError:
            return "missing"

    def _load_policy(self) -> Policy:
        """The policy as the file says now.  domain/flags caches data files by path (they
        change only on deploy), but the administrator edits this one on a live host: read
        it again whenever its content changed."""
        digest = self._policy_digest()
        if self._policy_loaded is None or self._policy_loaded[0] != digest:
            load_yaml_file.cache_clear()
            self._policy_loaded = (digest, load_policy(self.settings.flag_policy_file))
        return self._policy_loaded[1]

    def _policy_problem(self) -> str | None:
        """A reason when the policy file cannot be loaded."""
        try:
            self._load_policy()
        except (DataFileError, OSError) as exc:
            return f"flag policy unreadable, no launches until it is fixed: {exc}"
        return None

    def _note_policy(self, run_id: int) -> None:
        """An audit row when the policy file's content changed since the last claim."""
        digest = self._policy_digest()
        if self._policy_sha256 is not None and digest != self._policy_sha256:
            log.warning("flag policy %s changed: %s -> %s", self._policy_path(), self._policy_sha256, digest)
            self.store.audit(self.caps.runner_id, "policy_changed", run_id,
                             {"path": str(self._policy_path()), "old_sha256": self._policy_sha256,
                              "new_sha256": digest})
        self._policy_sha256 = digest

    # --- one attempt ----------------------------------------------------------------------
    def execute(self, claim: Claim) -> None:
        ctx = AttemptContext(claim, self.settings, self.store, self.caps.runner_id, self.stop)
        beat = Heartbeat(ctx)
        beat.start()
        outcome: tuple[AttemptStatus, FailureKind | None, str | None] = (
            AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "the runner failed unexpectedly")
        try:
            self._run_attempt(ctx)
            outcome = (AttemptStatus.SUCCEEDED, None, None)
        except engine.AttemptCancelled as exc:
            outcome = (AttemptStatus.CANCELLED, None, str(exc))
        except BenchCancelled:
            outcome = (AttemptStatus.CANCELLED, None, "cancelled during a point")
        except engine.AttemptFailure as exc:
            message = f"{exc} — {exc.hint}" if exc.hint else str(exc)
            outcome = (AttemptStatus.FAILED, exc.kind, message)
        except Fenced:
            outcome = (AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "lease lost")
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) and host.disk_full(self.settings.work_dir) is None:
                raise
            outcome = (AttemptStatus.FAILED, FailureKind.DISK_FULL, f"disk full: {exc}")
        except Exception as exc:
            # Anything else is a bug and stops the runner (after the attempt is recorded),
            # unless the work directory is full: then it is what a full disk looks like.
            if host.disk_full(self.settings.work_dir) is None:
                raise
            outcome = (AttemptStatus.FAILED, FailureKind.DISK_FULL, f"disk full: {exc!r}")
        finally:
            beat.finish()
            self._teardown(ctx)
            outcome = self._disk_full_outcome(outcome)
            self._finish(ctx, *outcome)

    def _disk_full_outcome(
        self, outcome: tuple[AttemptStatus, FailureKind | None, str | None]
    ) -> tuple[AttemptStatus, FailureKind | None, str | None]:
        """A crash, a failed client or unreadable output on a full disk is disk_full: the log
        or the record could not be written.  The host then claims nothing until space is back."""
        status, kind, message = outcome
        if status is not AttemptStatus.FAILED or kind not in _DISK_SYMPTOMS | {FailureKind.DISK_FULL}:
            return outcome
        full = host.disk_full(self.settings.work_dir)
        if full is None:
            return outcome
        self._mark_unhealthy(f"disk full: {full}")
        if kind is FailureKind.DISK_FULL:
            return outcome
        return AttemptStatus.FAILED, FailureKind.DISK_FULL, f"{full} (seen as: {kind}: {message})"

    def _finish(
        self, ctx: AttemptContext, status: AttemptStatus, kind: FailureKind | None, message: str | None
    ) -> None:
        if ctx.fenced.is_set():
            log.warning("attempt %s was fenced; its end was already recorded", ctx.claim.attempt_id)
            return
        if status is AttemptStatus.CANCELLED and (ctx.stopped_by_runner or self.stop.warm.is_set()) \
                and not ctx.cancel.is_set():
            message = f"runner stopped after {ctx.points_done} point(s); the run goes back to the queue"
        log_tail = ctx.server.log_tail() if ctx.server else None
        requeue = status is AttemptStatus.CANCELLED and not ctx.cancel.is_set()
        try:
            run_status = self.store.finish_attempt(
                ctx.claim.attempt_id, ctx.runner_id, ctx.status, status, failure_kind=kind, message=message,
                log_tail=log_tail, retry_allowed=kind not in NEVER_RETRIED, max_attempts=self.settings.max_attempts,
                requeue_on_cancel=requeue,
            )
            log.info("attempt %s: %s %s → run %s", ctx.claim.attempt_id, status, kind or "", run_status)
        except LostRace:
            log.warning("attempt %s ended elsewhere (lease expired)", ctx.claim.attempt_id)

    def _run_attempt(self, ctx: AttemptContext) -> None:
        plan, settings = ctx.plan, self.settings
        version = schema_version_for(plan, self.sglang_version)
        ctx.engine_version = version
        self._validate_at_the_edge(plan, version)
        self._guard_gpus()
        if self.store.cancel_requested_by(ctx.claim.run_id):
            ctx.cancel.set()  # cancelled between the claim and the launch: nothing was started
            raise engine.AttemptCancelled("cancelled before launch")
        ctx.move(AttemptStatus.STARTING)
        ctx.attempt_dir.mkdir(parents=True, exist_ok=True)
        ctx.baseline_gpu_gb = host.gpu_memory_used_gb(self.nvml)
        try:
            port = pick_free_port(*settings.engine_port_range)
        except RuntimeError as exc:
            self._mark_unhealthy(f"{exc} (BENCHDECK_ENGINE_PORT_RANGE)")
            raise engine.AttemptFailure(FailureKind.HOST_UNHEALTHY, str(exc),
                                        "free a port in BENCHDECK_ENGINE_PORT_RANGE or widen it") from exc
        argv = server_argv(plan, python=str(settings.sglang_python or ""), port=port, version=version,
                                  tokenizer_dir=settings.tokenizer_dir if plan.engine == "emulator" else None)
        self._audit_launch(ctx, argv, port, version)
        try:
            ctx.server = engine.launch(argv, port=port, log_path=ctx.attempt_dir / "server.log",
                                       env=dict(os.environ))
        except engine.AttemptFailure:
            self._stuck_port = port  # taken between the pick and the launch: someone else is there
            self._mark_unhealthy(f"port {port} taken at launch (a stale server?)")
            raise
        self._record_group(ctx, ctx.server.child.pgid, ctx.server.child.started_at, "server")
        ready_s = engine.wait_ready(ctx.server, budget_s=settings.startup_timeout_s, cancelled=ctx.interrupted)
        self._check_answering_server(ctx.server)
        facts = engine.startup_record(ctx.server, ready_s)
        ctx.client = self._start_client(ctx)
        if not self.store.record_startup(
            ctx.claim.attempt_id, ctx.runner_id, server_argv=argv, startup_facts=facts, host_info=self.host_info,
            bench_client={"module": ctx.client.module, "version": ctx.client.version, "mode": ctx.client.mode,
                          "python": str(settings.bench_python)},
            telemetry_dir=str(ctx.attempt_dir / "telemetry"),
        ):
            raise Fenced("lease lost during start-up")
        ctx.move(AttemptStatus.BENCHMARKING)
        for point in plan.points():
            if self.stop.warm.is_set():
                ctx.stopped_by_runner = True
                raise engine.AttemptCancelled("runner stopping")
            if ctx.interrupted():
                raise engine.AttemptCancelled("cancelled")
            self._run_point(ctx, point)
            ctx.points_done += 1

    def _audit_launch(self, ctx: AttemptContext, argv: list[str], port: int, version: str) -> None:
        """Who launched what: the exact argv (a list, never a shell string) and the
        configuration hash (the configurations table's id), before the process starts."""
        self.store.audit(self.caps.runner_id, "launch", ctx.claim.run_id, {
            "attempt_id": ctx.claim.attempt_id, "attempt_no": ctx.claim.attempt_no, "argv": argv,
            "config_hash": configuration_id(ctx.plan.configuration_snapshot()),
            "argv_sha256": hashlib.sha256(json.dumps(argv).encode()).hexdigest(),
            "engine_version": version, "port": port, "policy_sha256": self._policy_sha256,
        })

    def _check_answering_server(self, server: engine.EngineServer) -> None:
        """/health said 200, but from whom?  A stale server that took the port between the
        check and our bind answers too (SGLang's CI once passed against one); our child then
        fails to bind.  The listening socket must belong to the launched process tree."""
        if host.listens_on(server.child.popen.pid, server.port):
            return
        self._stuck_port = server.port
        reason = f"port {server.port} answered /health, but not from the launched server (a stale server?)"
        self._mark_unhealthy(reason)
        raise engine.AttemptFailure(FailureKind.HOST_UNHEALTHY, reason,
                                    "find and stop the process listening on that port")

    def _validate_at_the_edge(self, plan: RunPlan, version: str) -> None:
        """The form and the CLI validated already; the runner checks again before launch."""
        try:
            policy = self._load_policy()
        except (DataFileError, OSError) as exc:
            self._mark_unhealthy(f"flag policy unreadable: {exc}")
            raise engine.AttemptFailure(FailureKind.HOST_UNHEALTHY, f"flag policy unreadable: {exc}") from exc
        report = validate_server_args(plan.server_args, version, model_dirs=self.settings.model_dirs,
                                      model=plan.model, policy=policy)
        if not report.ok:
            details = "; ".join(issue.message("en") for issue in report.errors)
            raise engine.AttemptFailure(FailureKind.BAD_ARGS, f"flags rejected for SGLang {version}: {details}")

    def _guard_gpus(self) -> None:
        """Checked before the claim already (pre-flight); again here for a process that
        appeared in between."""
        foreign = host.foreign_gpu_processes(self.nvml, set(), idle_memory_gb=self.settings.gpu_idle_memory_gb)
        if foreign:
            reason = self._foreign_reason(foreign)
            self._mark_unhealthy(reason)
            raise engine.AttemptFailure(FailureKind.HOST_UNHEALTHY, reason, "stop that process, then the host recovers")

    def _record_group(self, ctx: AttemptContext, pgid: int, started_at: float, role: str) -> None:
        if not self.store.record_child(ctx.claim.attempt_id, ctx.runner_id, ProcessGroup(pgid, started_at, role)):
            raise Fenced("lease lost while launching")

    def _start_client(self, ctx: AttemptContext) -> BenchClient:
        """A warm client for the sweep; one process per point where the client's version
        cannot be driven in-process (or where BENCHDECK_BENCH_MODE asks for it)."""
        env = bench_env(self.settings.tokenizer_dir)
        log_path = ctx.attempt_dir / "bench.log"
        client: BenchClient
        if self.settings.bench_mode != "per-point":
            client = WarmBenchClient(self.settings.bench_python, log_path, env)
            try:
                client.start()
                return client
            except BenchError as exc:
                if self.settings.bench_mode == "warm" or "unsupported" not in str(exc):
                    raise engine.AttemptFailure(
                        FailureKind.BENCH_FAILED, str(exc),
                        f"is BENCHDECK_BENCH_PYTHON ({self.settings.bench_python}) an SGLang environment?",
                    ) from exc
            finally:
                if client.child is not None:
                    self._record_group(ctx, client.child.pgid, client.child.started_at, "bench")
        client = OneShotBenchClient(self.settings.bench_python, log_path, env,
                                    on_start=lambda child: self._record_group(ctx, child.pgid, child.started_at,
                                                                              "bench"))
        try:
            client.start()
        except BenchError as exc:
            raise engine.AttemptFailure(FailureKind.BENCH_FAILED, str(exc)) from exc
        return client

    def _run_point(self, ctx: AttemptContext, point: Point) -> None:
        assert ctx.server is not None and ctx.client is not None  # noqa: S101 - set by _run_attempt
        if not self.store.set_current_point(ctx.claim.attempt_id, ctx.runner_id, point.key):
            raise Fenced("lease lost")
        output = ctx.attempt_dir / "records" / f"{point.key.replace('/', '_')}.jsonl"
        output.parent.mkdir(parents=True, exist_ok=True)
        argv = build_bench_argv(ctx.plan, point, base_url=ctx.server.base_url, tokenizer=self.settings.tokenizer_dir,
                                output_file=output, known_flags=ctx.client.known_flags)
        samplers = self._start_samplers(ctx.server.base_url)
        started = utcnow()
        try:
            result = ctx.client.run_point(point.key, argv, timeout_s=self.settings.point_timeout_s,
                                          cancelled=ctx.interrupted)
        except BenchError as exc:
            raise self._point_failure(ctx, f"bench client failed at {point.key}: {exc}") from exc
        finally:
            samples = [s for sampler in samplers for s in sampler.stop()]
        finished = utcnow()
        if not ctx.server.child.alive:
            raise ctx.server.crash_failure(default=FailureKind.SERVER_CRASH,
                                           what=f"the server died during {point.key}")
        if not result.ok:
            raise self._point_failure(ctx, f"bench_serving failed at {point.key}: {result.error}")
        raw_text = output.read_text(encoding="utf-8", errors="replace") if output.exists() else ""
        try:
            record = last_record(raw_text)
            metrics = metrics_from_record(record, requested=point.num_prompts)
        except BadRecord as exc:
            self.store.record_raw_output(ctx.claim.attempt_id, ctx.runner_id, raw_text[-65_536:])
            raise engine.AttemptFailure(FailureKind.BAD_OUTPUT, f"unreadable bench record at {point.key}: {exc}",
                                        "the raw output is kept with the attempt") from exc
        self._store_point(ctx, point, record, metrics, samples, result, started, finished)

    def _point_failure(self, ctx: AttemptContext, message: str) -> engine.AttemptFailure:
        assert ctx.server is not None  # noqa: S101
        if not ctx.server.child.alive:
            return ctx.server.crash_failure(default=FailureKind.SERVER_CRASH, what=message)
        return engine.AttemptFailure(FailureKind.BENCH_FAILED, message, "see bench.log in the attempt directory")

    def _start_samplers(self, base_url: str) -> list[Sampler]:
        samplers = [Sampler(lambda now: read_server_metrics(base_url, now), hz=self.settings.telemetry_hz)]
        if self.nvml is not None:
            nvml: NvmlReader = self.nvml
            samplers.append(Sampler(nvml.read, hz=self.settings.telemetry_hz))
        for sampler in samplers:
            sampler.start()
        return samplers

    def _store_point(self, ctx: AttemptContext, point: Point, record: dict[str, Any], metrics: dict[str, Any],
                     samples: list[Any], result: PointOutcome, started: Any, finished: Any) -> None:
        measure_started = result.measure_started_at
        summaries = summarise(samples, since=measure_started)
        if self.nvml is None:
            summaries.append({"source": "gpu", "device": None, "metric": "unavailable", "n": 0, "mean": None,
                              "p50": None, "max": None, "note": self.nvml_reason})
        write_parquet(samples, ctx.attempt_dir / "telemetry" / f"{point.key.replace('/', '_')}.parquet",
                      point_key=point.key, since=measure_started)
        conditions = point_conditions(ctx.plan, point)
        conditions.update(engine_version=ctx.engine_version, bench_tool="sglang.bench_serving",
                          bench_version=ctx.client.version if ctx.client else None,
                          bench_module=ctx.client.module if ctx.client else None,
                          engine=ctx.plan.engine, emulated=ctx.plan.engine == "emulator",
                          warmup_excluded_from_telemetry=measure_started is not None)
        point_id = self.store.insert_point(
            ctx.claim.attempt_id, ctx.runner_id, scenario=point.scenario.name, concurrency=point.concurrency,
            repeat_idx=point.repeat_idx, conditions=conditions, started_at=started, finished_at=finished,
            metrics=metrics, raw_record=json_safe(record), telemetry=summaries,
            timing={"mode": ctx.client.mode if ctx.client else None, **result.phases},
        )
        if point_id is None:
            raise Fenced("late write refused: the attempt is no longer ours")

    def _teardown(self, ctx: AttemptContext) -> None:
        """Stop the client and the server groups; then check the port and GPU memory."""
        grace = 0.0 if self.stop.cold.is_set() else self.settings.stop_grace_s
        if ctx.client is not None:
            ctx.client.close(grace_s=min(grace, 5.0))
        if ctx.server is not None:
            ctx.server.stop(grace)
            if not port_is_free(ctx.server.port):
                self._stuck_port = ctx.server.port
                self._mark_unhealthy(f"port {ctx.server.port} still taken after teardown")
            baseline = ctx.baseline_gpu_gb
            now_gb = host.gpu_memory_used_gb(self.nvml)
            if baseline is not None and now_gb is not None and now_gb > baseline + GPU_MEMORY_TOLERANCE_GB:
                self._mark_unhealthy(f"GPU memory {now_gb:.1f} GB after teardown, baseline {baseline:.1f} GB")


def keep_leftover_wal(db_path: Path, lock_timeout_s: float) -> Path | None:
    """Keep a copy of a WAL left by a process that died inside a DB access, before anything
    opens the file; return the copy's path.

    Every access here closes its connection, and a clean close checkpoints and deletes the
    WAL, so a WAL found under the cross-process lock is a leftover.  DuckDB replays it on
    the next open and deletes it; a torn or damaged WAL is replayed only up to the damage,
    without an error (DuckDB 2.0.1: a WAL cut in half lost the committed rows after the
    cut).  With the copy and the ``wal_recovered`` audit row, nothing is lost silently."""
    wal = db_path.with_name(db_path.name + ".wal")
    if not wal.exists():
        return None
    with filelock.FileLock(str(lock_path_for(db_path)), timeout=lock_timeout_s):
        if not wal.exists():
            return None
        kept = wal.with_name(f"{wal.name}.kept-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        shutil.copy2(wal, kept)
    log.warning("a WAL from an unclean shutdown was found beside %s; DuckDB will replay it. A copy is kept at "
                "%s: if committed rows are missing after the replay, they are in that copy.", db_path, kept)
    return kept


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def describe(runner: Runner) -> str:
    return json.dumps({"runner_id": runner.caps.runner_id, "sglang_version": runner.sglang_version,
                       "gpu": f"{runner.caps.gpu_count}x{runner.caps.gpu_type}", "nvml": runner.nvml_reason or "ok"})
