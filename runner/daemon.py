"""The runner daemon: claim a run, launch its engine, sweep it with bench_serving, store it.

Shape (after rq and procrastinate):
- ``run_once()`` reaps expired leases (killing the process groups they recorded), then
  claims at most one run this host can serve and executes it; ``work(burst=True)``
  drains the queue and returns, ``work(burst=False)`` (the ``serve`` command) loops until
  stopped.  With BENCHDECK_EXECUTOR=ray the CLI runs ``RayRunner`` instead
  (runner/ray_executor.py): the same start-up and endings, its own claim loop.
- Start-up keeps a copy of a WAL left by an unclean shutdown before DuckDB replays it
  (db/recovery.py) and audits it (``wal_recovered``); a database DuckDB refuses stops the
  runner with ``EXIT_DB_UNUSABLE``, having changed nothing.
- An attempt's final status is decided once, in ``finally``; every move is a guarded
  UPDATE, and a lost race means someone else (lease expiry) already ended it.
- A heartbeat thread renews the lease and watches for a cancel request.  A lost lease is
  a fence: the attempt stops writing at once (runner/lease.py).
- First SIGTERM/SIGINT: warm stop (finish the current point, or stop a server still loading
  at once, and requeue the run); second: cold stop (kill the children now, requeue the run).
  Either way nothing is left running, and the cancelled attempt is not counted as a failure.
- Before each claim a pre-flight check (a GPU type NVML contradicts, disk space under the
  work directory, a free engine port, a port left taken by a teardown, a readable flag policy)
  decides whether this host may claim at all; a failing check flags the host unhealthy in
  the runners table and the run stays queued.  The host recovers by itself once the check
  passes again.  Foreign GPU users are scoped to the run: the pre-flight publishes which of
  this runner's GPUs they hold (runner/busy_gpus.py), the claim skips a run that would use
  one of those and takes the next whose GPUs are free; the skipped run says why it waits.
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
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from db import DbBusy, DbUnusable, LostRace, RunnerCapabilities, Store
from db.connection import on_served_write
from db.recovery import keep_leftover_wal, open_and_migrate, wal_path_for
from db.store import Claim
from domain.core.settings import Settings
from domain.core.states import NEVER_RETRIED, AttemptStatus, FailureKind
from domain.flags._data import DataFileError, forget_cached_files
from domain.flags.policy import DEFAULT_POLICY_PATH, Policy, load_policy
from domain.flags.schema import SchemaError, register_host_schema
from domain.plan.gpu_claim import BUSY_GPUS_KEY, held_by_others, plan_gpu_ids
from domain.plan.run_plan import RunPlan
from runner import host, server_process
from runner.attempt import AttemptContext, AttemptExecution, HostState
from runner.bench_client import BenchCancelled, KeptClient
from runner.busy_gpus import busy_runner_gpus
from runner.lease import Fenced, Heartbeat, StopState, StoreWriter
from runner.process import kill_recorded_group, pick_free_port, port_is_free
from runner.telemetry import GpuScopeError, GpuSet, open_nvml
from runner.watch import watch_tick

log = logging.getLogger("benchdeck.runner")
# Exit code of ``work``/``serve`` when the database cannot be opened (a WAL that will not replay).
EXIT_DB_UNUSABLE = 2
# Failures a full disk can cause on the way (a log, a record or a Parquet file that could
# not be written): re-read as disk_full when the work directory is in fact full.
_DISK_SYMPTOMS = frozenset({FailureKind.SERVER_CRASH, FailureKind.BENCH_FAILED, FailureKind.BAD_OUTPUT,
                            FailureKind.STARTUP_TIMEOUT, FailureKind.RUNNER_LOST})


class Runner:
    """The local runner: claims one run at a time that this host's GPUs can serve and
    executes it here.  ``RayRunner`` (runner/ray_executor.py) overrides the claim loop."""

    def __init__(self, settings: Settings, store: Store | None = None):
        self.settings = settings
        self.store = store or Store.from_settings(settings)
        self.stop = StopState()
        self.nvml, self.nvml_reason = open_nvml()
        self.sglang_version = self._detect_sglang_version()
        self.healthy = True
        self.unhealthy_reason: str | None = None
        self._stuck_port: int | None = None  # a port a teardown left taken: unhealthy until it is free
        self.busy_gpus: dict[int, str] = {}  # this runner's GPU ids a foreign process holds, with the reason
        self._policy_sha256: str | None = None  # the flag policy file's content at the last claim
        self._policy_loaded: tuple[str, Policy] | None = None  # (content sha256, the policy read from it)
        self.vllm_version = detect_vllm_version(settings)
        self.caps = RunnerCapabilities(settings.runner_id, settings.runner_gpu_type, settings.runner_gpu_count,
                                       self.sglang_version, self.vllm_version)
        self.kept_client = KeptClient()  # the warm bench client between runs (runner/bench_client.py)
        self._wake = threading.Event()  # set by a stop or a served write: the next pass starts at once

    # --- start-up -----------------------------------------------------------------------
    def _detect_sglang_version(self) -> str | None:
        """Real SGLang only where an administrator configured its interpreter.  Its dumped
        schema is the one this process validates that version with (whether or not
        benchdeck ships one); a dump that fails leaves the host unhealthy, with the reason."""
        self._installed_schema: dict[str, Any] | None = None
        self._schema_problem: str | None = None
        if self.settings.sglang_python is None:
            return None
        from runner.schema_sync import SchemaError as DumpError
        from runner.schema_sync import cached_installed_schema

        try:
            schema = cached_installed_schema(self.settings.sglang_python, self.settings.cache_dir)
            register_host_schema(schema)
        except (DumpError, SchemaError) as exc:
            self._schema_problem = f"BENCHDECK_SGLANG_PYTHON: no flag schema could be read: {exc}"[:2000]
            log.error("%s", self._schema_problem)
            return None
        self._installed_schema = schema
        return str(schema["sglang_version"])

    def start(self) -> None:
        """Bring the database up (a leftover WAL kept, then replayed; pending migrations),
        register this host and reap what expired meanwhile.  ``DbUnusable`` when DuckDB
        refuses the file."""
        kept = self._keep_leftover_wal()
        open_and_migrate(self.store)
        if kept is not None:
            self.store.audit(self.caps.runner_id, "wal_recovered", None,
                             {"db": str(self.store.db_path), "kept_copy": str(kept)})
        self._policy_sha256 = self._policy_digest()
        info = host.host_info(self.nvml, self.nvml_reason, declared_type=self.caps.gpu_type,
                              declared_count=self.caps.gpu_count)
        self.host_info = info
        self.store.register_runner(
            self.caps.runner_id, host=info["hostname"], gpu_type=self.caps.gpu_type, gpu_count=self.caps.gpu_count,
            sglang_version=self.sglang_version, healthy=True, unhealthy_reason=None,
            info={"gpu": info["gpu"], "demo_mode": self.sglang_version is None,
                  "vllm_version": self.vllm_version},
        )
        if self.sglang_version is not None and self._installed_schema is not None:
            self.store.store_schema(self.sglang_version, info["hostname"], self._installed_schema)
        self.reap_expired()

    def _keep_leftover_wal(self) -> Path | None:
        kept = keep_leftover_wal(self.store.db_path, self.store.lock_timeout_s)
        if kept is not None:
            log.warning("a WAL from an unclean shutdown was found beside %s; DuckDB will replay it. A copy is kept "
                        "at %s: if committed rows are missing after the replay, they are in that copy.",
                        self.store.db_path, kept)
        return kept

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: Any) -> None:
            log.warning("signal %s: %s stop", signum, "cold" if self.stop.warm.is_set() else "warm")
            self.stop.request()
            self._wake.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    # --- the loop -------------------------------------------------------------------------
    def reap_expired(self) -> None:
        """Fail attempts whose lease expired (runner_lost) and kill the groups they recorded."""
        for expired in self.store.expire_leases(retry_allowed=True, max_attempts=self.settings.max_attempts):
            for group in expired.groups:
                if group.role.startswith("ray:"):
                    continue  # on a Ray node: the lifeline killed it with the node's worker
                killed = kill_recorded_group(group.pgid, group.started_at, grace_s=self.settings.stop_grace_s)
                log.warning("attempt %s lost its runner; %s group %s %s", expired.attempt_id, group.role,
                            group.pgid, "killed" if killed else "already gone")

    def run_once(self) -> bool:
        """One pass of the claim loop; True if a run was executed."""
        self.reap_expired()
        self._check_health()
        if not self.healthy or self.stop.warm.is_set():
            return False
        claim = self.store.claim_next(self.caps, lease_s=self.settings.lease_s,
                                      accept=self._gpus_free if self.busy_gpus else None)
        if claim is None:
            return False
        self._note_policy(claim.run_id)
        self.execute(claim)
        return True

    def work(self, *, burst: bool) -> int:
        """Start, then the claim loop; the exit code of ``work`` and ``serve``."""
        try:
            self.start()
        except DbUnusable as exc:
            wal = wal_path_for(self.store.db_path)
            log.critical("cannot open the database %s: %s. The runner stops here and changes nothing: the "
                         "WAL %s is left as it is (DuckDB did not replay it). Restore the database or the WAL "
                         "from a backup, or move the WAL aside knowing its writes are lost, then restart.",
                         self.store.db_path, exc, wal)
            return EXIT_DB_UNUSABLE
        stop_listening = on_served_write(self._wake.set)
        try:
            return self.claim_loop(burst=burst)
        finally:
            stop_listening()
            self.kept_client.close(grace_s=0 if self.stop.cold.is_set() else 5)

    def claim_loop(self, *, burst: bool) -> int:
        """Pass after pass until a stop (with ``burst``: until a pass claims nothing); the
        runners row is touched after each pass, so the host shows alive while idle."""
        while not self.stop.warm.is_set():
            ran = self.run_once()
            self.watch_pass()
            if not ran:
                if burst:
                    break
                self._wait_for_work()
            self.store.runner_heartbeat(self.caps.runner_id, healthy=self.healthy,
                                        unhealthy_reason=self.unhealthy_reason)
        return 0

    def _wait_for_work(self) -> None:
        """Until the next pass: ``poll_s``, or less when a write that this runner served for
        another process may have queued or changed work (db.connection.on_served_write), or
        a stop was asked."""
        self._wake.wait(self.settings.poll_s)
        self._wake.clear()

    def watch_pass(self) -> None:
        """Watched configurations (runner/watch.py): follow this host's SGLang version (in demo
        mode the one it emulates, BENCHDECK_EMULATED_SGLANG_VERSION), judge ended re-runs, queue
        owed ones at low priority.  A busy database skips a pass; the next one catches up."""
        try:
            watch_tick(self.store, self.settings, runner_id=self.caps.runner_id, gpu_type=self.caps.gpu_type,
                       host_version=self.sglang_version or self.settings.emulated_sglang_version)
        except DbBusy as exc:
            log.warning("watch pass skipped: %s", exc)

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
        if self._schema_problem is not None:
            return self._schema_problem
        if self._stuck_port is not None:
            if not port_is_free(self._stuck_port):
                return f"port {self._stuck_port} still taken after a teardown (a stale server?)"
            self._stuck_port = None
        gpus = self._gpu_problem()
        if gpus is not None:
            return gpus
        full = host.disk_full(self.settings.work_dir)
        if full is not None:
            return f"disk full: {full}"
        try:
            pick_free_port(*self.settings.engine_port_range)
        except RuntimeError as exc:
            return f"{exc} (BENCHDECK_ENGINE_PORT_RANGE)"
        return self._policy_problem()

    def _gpu_problem(self) -> str | None:
        """Why this runner's GPUs may not take any run now: they cannot be named, or NVML
        names another GPU type than the setting declares.  Foreign users are noted per GPU."""
        try:
            gpus = host.runner_gpus(self.nvml, os.environ.get("CUDA_VISIBLE_DEVICES"), self.caps.gpu_count)
        except GpuScopeError as exc:
            return f"the runner's GPUs (CUDA_VISIBLE_DEVICES): {exc}"
        mismatch = host.gpu_type_mismatch(self.nvml, self.caps.gpu_type, gpus)
        if mismatch is not None:
            return mismatch
        self._note_busy_gpus(gpus)
        return None

    def _note_busy_gpus(self, gpus: GpuSet) -> None:
        """Which of this runner's GPUs a foreign process holds (this runner's own runs'
        process groups are not foreign), published on its runners row when it changes."""
        foreign = host.foreign_gpu_processes(self.nvml, set(), idle_memory_gb=self.settings.gpu_idle_memory_gb,
                                             gpus=gpus, own_groups=self._own_groups())
        busy = busy_runner_gpus(self.nvml, foreign, os.environ.get("CUDA_VISIBLE_DEVICES"), self.caps.gpu_count)
        if busy == self.busy_gpus:
            return
        log.warning("GPUs held by a foreign process: %s; runs on them wait, the others go ahead", busy or "none now")
        self.store.set_runner_info(self.caps.runner_id, **{BUSY_GPUS_KEY: {str(gpu): why for gpu, why in busy.items()}})
        self.busy_gpus = busy

    def _gpus_free(self, plan: RunPlan) -> bool:
        """Whether none of the plan's GPUs is held by a foreign process (else it stays queued)."""
        return not held_by_others(plan_gpu_ids(plan), self.busy_gpus)

    def _own_groups(self) -> set[int]:
        """The process groups of this runner's attempts still under way (recorded in the DB)."""
        return {group.pgid for group in self.store.live_process_groups(self.caps.runner_id)}

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
        """The policy as the file says now: read again whenever its content changed (the
        loader's cache follows mtime and size; the digest also catches an edit that kept both)."""
        digest = self._policy_digest()
        if self._policy_loaded is None or self._policy_loaded[0] != digest:
            forget_cached_files()
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
    def new_context(self, claim: Claim) -> AttemptContext:
        writer = StoreWriter(self.store, claim.attempt_id, claim.run_id, self.caps.runner_id)
        return AttemptContext(claim.attempt_id, claim.run_id, claim.attempt_no, claim.plan, self.settings, writer,
                              self.stop)

    def new_execution(self, ctx: AttemptContext) -> AttemptExecution:
        return AttemptExecution(ctx, self.nvml, self.nvml_reason, self.host_info, self.sglang_version,
                                self._edge_policy(), self._policy_sha256,
                                HostState(mark_unhealthy=self._mark_unhealthy, stuck_port=self._set_stuck_port,
                                          own_groups=self._own_groups), kept_client=self.kept_client,
                                vllm_version=self.vllm_version, installed_schema=self._installed_schema)

    def _set_stuck_port(self, port: int) -> None:
        self._stuck_port = port

    def _edge_policy(self) -> Policy:
        """The policy the runner checks flags against at launch (re-read when its file changed)."""
        try:
            return self._load_policy()
        except (DataFileError, OSError) as exc:
            self._mark_unhealthy(f"flag policy unreadable: {exc}")
            raise server_process.AttemptFailure(FailureKind.HOST_UNHEALTHY, f"flag policy unreadable: {exc}") from exc

    def execute(self, claim: Claim) -> None:
        ctx = self.new_context(claim)
        beat = Heartbeat(ctx, self.store, self.caps.runner_id)
        beat.start()
        execution: AttemptExecution | None = None
        outcome: tuple[AttemptStatus, FailureKind | None, str | None] = (
            AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "the runner failed unexpectedly")
        try:
            execution = self.new_execution(ctx)
            execution.run()
            outcome = (AttemptStatus.SUCCEEDED, None, ctx.sla_stop)
        except server_process.AttemptCancelled as exc:
            outcome = (AttemptStatus.CANCELLED, None, str(exc))
        except BenchCancelled:
            outcome = (AttemptStatus.CANCELLED, None, "cancelled during a point")
        except server_process.AttemptFailure as exc:
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
            if execution is not None:
                execution.teardown(succeeded=outcome[0] is AttemptStatus.SUCCEEDED)
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
        self, ctx: AttemptContext, status: AttemptStatus, kind: FailureKind | None, message: str | None,
        log_tail: str | None = None,
    ) -> None:
        """Record the attempt's end (once).  ``log_tail`` comes from the node under Ray."""
        if ctx.fenced.is_set():
            log.warning("attempt %s was fenced; its end was already recorded", ctx.attempt_id)
            return
        if status is AttemptStatus.CANCELLED and (ctx.stopped_by_runner or self.stop.warm.is_set()) \
                and not ctx.cancel.is_set():
            message = runner_stop_message(ctx)
        if log_tail is None and ctx.server is not None and ctx.server.members:
            log_tail = ctx.server.log_tail()
        requeue = status is AttemptStatus.CANCELLED and not ctx.cancel.is_set()
        try:
            run_status = self.store.finish_attempt(
                ctx.attempt_id, self.caps.runner_id, ctx.status, status, failure_kind=kind, message=message,
                log_tail=log_tail, retry_allowed=kind not in NEVER_RETRIED, max_attempts=self.settings.max_attempts,
                requeue_on_cancel=requeue,
            )
            log.info("attempt %s: %s %s → run %s", ctx.attempt_id, status, kind or "", run_status)
        except LostRace:
            log.warning("attempt %s ended elsewhere (lease expired)", ctx.attempt_id)


