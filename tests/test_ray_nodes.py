"""Each Ray node reports its own SGLang; the head claims for a node whose version and GPUs
match and runs the attempt there with that version (runner/ray_nodes.py,
runner/ray_executor.py).  No Ray cluster: node lists, free GPUs and reports are faked."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any, cast

import pytest
import ray

from db import Store
from db.store import Claim
from domain.core.settings import Settings
from domain.core.states import AttemptStatus, FailureKind
from runner import ray_executor
from runner.attempt import AttemptExecution
from runner.ray_executor import RayRunner, task_options
from runner.ray_nodes import NodeReport, NodeReports, Offer, offers, report_this_node
from tests.plans import minimal_plan
from tests.support.actors import operator

SCHEMA_0523 = {"sglang_version": "0.5.23", "args": []}
N1, N2, N3, N4 = (f"{i:02x}" * 28 for i in range(1, 5))  # Ray node ids are 28 bytes of hex


class FakeReports(NodeReports):
    """Reports that are already in, as if every node had answered."""

    def __init__(self, reports: dict[str, NodeReport]):
        super().__init__(submit=lambda node_id: node_id, poll=lambda ref: reports.get(ref))


def _node(node_id: str, gpu_type: str = "H200", count: float = 2.0) -> dict[str, Any]:
    return {"NodeID": node_id, "Alive": True, "NodeManagerHostname": f"host-{node_id}",
            "NodeManagerAddress": "127.0.0.1", "Resources": {f"benchdeck_gpu:{gpu_type}": count}}


# --- the node's own report ----------------------------------------------------------------------


def _fake_interpreter(tmp_path: Path, body: str) -> Path:
    """An 'interpreter' that ignores the dump script and answers as SGLang's would."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_node_without_sglang_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCHDECK_SGLANG_PYTHON", raising=False)
    assert report_this_node() == NodeReport(None, None)


def test_a_node_reports_its_interpreter_and_the_version_installed_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _fake_interpreter(tmp_path, f"echo '{json.dumps(SCHEMA_0523)}'")
    monkeypatch.setenv("BENCHDECK_SGLANG_PYTHON", str(python))
    report = report_this_node()
    assert (report.sglang_python, report.sglang_version, report.schema) == (str(python), "0.5.23", SCHEMA_0523)


def test_an_unusable_interpreter_reports_why_and_no_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHDECK_SGLANG_PYTHON", str(_fake_interpreter(tmp_path, "echo boom >&2; exit 1")))
    report = report_this_node()
    assert report.sglang_version is None and report.error is not None and "boom" in report.error


# --- the head's cache of reports ----------------------------------------------------------------


def test_each_node_is_asked_once_and_a_failed_report_is_asked_again() -> None:
    asked: list[str] = []
    answers: dict[str, Any] = {"a": None, "b": ray.exceptions.RayError("node died")}

    def poll(ref: str) -> NodeReport | None:
        answer = answers[ref]
        if isinstance(answer, Exception):
            raise answer
        return cast("NodeReport | None", answer)

    def submit(node_id: str) -> str:
        asked.append(node_id)
        return node_id

    reports = NodeReports(submit=submit, poll=poll)
    assert reports.refresh(["a", "b"]) is False and reports.version_of("a") is None
    answers.update(a=NodeReport("/sg/python", "0.5.23"), b=NodeReport(None, None))
    assert reports.refresh(["a", "b"]) is True
    assert asked == ["a", "b", "b"]  # a still pending the second time: not asked twice
    assert (reports.version_of("a"), reports.version_of("b")) == ("0.5.23", None)
    reports.refresh(["a", "b"])
    assert asked == ["a", "b", "b"]  # both reported: nobody asked again


# --- what the head offers ------------------------------------------------------------------------


def test_one_offer_per_gpu_type_and_version_on_the_node_with_most_free_gpus() -> None:
    versions = {N1: "0.5.23", N2: "0.5.23", N3: "0.5.20", N4: None}
    free = {N1: {"H200": 2.0}, N2: {"H200": 5.0}, N3: {"H200": 8.0}, N4: {"H100": 0.5}}
    got = {(o.gpu_type, o.sglang_version): (o.node_id, o.gpu_count) for o in offers(free, versions.get)}
    assert got == {("H200", "0.5.23"): (N2, 5), ("H200", "0.5.20"): (N3, 8)}  # N4: less than one GPU free


def test_the_task_is_pinned_to_the_node_it_was_claimed_for() -> None:
    options = task_options(minimal_plan(engine="sglang", sglang_version="0.5.23"), N1)
    assert options["scheduling_strategy"].node_id == N1 and options["scheduling_strategy"].soft is False
    assert options["num_gpus"] == 1 and options["resources"] == {"benchdeck_gpu:H200": 1.0}
    assert "scheduling_strategy" not in task_options(minimal_plan())


