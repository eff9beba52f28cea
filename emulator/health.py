"""``/health_generate`` as SGLang 0.5.23 answers it (``http_server.health_generate``).

SGLang sends a one-token request (``HEALTH_CHECK`` rid, ``input_ids=[0]``) to the
scheduler, then checks once a second, for ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (20 by
default), whether the tokenizer manager received *any* output since the check began
(``last_receive_tstamp > tic``): a busy scheduler's output counts without the check's own
request running.  Output in time → 200; none → 503 after the timeout.  Shutting down or
still starting → 503 at once.

Here the step loop's :attr:`~emulator.step_loop.StepLoop.last_output_at` stands for
``last_receive_tstamp``, and an idle, working scheduler stands for the check's own request
finishing in one step.  The stall fault stops the step loop, so the check times out into a
503 while ``/health`` keeps answering 200 (``/health`` here skips the generation check, as
SGLang's does with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0``).
"""

from __future__ import annotations

import asyncio
import os
import time

from emulator.step_loop import StepLoop

TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_TIMEOUT_S = 20
POLL_S = 1.0  # SGLang's handler sleeps one second between looks


def check_timeout_s() -> float:
    """SGLang reads the variable as an int; a fraction is allowed here so tests can be short."""
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)


def _answered_since(step_loop: StepLoop, tic: float) -> bool:
    if step_loop.stalled:
        return False
    # Idle: the check's own one-token request is the next step, and it would finish at once.
    return step_loop.last_output_at > tic or step_loop.scheduler.idle()


async def probe_status(status: str, step_loop: StepLoop) -> int:
    """The HTTP status ``/health_generate`` answers for a server in ``status``."""
    if status in ("Starting", "Draining"):
        return 503
    tic = time.monotonic()
    deadline = tic + check_timeout_s()
    while time.monotonic() < deadline:
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if _answered_since(step_loop, tic):
            return 200
    return 503
