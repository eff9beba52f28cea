"""Fault suite, bad input (docs/fault-suite.md, cases 15-18, 20, 21): hostile values are refused
by the checks the form and the CLI run AND again by the runner before anything is launched;
quotas; cancel in every state; double submit.  docs/fault-suite.md maps every case to its test.

Already covered elsewhere and not repeated here:
- the validator's verdict per value: tests/test_flags_validate.py (test_bad_numbers_are_rejected,
  test_forbidden_flags_and_values_are_refused, test_unsafe_strings_are_rejected,
  test_port_99999_is_refused, test_unknown_flags_get_the_nearest_real_flags),
  tests/test_flags_policy.py (model references: '..', symlink escape, absolute paths);
- argv rendering never goes through a shell: tests/test_flags_argv.py;
- submit with one idempotency key twice, quotas with small limits: tests/test_store.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from db import LostRace, Store
from domain.core.settings import Settings
from domain.core.states import AttemptStatus, RunStatus
from domain.plan.checks import check_plan
from domain.plan.plan_io import PlanError, plan_from_mapping
from domain.plan.quotas import QuotaExceeded, Quotas
from domain.plan.run_plan import MAX_PROMPTS_PER_POINT
from runner.daemon import Runner
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML, minimal_plan
from tests.support.actors import admin, operator
from tests.support.runner_harness import audit_rows, runner_settings


@dataclass(frozen=True)
class Hostile:
    name: str
    server_args: dict[str, Any]
    model: str = "Qwen/Qwen3-30B-A3B"
    expect: str = ""  # a fragment of the runner's refusal message


# Values the plan model accepts (so they can reach the queue), the flag checks must not.
HOSTILE = [
    Hostile("tp-abc", {"tp-size": "abc"}, expect="--tp-size"),
    Hostile("tp-minus-one", {"tp-size": -1}, expect="--tp-size"),
    Hostile("port-99999", {"port": 99999}, expect="--port"),
    Hostile("nan-text", {"mem-fraction-static": "NaN"}, expect="--mem-fraction-static"),
    Hostile("fullwidth-digit", {"max-running-requests": "８"}, expect="--max-running-requests"),
    Hostile("shell-semicolon", {"served-model-name": "; rm -rf /"}, expect="--served-model-name"),
    Hostile("shell-subst", {"served-model-name": "$(id)"}, expect="--served-model-name"),
    Hostile("trust-remote-code", {"trust-remote-code": True}, expect="--trust-remote-code"),
    Hostile("host-any", {"host": "0.0.0.0"}, expect="--host"),  # noqa: S104 - the value under test
    Hostile("unknown-flag", {"foo": 1}, expect="--foo"),
    Hostile("model-dot-dot", {}, model="../../etc", expect="model"),
    Hostile("model-absolute-outside", {}, model="/etc", expect="model"),
    Hostile("model-symlink-escape", {}, model="<models>/innocent", expect="model"),
]


def _model(h: Hostile, models: Path) -> str:
    return h.model.replace("<models>", str(models))


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Settings, dict[str, int], Path]]:
    """Every hostile plan queued straight into the store (as a tampered client or an old
    version could), then one in-process runner pass over the whole queue."""
    root = tmp_path_factory.mktemp("hostile")
    models = root / "models"
    models.mkdir()
    secret = root / "secret"
    secret.mkdir()
    os.symlink(secret, models / "innocent")
    settings = runner_settings(root / "db.duckdb", root / "runs", model_dirs=[models])
    store = Store(settings.db, quotas=Quotas(queued_runs_per_user=100))
    store.migrate()
    ids = {}
    for h in HOSTILE:
        plan = minimal_plan(name=h.name, model=_model(h, models), server_args=h.server_args)
        ids[h.name], _ = store.submit_run(plan, submitted_by=operator("mallory"))
    runner = Runner(settings, store)
    assert runner.work(burst=True) == 0
    yield store, settings, ids, models


@pytest.mark.parametrize("case", HOSTILE, ids=lambda h: h.name)
def test_hostile_values_are_refused_by_the_checks_the_form_and_cli_run(
    case: Hostile, refused: tuple[Store, Settings, dict[str, int], Path]
) -> None:
    _, settings, _, models = refused
    plan = minimal_plan(name=case.name, model=_model(case, models), server_args=case.server_args)
    report = check_plan(plan, settings, "en")
    assert not report.ok and report.errors


@pytest.mark.parametrize("case", HOSTILE, ids=lambda h: h.name)
def test_hostile_values_are_refused_again_by_the_runner_before_launch(
    case: Hostile, refused: tuple[Store, Settings, dict[str, int], Path]
) -> None:
    store, settings, ids, _ = refused
    run_id = ids[case.name]
    [attempt] = store.attempts_of(run_id)  # bad_args is never retried
    assert (attempt.status, attempt.failure_kind) == ("failed", "bad_args")
    assert case.expect in attempt.message
    assert store.get_run(run_id).status == "failed"
    # Nothing was launched: no argv recorded, no process group, no launch audit row, no server log.
    assert attempt.server_argv is None and json.loads(attempt.pgids or "[]") == []
    assert [r for r in audit_rows(store, "launch") if r["run_id"] == run_id] == []
    assert not (settings.work_dir / f"attempt-{attempt.id}" / "server.log").exists()
    assert store.points_of(run_id) == []


def test_the_runner_stays_healthy_after_refusing_bad_input(
    refused: tuple[Store, Settings, dict[str, int], Path]
) -> None:
    store, settings, _, _ = refused
    [row] = [r for r in store.list_runners() if r.id == settings.runner_id]
    assert row.healthy is True  # bad input is the plan's fault, not the host's


def test_nan_as_a_float_never_reaches_the_queue() -> None:
    """A float NaN is refused by the plan model itself (the text "NaN" above by the flag checks)."""
    with pytest.raises(PlanError) as err:
        minimal_plan(server_args={"mem-fraction-static": float("nan")})
    assert "mem-fraction-static" in str(err.value)


# --- quotas (case 18) ---------------------------------------------------------------------------


def test_a_billion_prompts_is_refused_by_the_plan_before_any_quota() -> None:
    data = dict(json.loads(json.dumps(minimal_plan().model_dump(mode="json"))))
    data["benchmark"]["num_prompts"] = 10**9
    with pytest.raises(PlanError) as err:
        plan_from_mapping(data)
    assert "num_prompts" in str(err.value)


def test_prompts_within_the_plan_limit_but_over_the_quota_are_refused_at_submit(store: Store) -> None:
    prompts = min(MAX_PROMPTS_PER_POINT, Quotas().prompts_per_point + 1)
    plan = minimal_plan(benchmark={"concurrency": [1], "num_prompts": prompts})
    with pytest.raises(QuotaExceeded) as err:
        store.submit_run(plan, submitted_by=operator("greedy"))
    assert err.value.key == "prompts" and str(prompts) in err.value.text("en")
    assert store.list_runs() == []


def test_one_user_flooding_the_queue_hits_the_default_quota(store: Store) -> None:
    limit = Quotas().queued_runs_per_user
    accepted = refused = 0
    for i in range(limit + 10):
        try:
            store.submit_run(minimal_plan(name=f"flood-{i}"), submitted_by=operator("flooder"))
            accepted += 1
        except QuotaExceeded as exc:
            assert exc.key == "queued"
            refused += 1
    assert (accepted, refused) == (limit, 10)
    store.submit_run(minimal_plan(name="other"), submitted_by=operator("someone-else"))  # per user
    assert len(store.list_runs(limit=1000)) == limit + 1


# --- cancel in every state (case 20) ----------------------------------------------------------------
# queued: tests/test_store.py::test_cancel_queued_and_running;
# starting, benchmarking: tests/test_runner_e2e.py::test_cancel_while_starting,
# ::test_cancel_while_benchmarking_stops_the_sweep.


def test_cancel_between_claim_and_launch_starts_nothing(tmp_path: Path) -> None:
    settings = runner_settings(tmp_path / "db.duckdb", tmp_path / "runs")
    store = Store(settings.db)
    store.migrate()
    runner = Runner(settings, store)
    runner.start()
    run_id, _ = store.submit_run(minimal_plan(), submitted_by=operator("alice"))
    claim = store.claim_next(runner.caps, lease_s=settings.lease_s)
    assert claim is not None and store.attempts_of(run_id)[0].status == "claimed"
    assert store.cancel_run(run_id, actor=admin("bob")) is RunStatus.RUNNING  # asks the runner
    runner.execute(claim)
    [attempt] = store.attempts_of(run_id)
    assert attempt.status == "cancelled" and "before launch" in attempt.message
    assert store.get_run(run_id).status == "cancelled"
    assert attempt.server_argv is None and audit_rows(store, "launch") == []
    [cancel] = audit_rows(store, "cancel")
    assert cancel["actor"] == "bob" and cancel["run_id"] == run_id  # the audit row names the user


def _finish(store: Store, run_id: int, outcome: AttemptStatus) -> None:
    from db import RunnerCapabilities
    from domain.core.states import FailureKind

    claim = store.claim_next(RunnerCapabilities("r", "H200", 8, None), lease_s=60)
    assert claim is not None and claim.run_id == run_id
    kind = FailureKind.BAD_ARGS if outcome is AttemptStatus.FAILED else None
    store.finish_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, outcome, failure_kind=kind)


@pytest.mark.parametrize("final", ["succeeded", "failed", "cancelled"])
def test_cancel_of_a_finished_run_is_refused_and_changes_nothing(store: Store, final: str) -> None:
    run_id, _ = store.submit_run(minimal_plan(), submitted_by=operator("alice"))
    if final == "cancelled":
        store.cancel_run(run_id, actor=operator("alice"))
    else:
        if final == "succeeded":
            from db import RunnerCapabilities

            claim = store.claim_next(RunnerCapabilities("r", "H200", 8, None), lease_s=60)
            assert claim is not None
            store.move_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
            store.move_attempt(claim.attempt_id, "r", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
            store.finish_attempt(claim.attempt_id, "r", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
        else:
            _finish(store, run_id, AttemptStatus.FAILED)
    before = store.get_run(run_id)
    cancels = len(audit_rows(store, "cancel"))
    with pytest.raises(LostRace):
        store.cancel_run(run_id, actor=admin("bob"))
    after = store.get_run(run_id)
    assert after.status == before.status == final
    assert after.cancel_requested_by == before.cancel_requested_by
    assert len(audit_rows(store, "cancel")) == cancels  # a refused cancel leaves no audit row


# --- double submit (case 21) --------------------------------------------------------------------------


def test_two_cli_submits_with_one_key_at_the_same_moment_queue_one_run(
    env: dict[str, str], tmp_path: Path, store: Store
) -> None:
    """A double click that reaches the server twice, as two processes racing."""
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(MINIMAL_PLAN_YAML, encoding="utf-8")
    argv = [sys.executable, "-m", "runner", "submit", str(plan_file), "--idempotency-key", "click-1"]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert len(store.list_runs()) == 1
    assert len(audit_rows(store, "submit")) == 1
