"""Runs the scheduler in real time inside the server's asyncio loop.

Each step is slept through on an absolute deadline: ``end = start + S·duration`` with
``start`` the previous step's end when steps run back to back.  Waking a little late
therefore does not accumulate (the next step starts on schedule), so the token rate the
client sees is the model's, not the event loop's.  When the loop falls behind by more
than :data:`LAG_TOLERANCE_S` (the CPU, not the model, is setting the pace) the schedule is
reset to *now* and the missed time is added to :attr:`StepLoop.lag_s`, which ``/metrics``
and ``/server_info`` report, so a CPU-bound measurement can be recognised.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from emulator.scheduler import Request, Scheduler, Step

LAG_TOLERANCE_S = 0.02
THROUGHPUT_WINDOW_S = 5.0


class StepLoop:
    def __init__(self, scheduler: Scheduler, time_scale: float) -> None:
        self.scheduler = scheduler
        self.time_scale = time_scale
        self.lag_s = 0.0
        self.late_steps = 0
        self.steps = 0
        self.stalled = False  # fault injection: stop stepping, keep connections open
        # SGLang's tokenizer_manager.last_receive_tstamp: /health_generate counts any output since it began.
        self.last_output_at = time.monotonic()
        self.step_hooks: list[Callable[[Step, float], None]] = []  # metrics, batch log lines
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
            end = start + step.duration_s * self.time_scale
            await asyncio.sleep(max(0.0, end - loop.time()))
            self._finish(step, end)
            free_at = end

    def _finish(self, step: Step, end: float) -> None:
        self.steps += 1
        self.last_output_at = time.monotonic()
        for req in self.scheduler.apply(step, end):
            event = self._events.get(id(req))
            if event is not None:
                event.set()
        for hook in self.step_hooks:
            hook(step, end)
