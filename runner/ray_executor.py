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
  (``ray:<host>:<node id>``) with its GPUs, and its health follows Ray's view of it, except
  that a node an attempt found lost stays unhealthy while Ray still lists it alive.
- **SGLang per node.** Each node reports its own interpreter and SGLang version
  (runner/ray_nodes.py); the head claims for one node at a time with that node's GPUs and
  version, pins the task to it, and the attempt there launches and validates flags with
  the node's version (the one recorded with the attempt).
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
from domain.plan.naming import slug
from domain.plan.run_plan import RunPlan
from runner import host, server_process
from runner.attempt import AttemptContext, AttemptExecution, HostState
from runner.bench_client import BenchCancelled
from runner.daemon import Runner
from runner.lease import Fenced, Heartbeat, StopState
from runner.ray_nodes import RESOURCE_PREFIX, NodeReports, Offer, free_by_node, gpu_types, offers, pinned_to
from runner.telemetry import open_nvml

log = logging.getLogger("benchdeck.ray")
REMOTE_ROLE_PREFIX = "ray:"  # process groups on a Ray node: not the head's to reap
NODE_REFRESH_S = 10.0


def gpu_resource(gpu_type: str) -> str:
    return f"{RESOURCE_PREFIX}{gpu_type}"


def task_options(plan: RunPlan, node_id: str | None = None) -> dict[str, Any]:
    """The task's resources; with ``node_id``, pinned to the node the head claimed it for."""
    pinned = {"scheduling_strategy": pinned_to(node_id)} if node_id is not None else {}
    return {
        **pinned,
        "resources": {gpu_resource(plan.gpu.type): float(plan.gpu.count)},
        "num_gpus": 0 if plan.emulated or plan.is_external else plan.gpu.count,
        "num_cpus": 1,
        "max_retries": 0,  # retry is the runner's own policy
        "retry_exceptions": False,
        "num_returns": "streaming",
        "name": f"benchdeck-run-{slug(plan.name, 'plan')}",  # Ray task names: ASCII only
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

    def record_quality(self, record: dict[str, Any]) -> None:
        self._put("quality", record=record)

    def quality_reference(self, plan: RunPlan) -> tuple[int, dict[str, Any]] | None:
        return None  # a node has no DB: its probe scores no reference teacher-forced


def _outcome(execution: AttemptExecution) -> tuple[str, str | None, str | None]:
    try:
        execution.run()
        return str(AttemptStatus.SUCCEEDED), None, execution.ctx.sla_stop
    except server_process.AttemptCancelled as exc:
        return str(AttemptStatus.CANCELLED), None, str(exc)
    except BenchCancelled:
        return str(AttemptStatus.CANCELLED), None, "cancelled during a point"
    except server_process.AttemptFailure as exc:
        return str(AttemptStatus.FAILED), str(exc.kind), f"{exc} — {exc.hint}" if exc.hint else str(exc)
    except Exception as exc:  # a bug on the node: the run fails, the daemon carries on
        log.exception("attempt failed on the node")
        return str(AttemptStatus.FAILED), str(FailureKind.RUNNER_LOST), f"node error: {exc!r}"


def run_on_node(attempt_id: int, run_id: int, attempt_no: int, plan_json: str, sglang_version: str | None = None,
                installed: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The task body: the attempt in a thread of its own (it is the parent of every child,
    for the lifeline), its writes streamed back as they happen.  ``sglang_version`` and
    ``installed`` (its extracted schema) are what this node reported (runner/ray_nodes.py)."""
    settings = Settings()  # this node's own BENCHDECK_* environment
    hostname = socket.gethostname()
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    stop = StopState()
    ctx = AttemptContext(attempt_id, run_id, attempt_no, RunPlan.model_validate_json(plan_json), settings,
                         StreamWriter(events, hostname), stop, die_with_parent=True, hostname=hostname)
    nvml, nvml_reason = open_nvml()
    execution = AttemptExecution(
        ctx, nvml, nvml_reason, host.host_info(nvml, nvml_reason), sglang_version,
        load_policy(settings.flag_policy_file), None,
        HostState(mark_unhealthy=lambda reason: events.put({"kind": "unhealthy", "reason": reason}),
                  stuck_port=lambda port: None),
        installed_schema=installed,
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
    node_id: str | None = None  # the Ray node it was claimed for (and pinned to)


class RayRunner(Runner):
    """The runner with Ray: the same start-up, lease and endings as ``Runner``, another
    claim loop.  Each pass claims for every GPU type the cluster has free; one thread per
    active attempt follows its task and applies its events."""

    def __init__(self, settings: Settings, store: Store | None = None):
        super().__init__(settings, store)
        self.active: dict[int, ActiveAttempt] = {}
        self._nodes_seen_at = 0.0
        self.reports = NodeReports()
        self._schemas_stored: set[str] = set()  # nodes whose installed schema is in the DB
        # Node runner ids an attempt found lost (RayError), with the reason: unhealthy from
        # then on, whatever Ray still lists (it may take a while to call the node dead).
        self._lost_nodes: dict[str, str] = {}

    # --- loop -----------------------------------------------------------------------------
    def claim_loop(self, *, burst: bool) -> int:
        """Passes until a stop and every active attempt has ended (with ``burst``: until a
        pass claims nothing and none is active)."""
        if not ray.is_initialized():
            ray.init(address=self.settings.ray_address or "auto", logging_level=logging.WARNING, log_to_driver=False)
        while True:
            claimed = self.run_once()
            self.watch_pass()  # watched configurations follow the head's SGLang version only
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

    def _free_by_node(self) -> dict[str, dict[str, float]]:
        """Free benchdeck GPUs per alive node and type, less what runs claimed for a node but
        not yet placed there will take."""
        free = free_by_node()
        for attempt in self.active.values():
            if not attempt.started.is_set() and attempt.node_id in free:
                left = free[attempt.node_id]
                left[attempt.gpu_type] = left.get(attempt.gpu_type, 0.0) - attempt.claim.plan.gpu.count
        return free

    def _claim_what_fits(self) -> bool:
        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and gpu_types(n.get("Resources", {}))]
        if self.reports.refresh(alive):
            self._refresh_nodes(force=True)  # a node's new report shows in the runners table now
        claimed = False
        free = {node_id: gpus for node_id, gpus in self._free_by_node().items() if node_id in alive}
        for offer in offers(free, self.reports.version_of):
            caps = RunnerCapabilities(self.caps.runner_id, offer.gpu_type, offer.gpu_count, offer.sglang_version)
            claim = self.store.claim_next(caps, lease_s=self.settings.lease_s)
            if claim is not None:
                self._start_attempt(claim, offer)
                claimed = True
        return claimed

    def _start_attempt(self, claim: Claim, offer: Offer) -> None:
        self._note_policy(claim.run_id)
        attempt = ActiveAttempt(claim, offer.gpu_type,
                                threading.Thread(target=lambda: self._execute_on_node(claim, offer),
                                                 name=f"ray-attempt-{claim.attempt_id}"),
                                node_id=offer.node_id)
        self.active[claim.attempt_id] = attempt
        attempt.thread.start()

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
            types = gpu_types(node.get("Resources", {}))
            if not types:
                continue
            gpu_type, count = next(iter(types.items()))
            node_id, alive = str(node.get("NodeID", "")), bool(node.get("Alive"))
            host_name = node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?")
            report = self.reports.reports.get(node_id)
            runner_id = node_runner_id(node)
            lost = self._lost_nodes.get(runner_id)
            self.store.register_runner(
                runner_id, host=host_name, gpu_type=gpu_type, gpu_count=int(count),
                sglang_version=self.reports.version_of(node_id), healthy=alive and lost is None,
                unhealthy_reason="Ray node is dead" if not alive else lost,
                info={"executor": "ray", "node_id": node_id, "address": node.get("NodeManagerAddress"),
                      "head_runner": self.caps.runner_id, "reported": report is not None,
                      "sglang_python": report.sglang_python if report else None,
                      "sglang_error": report.error if report else None},
            )
            self._store_node_schema(node_id, host_name)

    def _store_node_schema(self, node_id: str, host_name: str) -> None:
        """The node's installed schema in the DB once, as a local runner stores its own at start-up."""
        version, schema = self.reports.version_of(node_id), self.reports.schema_of(node_id)
        if version is None or schema is None or node_id in self._schemas_stored:
            return
        self.store.store_schema(version, host_name, schema)
        self._schemas_stored.add(node_id)

    # --- one attempt, on the head ----------------------------------------------------------------
    def _execute_on_node(self, claim: Claim, offer: Offer) -> None:
        """The head's side of one attempt: its lease and its ending here, the attempt itself
        in a Ray task on the node it was claimed for, with that node's SGLang version."""
        ctx = self.new_context(claim)
        beat = Heartbeat(ctx, self.store, self.caps.runner_id)
        beat.start()
        outcome: tuple[AttemptStatus, FailureKind | None, str | None] = (
            AttemptStatus.FAILED, FailureKind.RUNNER_LOST, "the Ray task ended without a result")
        log_tail: str | None = None
        task = remote_attempt.options(**task_options(claim.plan, offer.node_id)).remote(
            claim.attempt_id, claim.run_id, claim.attempt_no, claim.plan.model_dump_json(), offer.sglang_version,
            self.reports.schema_of(offer.node_id))
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
                self._lost_nodes[node] = f"Ray node lost during attempt {claim.attempt_id}"
                self.store.runner_heartbeat(node, healthy=False, unhealthy_reason=self._lost_nodes[node])
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
        elif kind == "quality":
            writer.record_quality(event["record"])
        elif kind == "audit":
            writer.audit(event["action"], event["details"])
        elif kind == "unhealthy":
            log.warning("attempt %s: node reports: %s", claim.attempt_id, event["reason"])


def runner_id_for(host_name: str, node_id: str) -> str:
    return f"ray:{host_name}:{node_id[:8]}"


def node_runner_id(node: dict[str, Any]) -> str:
    return runner_id_for(node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"),
                         str(node.get("NodeID", "")))
