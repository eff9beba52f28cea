"""Waiting for a queued run to end, for commands that queue runs and read their results
(``runner tune``, ``runner max-concurrency``): the runner daemon executes them meanwhile."""

from __future__ import annotations

import time

from db import Store
from db.rows import RunRow
from domain.core.states import RunStatus

FINISHED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class RunVanished(LookupError):
    """The run waited for is no longer in the database."""


def wait_until_finished(store: Store, run_id: int, poll_s: float) -> RunRow:
    """The run once it has succeeded, failed or been cancelled, looked at every ``poll_s``."""
    while True:
        run = store.get_run(run_id)
        if run is None:
            raise RunVanished(f"run {run_id} vanished from the database")
        if run.status in FINISHED:
            return run
        time.sleep(poll_s)