# --- the head claims for the node -----------------------------------------------------------------


@pytest.fixture
def head(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RayRunner:
    monkeypatch.delenv("BENCHDECK_SGLANG_PYTHON", raising=False)  # the head has no SGLang
    settings = Settings(db=store.db_path, runner_id="head", work_dir=tmp_path / "runs")
    runner = RayRunner(settings, store)
    assert runner.sglang_version is None
    return runner


def _cluster(monkeypatch: pytest.MonkeyPatch, head: RayRunner, reports: dict[str, NodeReport]) -> list[Offer]:
    """Nodes n1..: two free H200 each, with ``reports``; returns the offers the head claimed with."""
    nodes = [_node(node_id) for node_id in reports]
    monkeypatch.setattr(ray_executor.ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray_executor, "free_by_node", lambda: {n["NodeID"]: {"H200": 2.0} for n in nodes})
    head.reports = FakeReports(reports)
    started: list[Offer] = []
    monkeypatch.setattr(head, "_start_attempt", lambda claim, offer: started.append(offer))
    return started


def test_a_pinned_sglang_run_waits_for_a_node_with_its_version(
    head: RayRunner, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = store.submit_run(minimal_plan(engine="sglang", sglang_version="0.5.23"), submitted_by=operator("t"))
    started = _cluster(monkeypatch, head, {N1: NodeReport(None, None), N2: NodeReport("/p", "0.5.20")})
    assert head._claim_what_fits() is False and store.get_run(run_id).status == "queued"
    started = _cluster(monkeypatch, head, {N1: NodeReport(None, None),
                                           N3: NodeReport("/p", "0.5.23", SCHEMA_0523)})
    assert head._claim_what_fits() is True
    assert [(o.node_id, o.sglang_version) for o in started] == [(N3, "0.5.23")]


def test_the_runners_table_shows_each_nodes_own_version(
    head: RayRunner, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster(monkeypatch, head, {N1: NodeReport(None, None), N3: NodeReport("/sg/python", "0.5.23", SCHEMA_0523)})
    head._claim_what_fits()  # the reports arrive: the nodes are registered again with them
    rows = {json.loads(r.info)["node_id"]: r for r in store.list_runners() if r.id.startswith("ray:")}
    assert (rows[N1].sglang_version, rows[N3].sglang_version) == (None, "0.5.23")
    assert json.loads(rows[N3].info)["sglang_python"] == "/sg/python"
    assert "0.5.23" in {v.version for v in store.schema_versions()}


def test_emulator_runs_go_to_any_node_reported_or_not(
    head: RayRunner, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.submit_run(minimal_plan(), submitted_by=operator("t"))
    started = _cluster(monkeypatch, head, {N1: NodeReport(None, None)})
    assert head._claim_what_fits() is True and [o.node_id for o in started] == [N1]


class _FakeRemote:
    def __init__(self) -> None:
        self.options_seen: dict[str, Any] = {}
        self.args: tuple[Any, ...] = ()

    def options(self, **options: Any) -> _FakeRemote:
        self.options_seen = options
        return self

    def remote(self, *args: Any) -> str:
        self.args = args
        return "task"


def test_the_attempt_runs_with_the_nodes_version_and_schema(
    head: RayRunner, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.submit_run(minimal_plan(engine="sglang"), submitted_by=operator("t"))
    started = _cluster(monkeypatch, head, {N3: NodeReport("/p", "0.5.23", SCHEMA_0523)})
    claims: list[Claim] = []

    def start(claim: Claim, offer: Offer) -> None:
        claims.append(claim)
        started.append(offer)

    monkeypatch.setattr(head, "_start_attempt", start)
    head._claim_what_fits()
    fake = _FakeRemote()
    monkeypatch.setattr(ray_executor, "remote_attempt", fake)
    monkeypatch.setattr(head, "_follow", lambda ctx, claim, task: (
        (AttemptStatus.FAILED, FailureKind.BAD_ARGS, "stop here"), None))
    head.active[claims[0].attempt_id] = ray_executor.ActiveAttempt(claims[0], "H200", cast(Any, None), node_id=N3)
    head._execute_on_node(claims[0], started[0])
    assert fake.args[4:] == ("0.5.23", SCHEMA_0523)
    assert fake.options_seen["scheduling_strategy"].node_id == N3


def test_flags_are_checked_against_the_installed_schema_of_the_launched_version() -> None:
    nothing = cast(Any, None)  # what the schema choice does not read
    execution = AttemptExecution(nothing, None, None, {}, None, nothing, None, nothing, installed_schema=SCHEMA_0523)
    installed = execution._installed_schema_of("0.5.23")
    assert installed is not None and installed.version == "0.5.23"
    assert execution._installed_schema_of("0.5.20") is None  # another version: its shipped schema
