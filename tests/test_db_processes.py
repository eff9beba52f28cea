"""The store shared by real processes: claim races, a polling UI beside a writer, a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from domain.plan.quotas import Quotas
from tests.conftest import ROOT
from tests.plans import minimal_plan
from tests.support.actors import admin, operator


def _worker(mode: str, db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.db_worker", mode, str(db), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


@pytest.mark.slow
def test_eight_processes_racing_for_200_runs_claim_each_exactly_once(db_path: Path) -> None:
    store = Store(db_path, quotas=Quotas(queued_runs_per_user=1000))  # one user queues all 200 here
    store.migrate()
    plan = minimal_plan()
    for i in range(200):
        store.submit_run(plan, submitted_by=operator("a"), idempotency_key=f"k{i}")
    workers = [_worker("claim", db_path, f"r{i}") for i in range(8)]
    won = [json.loads(_finish(w)) for w in workers]
    claimed = [run_id for ids in won for run_id in ids]
    assert sorted(claimed) == list(range(1, 201))  # every run once, none twice
    for run_id in (1, 100, 200):
        assert len(store.attempts_of(run_id)) == 1
    assert sum(1 for ids in won if ids) >= 2, "the race should have more than one winner"


@pytest.mark.slow
def test_ui_reader_and_runner_writer_hammering_the_lock(store: Store, db_path: Path) -> None:
    writes = 150
    readers = [_worker("read", db_path, "6") for _ in range(2)]
    writer = _worker("write", db_path, str(writes))
    latencies = json.loads(_finish(writer))
    stats = [json.loads(_finish(r)) for r in readers]
    assert all(s["errors"] == 0 for s in stats), stats  # nothing but "busy" may reach a reader
    assert all(s["reads"] > 0 for s in stats)
    assert len(latencies) == writes
    ticks = [e for e in store.audit_entries(reader=admin(), limit=1000) if e.action == "tick"]
    assert len(ticks) == writes  # no write lost


def test_kill_9_mid_transaction_leaves_nothing_behind(store: Store, db_path: Path) -> None:
    store.audit("before", "kept", None, {})
    proc = _worker("hang", db_path, "500")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    actions = [e.action for e in store.audit_entries(reader=admin(), limit=1000)]
    assert actions == ["kept"]  # the committed row survives; the killed transaction is wholly absent
