"""Driving the real runner daemon as a subprocess, and checking nothing is left behind."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock
import psutil

from db import Store
from db.rows import PointRow, RunnerRow
from domain.core.settings import Settings
from domain.plan.plan_io import plan_from_mapping
from domain.plan.run_plan import RunPlan
from runner.process import port_is_free
from tests.support.app_server import ROOT

MARK = "BENCHDECK_TEST_MARK"


def runner_env(base: dict[str, str], **overrides: str) -> dict[str, str]:
    """Short leases and timeouts, and a mark that every child inherits (to find leftovers)."""
    env = dict(base)
    env.update(
        BENCHDECK_HEARTBEAT_S="0.5", BENCHDECK_LEASE_S="4", BENCHDECK_STOP_GRACE_S="5", BENCHDECK_POLL_S="1",
        BENCHDECK_STARTUP_TIMEOUT_S="60", BENCHDECK_RUNNER_ID=f"test-{uuid.uuid4().hex[:6]}",
        BENCHDECK_TELEMETRY_HZ="4",
    )
    env[MARK] = uuid.uuid4().hex
    env.update(overrides)
    return env


def small_plan(**overrides: object) -> RunPlan:
    data: dict[str, object] = {
        "name": "e2e",
        "engine": "emulator",
        "model": "Qwen/Qwen3-30B-A3B",
        "gpu": {"type": "H200", "count": 1},
        "server_args": {"max-running-requests": 16, "mem-fraction-static": 0.85},
        "benchmark": {
            "scenarios": [{"name": "short", "input_len": 64, "output_len": 32}],
            "concurrency": [1, 2],
            "num_prompts": "3x",
            "warmup": "1x",
        },
    }
    data.update(overrides)
    return plan_from_mapping(data)


def start_runner(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    log = open(Path(env["BENCHDECK_WORK_DIR"]).parent / f"runner-{time.time_ns()}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "work", *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )


def run_burst(env: dict[str, str], timeout: float = 240) -> int:
    proc = start_runner(env, "--burst")
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def attempt_status(store: Store, run_id: int) -> str | None:
    attempts = store.attempts_of(run_id)
    return attempts[-1].status if attempts else None


def leftovers(mark: str) -> list[str]:
    """Processes still alive that inherited this test's mark (server, bench client, runner)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def assert_nothing_left(mark: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(mark) == []


# --- additions for the fault suite (tests/test_faults_*.py) ------------------------------------


def runner_settings(db_path: Path, work_dir: Path, **overrides: object) -> Settings:
    """Settings for a Runner driven in this test process (no subprocess): short leases."""
    values: dict[str, object] = {
        "db": db_path, "work_dir": work_dir, "runner_id": f"inproc-{uuid.uuid4().hex[:6]}", "heartbeat_s": 0.5,
        "lease_s": 4, "stop_grace_s": 5, "poll_s": 0.2, "startup_timeout_s": 60, "max_attempts": 2,
    }
    values.update(overrides)
    return Settings(**values)


def audit_rows(store: Store, action: str) -> list[dict[str, Any]]:
    """Audit rows of one action, oldest first, details parsed (read as an admin)."""
    from tests.support.actors import admin

    rows = store.audit_entries(reader=admin("auditor"), action=action, limit=1000)
    return [{**row.as_dict(), "details": json.loads(row.details or "{}")} for row in reversed(rows)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_pair() -> int:
    """The first of two adjacent free ports below the kernel's ephemeral range (32768 up,
    /proc/sys/net/ipv4/ip_local_port_range), where the other workers' free_port() and their
    outgoing connections cannot take the second one between this check and its use."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20_000, 32_000)
        if port_is_free(first) and port_is_free(first + 1):  # the runner's own check of its range
            return first
    raise RuntimeError("no two adjacent free ports in 20000-32000")


def squat(port: int) -> socket.socket:
    """A listening socket on ``port`` (a process that is not ours holding an engine port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    return sock


def stop_outside_db_lock(pid: int, db_path: Path, tries: int = 50) -> None:
    """SIGSTOP ``pid`` at a moment it does not hold the DB file lock (a runner stopped inside
    an access would block every other process until resumed: not the case under test)."""
    from db.connection import _SERVED_WAITER_GRACE_S, lock_path_for, waiting_path

    lock = filelock.FileLock(str(lock_path_for(db_path)))
    for _ in range(tries):
        # A daemon keeping its connection lets go only for a waiter it can see (db/connection.py),
        # serving, only for one still waiting after a grace: mark one and give it the grace and
        # the hand-over time before stopping it, or it is stopped holding the lock on most
        # tries while its run goes on between them.
        waiting_path(db_path).touch()
        time.sleep(_SERVED_WAITER_GRACE_S + 0.05)
        os.kill(pid, signal.SIGSTOP)
        try:
            lock.acquire(timeout=0.5)
        except filelock.Timeout:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
            continue
        lock.release()
        return
    raise AssertionError("could not stop the runner outside a DB access")


def attempt_points(store: Store, run_id: int, attempt_id: int) -> list[PointRow]:
    return [p for p in store.points_of(run_id) if p.attempt_id == attempt_id]


def runner_row(store: Store, runner_id: str) -> RunnerRow:
    """This runner's row in the runners table (health, reason)."""
    [row] = [r for r in store.list_runners() if r.id == runner_id]
    return row