def runner_stop_message(ctx: AttemptContext) -> str:
    """What a requeued attempt says when its runner stopped (a cancelled attempt, not a failed one)."""
    if ctx.status is AttemptStatus.STARTING:
        return (f"runner stopped during the server's start-up (after {ctx.points_done} point(s)): the load was "
                "stopped; the run goes back to the queue, not counted as a failed attempt")
    return f"runner stopped after {ctx.points_done} point(s); the run goes back to the queue"


def detect_vllm_version(settings: Settings) -> str | None:
    """The vLLM version at BENCHDECK_VLLM_PYTHON, read from its package metadata (importing
    vLLM would start CUDA); None where none is configured or it cannot be read (logged: the
    host then claims no engine: vllm run)."""
    if settings.vllm_python is None:
        return None
    command = [str(settings.vllm_python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("BENCHDECK_VLLM_PYTHON %s: cannot read the vLLM version: %s", settings.vllm_python, exc)
        return None
    if done.returncode != 0:
        log.warning("BENCHDECK_VLLM_PYTHON %s has no vllm package: %s", settings.vllm_python,
                    done.stderr.strip()[-300:])
        return None
    return done.stdout.strip() or None


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def describe(runner: Runner) -> str:
    return json.dumps({"runner_id": runner.caps.runner_id, "sglang_version": runner.sglang_version,
                       "gpu": f"{runner.caps.gpu_count}x{runner.caps.gpu_type}", "nvml": runner.nvml_reason or "ok"})
