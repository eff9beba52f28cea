"""The Ray executor: runs go to the Ray node whose GPU type matches, the daemon on the
head stays the only writer of DuckDB.

- **The runner.** ``RayRunner`` is ``Runner`` (runner/daemon.py) with its own claim loop;
  ``serve`` and ``work`` run it when BENCHDECK_EXECUTOR=ray (runner/cli.py picks the class).
- **Placement.** A node offers its GPUs as the custom resource ``benchdeck_gpu:<TYPE>``
  (``ray start --resources '{"benchdeck_gpu:H200": 8}'``).  A run asks for
  ``plan.gpu.count`` of its type, plus Ray's own ``num_gpus`` for real SGLang runs (Ray
  then sets ``CUDA_VISIBLE_DEVICES`` for the task).  Emulator runs take no real GPU.
- **One run = one Ray task**, a streaming generator: it runs ``AttemptExecution`` on its
  node (the same code as the local daemon) and yields every write as an event; the daemon
  applies each event to the Store through the attempt's fenced ``StoreWriter``
  (runner/lease.py).
- **No Ray retries** (``max_retries=0``): a run is retried by the runner's own policy
  (``BENCHDECK_MAX_ATTEMPTS``), once, and never after OOM or bad flags.
- **Cancellation** (user cancel, lost lease, runner stop) is ``ray.cancel`` on the task:
  the task stops its attempt cold, and the attempt's teardown kills its process groups on
  the node before the task ends.
- **A node dying** ends the task with a Ray error: the attempt fails as ``runner_lost``.
  Servers and clients on that node were started through ``runner.lifeline``, so the
  kernel kills them with the worker process: nothing is left holding GPUs.
- **Runner hosts.** Every Ray node with benchdeck GPUs is listed in the runners table
  (``ray:<host>:<node id>``) with its GPUs, and its health follows Ray's view of it.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ray

from db.store import Claim, ProcessGroup, RunnerCapabilities, Store
from domain.core.settings import Settings
from domain.core.states import AttemptStatus, FailureKind
from domain.flags.policy import load_policy
from domain.plan.run_plan import RunPlan
from runner import host, server_process
from runner.attempt import AttemptContext, AttemptExecution, HostState
from runner.bench_client import BenchCancelled
from runner.daemon import Runner
from runner.lease import Fenced, Heartbeat, StopState
from runner.telemetry import open_nvml

log = logging.getLogger("benchdeck.ray")
RESOURCE_PREFIX = "benchdeck_gpu:"
REMOTE_ROLE_PREFIX = "ray:"  # process groups on a Ray node: not the head's to reap
NODE_REFRESH_S = 10.0


def gpu_resource(gpu_type: str) -> str:
    return f"{RESOURCE_PREFIX}{gpu_type}"


def task_options(plan: RunPlan) -> dict[str, Any]:
    return {
        "resources": {gpu_resource(plan.gpu.type): float(plan.gpu.count)},
        "num_gpus": plan.gpu.count if plan.engine == "sglang" else 0,
        "num_cpus": 1,
        "max_retries": 0,  # retry is the runner's own policy
        "retry_exceptions": False,
        "num_returns": "streaming",
        "name": f"benchdeck-run-{plan.name}",
    }


# --- the node side -----------------------------------------------------------------------------


@dataclass
class StreamWriter:
    """An attempt's writes as events for the daemon; fencing happens where they land."""

    events: queue.Queue[dict[str, Any]]
    host: str

    def _put(self, kind: str, **args: Any) -> None:
        self.events.put({"kind": kind, **args})

    def move(self, current: AttemptStatus, new: AttemptStatus) -> None:
        self._put("move", new=str(new))

    def record_child(self, group: ProcessGroup) -> None:
        self._put("child", pgid=group.pgid, started_at=group.started_at,
                  role=f"{REMOTE_ROLE_PREFIX}{self.host}/{group.role}")

    def record_startup(self, **facts: Any) -> None:
        self._put("startup", facts=facts)

    def set_current_point(self, key: str) -> None:
        self._put("current_point", key=key)

    def insert_point(self, **point: Any) -> None:
        self._put("point", point=point)

    def record_raw_output(self, raw: str) -> None:
        self._put("raw_output", raw=raw)

    def audit(self, action: str, details: dict[str, Any]) -> None:
        self._put("audit", action=action, details=details)

    def cancel_requested(self) -> bool:
        return False  # the daemon watches for cancels and cancels the task


