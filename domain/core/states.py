"""Job states and the legal moves between them (shared by the runner, db/ and the pages).

A run is the queued request; an attempt is one runner's try at it.  Every move is one
guarded UPDATE in db/ (``... WHERE id=? AND status=<expected> RETURNING``); the tables
below say which moves exist at all, so an illegal one is refused before any SQL runs.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    CLAIMED = "claimed"
    STARTING = "starting"  # engine server launched, waiting for readiness
    BENCHMARKING = "benchmarking"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FailureKind(StrEnum):
    BAD_ARGS = "bad_args"
    OOM = "oom"
    STARTUP_TIMEOUT = "startup_timeout"
    SERVER_CRASH = "server_crash"
    BENCH_FAILED = "bench_failed"
    BAD_OUTPUT = "bad_output"
    RUNNER_LOST = "runner_lost"
    HOST_UNHEALTHY = "host_unhealthy"
    DISK_FULL = "disk_full"
    # NCCL init or a collective failed (network, peer gone, interconnect): the same arguments
    # may well succeed on a second try, unlike oom and bad_args.
    NCCL = "nccl"


# Failures that a second try cannot fix: the same arguments run out of memory again.
NEVER_RETRIED = frozenset({FailureKind.BAD_ARGS, FailureKind.OOM})

RUN_MOVES: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED}),
    # running -> queued is a retry: a new attempt will claim it.
    RunStatus.RUNNING: frozenset(
        {RunStatus.QUEUED, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

ACTIVE_ATTEMPT = (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
_ENDINGS = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED})

ATTEMPT_MOVES: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    AttemptStatus.CLAIMED: frozenset({AttemptStatus.STARTING, AttemptStatus.FAILED, AttemptStatus.CANCELLED}),
    AttemptStatus.STARTING: frozenset({AttemptStatus.BENCHMARKING, AttemptStatus.FAILED, AttemptStatus.CANCELLED}),
    AttemptStatus.BENCHMARKING: _ENDINGS,
    AttemptStatus.SUCCEEDED: frozenset(),
    AttemptStatus.FAILED: frozenset(),
    AttemptStatus.CANCELLED: frozenset(),
}


def is_legal_run_move(current: RunStatus, new: RunStatus) -> bool:
    return new in RUN_MOVES[current]


def is_legal_attempt_move(current: AttemptStatus, new: AttemptStatus) -> bool:
    return new in ATTEMPT_MOVES[current]
