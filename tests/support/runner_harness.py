"""Driving the real runner daemon as a subprocess, and checking nothing is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil

from db import Store
from domain.plan import RunPlan
from domain.plan_io import plan_from_mapping
from tests.support.app_server import ROOT

MARK = "BENCHDECK_TEST_MARK"


def runner_env(base: dict[str, str], **overrides: str) -> dict[str, str]:
    """Short leases and timeouts, and a mark that every child inherits (to find leftovers)."""
    env = dict(base)
    env.update(
        BENCHDECK_HEARTBEAT_S="0.5", BENCHDECK_LEASE_S="4", BENCHDECK_STOP_GRACE_S="5", BENCHDECK_POLL_S="0.2",
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
    return attempts[-1]["status"] if attempts else None


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