def _outcome(execution: AttemptExecution) -> tuple[str, str | None, str | None]:
    try:
        execution.run()
        return str(AttemptStatus.SUCCEEDED), None, None
    except server_process.AttemptCancelled as exc:
        return str(AttemptStatus.CANCELLED), None, str(exc)
    except BenchCancelled:
        return str(AttemptStatus.CANCELLED), None, "cancelled during a point"
    except server_process.AttemptFailure as exc:
        return str(AttemptStatus.FAILED), str(exc.kind), f"{exc} — {exc.hint}" if exc.hint else str(exc)
    except Exception as exc:  # a bug on the node: the run fails, the daemon carries on
        log.exception("attempt failed on the node")
        return str(AttemptStatus.FAILED), str(FailureKind.RUNNER_LOST), f"node error: {exc!r}"


def run_on_node(attempt_id: int, run_id: int, attempt_no: int, plan_json: str) -> Iterator[dict[str, Any]]:
    """The task body: the attempt in a thread of its own (it is the parent of every child,
    for the lifeline), its writes streamed back as they happen."""
    settings = Settings()  # this node's own BENCHDECK_* environment
    hostname = socket.gethostname()
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    stop = StopState()
    ctx = AttemptContext(attempt_id, run_id, attempt_no, RunPlan.model_validate_json(plan_json), settings,
                         StreamWriter(events, hostname), stop, die_with_parent=True, hostname=hostname)
    nvml, nvml_reason = open_nvml()
    execution = AttemptExecution(
        ctx, nvml, nvml_reason, host.host_info(nvml, nvml_reason), None, load_policy(settings.flag_policy_file),
        None, HostState(mark_unhealthy=lambda reason: events.put({"kind": "unhealthy", "reason": reason}),
                        stuck_port=lambda port: None),
    )

    def body() -> None:
        status: str = str(AttemptStatus.FAILED)
        kind: str | None = str(FailureKind.RUNNER_LOST)
        message: str | None = "node error"
        try:
            status, kind, message = _outcome(execution)
        finally:
            execution.teardown()
            tail = ctx.server.log_tail() if ctx.server is not None and ctx.server.members else None
            events.put({"kind": "end", "status": status, "failure_kind": kind, "message": message,
                        "log_tail": tail, "points_done": ctx.points_done})

    yield {"kind": "node", "host": hostname, "node_id": ray.get_runtime_context().get_node_id()}
    worker = threading.Thread(target=body, name=f"attempt-{attempt_id}")
    worker.start()
    try:
        while True:
            try:
                event = events.get(timeout=0.5)
            except queue.Empty:
                continue
            yield event
            if event["kind"] == "end":
                return
    finally:
        stop.cold.set()  # cancelled (or the daemon went away): stop now, tear down, then end
        worker.join()


remote_attempt = ray.remote(run_on_node)


# --- the head side ------------------------------------------------------------------------------


@dataclass
class ActiveAttempt:
    claim: Claim
    gpu_type: str
    thread: threading.Thread
    started: threading.Event = field(default_factory=threading.Event)  # placed on a node
    node_runner_id: str | None = None  # the runners-table id of the node it was placed on


