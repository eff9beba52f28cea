"""An attempt's lease, from the runner's side: the heartbeat that keeps it, the fence that
ends it, the fenced writer, and the stop state a signal sets.

A claim gives the runner a lease on the attempt, renewed by the heartbeat.  Once it lapses,
lease expiry ends the attempt elsewhere and the Store refuses this runner's writes for it;
``StoreWriter`` turns such a refusal into ``Fenced``, so the attempt stops writing at once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from db import LostRace, Store
from db.quality_store import QualityStore, quality_reference
from db.store import ProcessGroup
from domain.core.settings import Settings
from domain.core.states import AttemptStatus
from domain.plan.run_plan import RunPlan

log = logging.getLogger("benchdeck.runner")


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


class LeasedAttempt(Protocol):
    """What the heartbeat reads and sets on an attempt (runner.attempt.AttemptContext)."""

    attempt_id: int
    run_id: int
    settings: Settings
    fenced: threading.Event
    cancel: threading.Event


class Heartbeat(threading.Thread):
    """Renews the lease every ``heartbeat_s``; sets ``fenced`` if it was lost and
    ``cancel`` when the user asked to cancel the run."""

    def __init__(self, ctx: LeasedAttempt, store: Store, runner_id: str):
        super().__init__(daemon=True, name="heartbeat")
        self.ctx, self.store, self.runner_id = ctx, store, runner_id
        self._done = threading.Event()

    def run(self) -> None:
        ctx, settings = self.ctx, self.ctx.settings
        while not self._done.wait(settings.heartbeat_s):
            try:
                if not self.store.heartbeat(ctx.attempt_id, self.runner_id, lease_s=settings.lease_s):
                    ctx.fenced.set()
                    return
                if self.store.cancel_requested_by(ctx.run_id):
                    ctx.cancel.set()
            except Exception:  # a busy DB delays one beat; the lease covers several
                log.exception("heartbeat failed")

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=10)


@dataclass
class StoreWriter:
    """An attempt's writes into the Store, fenced: a write the Store refuses (the lease is
    gone) raises ``Fenced`` and the attempt stops writing at once."""

    store: Store
    attempt_id: int
    run_id: int
    runner_id: str

    def move(self, current: AttemptStatus, new: AttemptStatus) -> None:
        try:
            self.store.move_attempt(self.attempt_id, self.runner_id, current, new)
        except LostRace as exc:
            raise Fenced(str(exc)) from exc

    def record_child(self, group: ProcessGroup) -> None:
        if not self.store.record_child(self.attempt_id, self.runner_id, group):
            raise Fenced("lease lost while launching")

    def record_startup(self, **facts: Any) -> None:
        if not self.store.record_startup(self.attempt_id, self.runner_id, **facts):
            raise Fenced("lease lost during start-up")

    def set_current_point(self, key: str) -> None:
        if not self.store.set_current_point(self.attempt_id, self.runner_id, key):
            raise Fenced("lease lost")

    def insert_point(self, **point: Any) -> None:
        if self.store.insert_point(self.attempt_id, self.runner_id, **point) is None:
            raise Fenced("late write refused: the attempt is no longer ours")

    def record_raw_output(self, raw: str) -> None:
        self.store.record_raw_output(self.attempt_id, self.runner_id, raw)

    def audit(self, action: str, details: dict[str, Any]) -> None:
        self.store.audit(self.runner_id, action, self.run_id, details)

    def cancel_requested(self) -> bool:
        return bool(self.store.cancel_requested_by(self.run_id))

    def record_quality(self, record: dict[str, Any]) -> None:
        if not QualityStore(self.store).record_probe(self.attempt_id, self.runner_id, record):
            raise Fenced("late write refused: the attempt is no longer ours")

    def quality_reference(self, plan: RunPlan) -> tuple[int, dict[str, Any]] | None:
        return quality_reference(QualityStore(self.store), self.run_id, plan)
