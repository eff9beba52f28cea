"""A separate process that uses the store like the runner or the UI would.

Run as ``python -m tests.support.db_worker MODE DB_PATH ...``; tests start several of
these at once to exercise the cross-process lock for real.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from db import DbBusy, RunnerCapabilities, Store


def claim_all(db: Path, runner_id: str) -> None:
    """Claim until the queue is empty; print the run ids this process won, as JSON."""
    store = Store(db, lock_timeout_s=60)
    caps = RunnerCapabilities(runner_id, "H200", 8, None)
    won = []
    while (claim := store.claim_next(caps, lease_s=600)) is not None:
        won.append(claim.run_id)
    print(json.dumps(won))


def write_audit(db: Path, count: int) -> None:
    """Runner-like writer: ``count`` short write transactions; print their latencies (ms)."""
    store = Store(db, lock_timeout_s=30)
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        store.audit("writer", "tick", None, {"i": i})
        latencies.append((time.perf_counter() - start) * 1000)
    print(json.dumps(latencies))


def poll_reads(db: Path, seconds: float) -> None:
    """UI-like reader: poll until time is up; print counts of reads, busy answers, errors."""
    store = Store(db, lock_timeout_s=5)
    reads = busy = errors = 0
    deadline = time.monotonic() + seconds
    # Past the deadline, keep going until one read got through (at most a minute): under a
    # loaded host a writer with precedence can hold readers off for the whole window, and
    # what the test needs to know is that they are delayed, not starved.
    hard_deadline = deadline + 60
    while time.monotonic() < deadline or (reads == 0 and time.monotonic() < hard_deadline):
        try:
            store.list_runs(20)
            store.run_counts()
            reads += 1
        except DbBusy:
            busy += 1
        except Exception as exc:  # counted, and reported: the test asserts there are none
            errors += 1
            print(f"reader error: {exc!r}", file=sys.stderr)
    print(json.dumps({"reads": reads, "busy": busy, "errors": errors}))


def hang_in_transaction(db: Path, rows: int) -> None:
    """Insert rows inside an open transaction, say so, then wait to be killed."""
    store = Store(db, lock_timeout_s=30)
    with store._tx() as con:  # the store's own transaction, held open on purpose
        for i in range(rows):
            store._audit(con, "crash", "x", i, {})
        print("inside", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    mode, db_arg, *rest = sys.argv[1:]
    path = Path(db_arg)
    if mode == "claim":
        claim_all(path, rest[0])
    elif mode == "write":
        write_audit(path, int(rest[0]))
    elif mode == "read":
        poll_reads(path, float(rest[0]))
    elif mode == "hang":
        hang_in_transaction(path, int(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")