class RayRunner(Runner):
    """The runner with Ray: the same start-up, lease and endings as ``Runner``, another
    claim loop.  Each pass claims for every GPU type the cluster has free; one thread per
    active attempt follows its task and applies its events."""

    def __init__(self, settings: Settings, store: Store | None = None):
        super().__init__(settings, store)
        self.active: dict[int, ActiveAttempt] = {}
        self._nodes_seen_at = 0.0

    # --- loop -----------------------------------------------------------------------------
    def claim_loop(self, *, burst: bool) -> int:
        """Passes until a stop and every active attempt has ended (with ``burst``: until a
        pass claims nothing and none is active)."""
        if not ray.is_initialized():
            ray.init(address=self.settings.ray_address or "auto", logging_level=logging.WARNING, log_to_driver=False)
        while True:
            claimed = self.run_once()
            if self.stop.warm.is_set() and not self.active:
                break
            if burst and not claimed and not self.active:
                break
            self.stop.cold.wait(0.2 if claimed else self.settings.poll_s)
            self.store.runner_heartbeat(self.caps.runner_id, healthy=self.healthy,
                                        unhealthy_reason=self.unhealthy_reason)
        for attempt in list(self.active.values()):
            attempt.thread.join()
        return 0

    def run_once(self) -> bool:
        """One pass: nodes listed, expired leases reaped, what fits claimed (each run then
        goes on in a thread of its own); True if a run was claimed."""
        self._refresh_nodes()
        self.reap_expired()
        claimed = False if self.stop.warm.is_set() else self._claim_what_fits()
        self._forget_finished()
        return claimed

    def _free_gpus(self) -> dict[str, float]:
        """Free benchdeck GPUs per type, less what claimed-but-not-yet-placed runs will take."""
        free = {k[len(RESOURCE_PREFIX):]: v for k, v in ray.available_resources().items()
                if k.startswith(RESOURCE_PREFIX)}
        for attempt in self.active.values():
            if not attempt.started.is_set():
                free[attempt.gpu_type] = free.get(attempt.gpu_type, 0.0) - attempt.claim.plan.gpu.count
        return free

    def _claim_what_fits(self) -> bool:
        claimed = False
        alive = [n for n in ray.nodes() if n.get("Alive")]  # one GCS call per pass, not one per GPU type
        for gpu_type, free in self._free_gpus().items():
            largest = max((n["Resources"].get(gpu_resource(gpu_type), 0.0) for n in alive), default=0.0)
            if free < 1 or largest < 1:
                continue
            caps = RunnerCapabilities(self.caps.runner_id, gpu_type, int(min(free, largest)), self.sglang_version)
            claim = self.store.claim_next(caps, lease_s=self.settings.lease_s)
            if claim is None:
                continue
            self._note_policy(claim.run_id)
            attempt = ActiveAttempt(claim, gpu_type, threading.Thread(target=lambda c=claim: self._execute_on_node(c),
                                                                      name=f"ray-attempt-{claim.attempt_id}"))
            self.active[claim.attempt_id] = attempt
            attempt.thread.start()
            claimed = True
        return claimed

    def _forget_finished(self) -> None:
        for attempt_id, attempt in list(self.active.items()):
            if not attempt.thread.is_alive():
                del self.active[attempt_id]

    # --- nodes as runner hosts ---------------------------------------------------------------
    def _refresh_nodes(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._nodes_seen_at < NODE_REFRESH_S:
            return
        self._nodes_seen_at = time.monotonic()
        for node in ray.nodes():
            types = {k[len(RESOURCE_PREFIX):]: v for k, v in node.get("Resources", {}).items()
                     if k.startswith(RESOURCE_PREFIX)}
            if not types:
                continue
            gpu_type, count = next(iter(types.items()))
            runner_id = node_runner_id(node)
            alive = bool(node.get("Alive"))
            self.store.register_runner(
                runner_id, host=node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"),
                gpu_type=gpu_type, gpu_count=int(count), sglang_version=self.sglang_version,
                healthy=alive, unhealthy_reason=None if alive else "Ray node is dead",
                info={"executor": "ray", "node_id": node.get("NodeID"), "address": node.get("NodeManagerAddress"),
                      "head_runner": self.caps.runner_id},
            )

    # --- one attempt, on the head ----------------------------------------------------------------
    def _execute_on_node(self, claim: Claim) -> None:
        """The head's side of one attempt: its lease and its ending here, the attempt itself
        in a Ray task on a node."""
        ctx = self.new_context(claim)
        beat = Heartbeat(ctx, self.store, self.caps.runner_id)
        beat.start()
        outcome: tuple[AttemptStatus, FailureKind | None, str | None] = (
            AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "the Ray task ended without a result")
        log_tail: str | None = None
        task = remote_attempt.options(**task_options(claim.plan)).remote(
            claim.attempt_id, claim.run_id, claim.attempt_no, claim.plan.model_dump_json())
        try:
            outcome, log_tail = self._follow(ctx, claim, task)
        except Fenced:
            outcome = (AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "lease lost")
            ray.cancel(task)
        except ray.exceptions.TaskCancelledError:
            outcome = (AttemptStatus.CANCELLED, None, "cancelled")
        except ray.exceptions.RayError as exc:
            outcome = (AttemptStatus.FAILED, FailureKind.RUNNER_LOST, f"Ray node or worker lost: {type(exc).__name__}")
            log.warning("attempt %s: %s", claim.attempt_id, exc)
            node = self.active[claim.attempt_id].node_runner_id
            if node is not None:  # Ray may take a while to call the node dead; this attempt knows now
                self.store.runner_heartbeat(node, healthy=False,
                                            unhealthy_reason=f"Ray node lost during attempt {claim.attempt_id}")
        finally:
            self.active[claim.attempt_id].started.set()
            beat.finish()
            self._finish(ctx, *outcome, log_tail=log_tail)

    def _follow(self, ctx: AttemptContext, claim: Claim, task: Any) -> tuple[
            tuple[AttemptStatus, FailureKind | None, str | None], str | None]:
        """Apply the task's events as they come; cancel it when the attempt must stop."""
        cancelled = False
        while True:
            if not cancelled and (ctx.interrupted() or self.stop.warm.is_set()):
                if self.stop.warm.is_set():
                    ctx.stopped_by_runner = True
                ray.cancel(task)
                cancelled = True
            ready, _ = ray.wait([task], timeout=0.5)
            if not ready:
                continue
            try:
                event = ray.get(next(task))
            except StopIteration:
                raise ray.exceptions.RayError("the task ended without its final event") from None
            if event["kind"] == "end":
                kind = FailureKind(event["failure_kind"]) if event["failure_kind"] else None
                return (AttemptStatus(event["status"]), kind, event["message"]), event.get("log_tail")
            self._apply(ctx, claim, event)

    def _apply(self, ctx: AttemptContext, claim: Claim, event: dict[str, Any]) -> None:
        writer, kind = ctx.writer, event["kind"]
        if kind == "node":
            self.active[claim.attempt_id].node_runner_id = runner_id_for(event["host"], event["node_id"])
            self.active[claim.attempt_id].started.set()
            self._refresh_nodes(force=True)
            writer.audit("placed", {"attempt_id": claim.attempt_id, "host": event["host"],
                                    "node_id": event["node_id"]})
        elif kind == "move":
            ctx.move(AttemptStatus(event["new"]))
        elif kind == "child":
            writer.record_child(ProcessGroup(event["pgid"], event["started_at"], event["role"]))
        elif kind == "startup":
            writer.record_startup(**event["facts"])
        elif kind == "current_point":
            writer.set_current_point(event["key"])
        elif kind == "point":
            writer.insert_point(**event["point"])
            ctx.points_done += 1
        elif kind == "raw_output":
            writer.record_raw_output(event["raw"])
        elif kind == "audit":
            writer.audit(event["action"], event["details"])
        elif kind == "unhealthy":
            log.warning("attempt %s: node reports: %s", claim.attempt_id, event["reason"])


def runner_id_for(host_name: str, node_id: str) -> str:
    return f"ray:{host_name}:{node_id[:8]}"


def node_runner_id(node: dict[str, Any]) -> str:
    return runner_id_for(node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"),
                         str(node.get("NodeID", "")))
