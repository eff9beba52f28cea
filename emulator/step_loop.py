"""Runs the scheduler in real time inside the server's asyncio loop.

Each step is slept through on an absolute deadline: ``end = start + S·duration`` with
``start`` the previous step's end when steps run back to back.  Waking a little late
therefore does not accumulate (the next step starts on schedule), so the token rate the
client sees is the model's, not the event loop's.  When the loop falls behind by more
than :data:`LAG_TOLERANCE_S` (the CPU, not the model, is setting the pace) the schedule is
reset to *now* and the missed time is added to :attr:`StepLoop.lag_s`, which ``/metrics``
and ``/server_info`` report, so a CPU-bound measurement can be recognised.

An emulated cold start (:class:`ColdStart`, off by default, ``--emulate-cold-start-s``)
stretches the first forward steps after launch: a fresh SGLang server compiles kernels
lazily (Triton/JIT) and warms graphs and caches on its first batches, so the first requests
it serves run several times slower than the same requests later.  The predictor
(:mod:`emulator.predict`) models the warm server only; a cold start is a live effect.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.scheduler import Request, Scheduler, Step

LAG_TOLERANCE_S = 0.02
THROUGHPUT_WINDOW_S = 5.0
# How much slower a cold server's first steps run, unless told: an order of magnitude, the
# size of the slowdown of the cold first point in tests/fixtures/cold_first_point/README.md.
DEFAULT_COLD_FACTOR = 10.0


@dataclass
class ColdStart:
    """The first ``seconds`` of forward-step wall time run ``factor`` times slower.

    Only time spent stepping counts (an idle server compiles nothing), so the cold phase
    ends after ``seconds`` of serving however long the server waited for its first request.
    A step that straddles the end is slow for its cold part and warm for the rest."""

    seconds: float
    factor: float = DEFAULT_COLD_FACTOR
    spent_s: float = 0.0  # wall seconds of cold stepping so far
    slowed_steps: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds >= 0 and math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"a cold start needs seconds ≥ 0 and factor ≥ 1, got {self.seconds}, {self.factor}")

    @property
    def over(self) -> bool:
        return self.spent_s >= self.seconds

    def stretch(self, warm_s: float) -> float:
        """Wall seconds a step that takes ``warm_s`` on a warm server takes now."""
        left = self.seconds - self.spent_s
        if left <= 0 or warm_s <= 0:
            return warm_s
        self.slowed_steps += 1
        cold_s = warm_s * self.factor
        if cold_s <= left:
            self.spent_s += cold_s
            return cold_s
        self.spent_s = self.seconds
        return left + (warm_s - left / self.factor)  # the cold part's work, then the rest warm

    def as_dict(self) -> dict[str, Any]:
        """For ``/server_info``: what is emulated and how far it has gone."""
        return {"seconds": self.seconds, "factor": self.factor, "spent_s": round(self.spent_s, 3),
                "slowed_steps": self.slowed_steps, "over": self.over}


class StepLoop:
    def __init__(self, scheduler: Scheduler, time_scale: float, cold: ColdStart | None = None) -> None:
        self.scheduler = scheduler
        self.time_scale = time_scale
        self.cold = cold  # None: a warm server from its first request (the default)
        self.lag_s = 0.0
        self.late_steps = 0
        self.steps = 0
        self.stalled = False  # fault injection: stop stepping, keep connections open
        # SGLang's tokenizer_manager.last_receive_tstamp: /health_generate counts any output since it began.
        self.last_output_at = time.monotonic()
        self.step_hooks: list[Callable[[Step, float], None]] = []  # metrics, batch log lines
        # Called with the requests that just got a token streamed (a prefill's first token may
        # stream a step later than the step that made it: emulator/scheduler.py).
        self.token_hooks: list[Callable[[list[Request]], None]] = []
        self._wake = asyncio.Event()
        self._events: dict[int, asyncio.Event] = {}
        self._gen_marks: deque[tuple[float, int]] = deque()

    # -- requests ----------------------------------------------------------------------------
    def submit(self, req: Request) -> asyncio.Event:
        event = asyncio.Event()
        self._events[id(req)] = event
        self.scheduler.enqueue(req)
        self._wake.set()
        return event

    def release(self, req: Request) -> None:
        """The handler is done with ``req`` (finished, or its client went away)."""
        self._events.pop(id(req), None)
        if not req.finished:
            self.scheduler.abort(req)

    def abort_all(self) -> None:
        """The engine died (vLLM personality): stop stepping, end every request as aborted and
        wake its handler."""
        self.stalled = True
        for req in [*self.scheduler.waiting, *self.scheduler.running]:
            self.scheduler.abort(req)
        for event in self._events.values():
            event.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.scheduler.idle():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- stats -------------------------------------------------------------------------------
    def gen_throughput(self) -> float:
        """Generated tokens per wall second over the last few seconds."""
        now = time.monotonic()
        tokens = self.scheduler.counters.generation_tokens
        self._gen_marks.append((now, tokens))
        while len(self._gen_marks) > 2 and now - self._gen_marks[0][0] > THROUGHPUT_WINDOW_S:
            self._gen_marks.popleft()
        t0, n0 = self._gen_marks[0]
        return (tokens - n0) / (now - t0) if now > t0 else 0.0

    # -- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        free_at: float | None = None  # when the device finished its last step, if busy since
        while True:
            step = None if self.stalled else self.scheduler.plan()
            self._wake_streams(self.scheduler.pop_released())
            if step is None:
                free_at = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = loop.time()
            start = now if free_at is None else free_at
            if free_at is not None and now - free_at > LAG_TOLERANCE_S:
                self.lag_s += now - free_at
                self.late_steps += 1
                start = now
            for req, _ in step.chunks:
                if req.admitted_at is None:
                    req.admitted_at = start
            end = start + self.wall_s(step)
            await asyncio.sleep(max(0.0, end - loop.time()))
            self._finish(step, end)
            free_at = end

    def _wake_streams(self, emitted: list[Request]) -> None:
        for req in emitted:
            event = self._events.get(id(req))
            if event is not None:
                event.set()
        if emitted:
            for hook in self.token_hooks:
                hook(emitted)

    def wall_s(self, step: Step) -> float:
        """Wall seconds ``step`` takes: its device time × the time scale, stretched while cold."""
        warm = step.duration_s * self.time_scale
        return warm if self.cold is None else self.cold.stretch(warm)

    def _finish(self, step: Step, end: float) -> None:
        self.steps += 1
        self.last_output_at = time.monotonic()
        self._wake_streams(self.scheduler.apply(step, end))
        for hook in self.step_hooks:
            hook(step, end)
