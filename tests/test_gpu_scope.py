"""Per-run GPU scoping and measured hardware (issue 14), against a stand-in NVML
(tests/support/fake_nvml.py): the run's GPUs are its servers' CUDA_VISIBLE_DEVICES entries
resolved to NVML UUIDs; telemetry, the GPU guard and the teardown check cover those GPUs
only; the GPU type NVML names must be the one the settings declare.  The same on a real
GPU: tests/test_gpu_nvml.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from db import Store
from domain.plan.gpu_claim import busy_gpus_of
from domain.plan.run_plan import RunPlan
from domain.plan.topology import snapshot_gpus
from domain.results.analysis import summarise_points
from domain.results.curve import pareto_points
from domain.results.frames import point_row
from runner import host
from runner import server_process as engine_module
from runner.attempt import AttemptExecution
from runner.daemon import Runner
from runner.telemetry import GpuScopeError, NvmlReader, Sampler, open_nvml, summarise
from tests.support.actors import operator
from tests.support.attempt_stub import stub_execution
from tests.support.fake_nvml import FakeGpu, FakeNvml, h200_host
from tests.support.runner_harness import runner_row, runner_settings, small_plan

IDLE_GB = 2.0


@pytest.fixture
def own_group() -> Iterator[int]:
    """A real process in a process group of its own: one of this runner's other runs."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        yield proc.pid  # a session leader: its pgid is its pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


# --- CUDA_VISIBLE_DEVICES entries → NVML UUIDs ---------------------------------------------------


def test_an_entry_resolves_by_index_uuid_prefix_or_mig_parent() -> None:
    fake = h200_host(3)
    fake.gpus[2].migs = ("MIG-7f1e0000-0000-0000-0000-000000000001",)
    nvml = NvmlReader(fake)
    uuids = nvml.uuids
    assert nvml.resolve("1") == uuids[1]
    assert nvml.resolve(uuids[2]) == uuids[2]
    assert nvml.resolve(uuids[0][:12]) == uuids[0]  # GPU-00000000: CUDA accepts a unique prefix
    assert nvml.resolve("MIG-7f1e0000-0000-0000-0000-000000000001") == uuids[2]
    for wrong in ("3", "GPU-ffffffff", "GPU-0000", "MIG-unknown", "cuda:0"):
        with pytest.raises(GpuScopeError):
            nvml.resolve(wrong)  # out of range, unknown, ambiguous (GPU-0000 is every GPU here), not an entry


def test_a_runs_gpu_ids_go_through_the_runners_own_visible_devices() -> None:
    nvml = NvmlReader(h200_host(4))
    uuids = nvml.uuids
    assert host.run_gpus(nvml, [0], None) == {uuids[0]}
    assert host.run_gpus(nvml, [0, 1], "2,3") == {uuids[2], uuids[3]}  # a Ray node given GPUs 2 and 3
    assert host.run_gpus(nvml, [1], f"{uuids[3]},{uuids[1]}") == {uuids[1]}  # GPU-… entries, in the runner's order
    assert host.run_gpus(None, [0], None) is None  # no NVML: nothing to scope
    with pytest.raises(GpuScopeError):
        host.run_gpus(nvml, [2], "2,3")  # the runner was given two GPUs
    assert host.runner_gpus(nvml, None, 8) == set(uuids) and host.runner_gpus(nvml, None, 2) == set(uuids[:2])
    assert host.runner_gpus(nvml, "3,1", 1) == {uuids[3]} and host.runner_gpus(None, "3", 1) is None


# --- telemetry --------------------------------------------------------------------------------------


def test_a_tp1_run_on_an_8_gpu_host_samples_its_own_gpu_with_its_uuid() -> None:
    fake = h200_host(8)
    fake.gpus[5].util_pct = 90
    nvml = NvmlReader(fake)
    gpus = host.run_gpus(nvml, [0], "5")  # the runner was given GPU 5 only
    samples = nvml.reader(gpus)(1000.0)
    assert {(s.device, s.gpu_uuid) for s in samples} == {(5, fake.gpus[5].uuid)}
    rows = summarise(samples, since=None)
    util = [r for r in rows if r["metric"] == "util_pct"]
    # The whole host would average 90 % with seven idle GPUs to 11.25 %.
    assert [(r["device"], r["mean"], r["note"]) for r in util] == [(5, 90.0, fake.gpus[5].uuid)]


def test_the_sampler_thread_reads_only_the_scoped_gpus() -> None:
    nvml = NvmlReader(h200_host(2))
    sampler = Sampler(nvml.reader(frozenset({nvml.uuids[1]})), hz=50)
    sampler.start()
    samples = sampler.stop() if _wait_for_samples(sampler) else []
    assert samples and {s.gpu_uuid for s in samples} == {nvml.uuids[1]} and sampler.errors == 0


def _wait_for_samples(sampler: Sampler) -> bool:
    import time

    deadline = time.monotonic() + 5
    while not sampler.samples and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(sampler.samples)


# --- the GPU guard --------------------------------------------------------------------------------


def test_the_guard_catches_a_process_on_the_runs_gpus_and_ignores_one_elsewhere() -> None:
    fake = h200_host(2)
    fake.gpus[1].processes = [(4242, 20.0)]
    fake.gpus[1].used_gb = 20.5
    nvml = NvmlReader(fake)
    mine, other = frozenset({nvml.uuids[0]}), frozenset({nvml.uuids[1]})
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB, gpus=mine) == []
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB, gpus=other) == [(1, 4242, 20.0)]
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB) == [(1, 4242, 20.0)]  # whole host


def test_memory_without_a_named_process_counts_only_on_the_runs_gpus() -> None:
    fake = h200_host(2)
    fake.gpus[1].used_gb = 30.0  # another container's process: NVML cannot name it
    nvml = NvmlReader(fake)
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB, gpus=frozenset({nvml.uuids[0]})) == []
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB,
                                      gpus=frozenset({nvml.uuids[1]})) == [(1, 0, 30.0)]


def test_a_process_of_the_runners_own_other_run_is_not_foreign(own_group: int) -> None:
    fake = h200_host(1)
    fake.gpus[0].processes = [(own_group, 40.0)]
    fake.gpus[0].used_gb = 40.5  # its memory: explained by the listed process, not an unnamed user
    nvml = NvmlReader(fake)
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB, own_groups={own_group}) == []
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=IDLE_GB) == [(0, own_group, 40.0)]


# --- measured hardware ------------------------------------------------------------------------------


def test_hardware_is_measured_where_nvml_is_and_declared_where_it_is_not() -> None:
    nvml = NvmlReader(h200_host(2))
    facts = host.gpu_facts(nvml, None, declared_type="H200", declared_count=8)
    assert facts["source"] == "measured" and facts["count"] == 2
    assert (facts["driver"], facts["cuda"]) == ("570.124.06", 12080)
    assert [(g["uuid"], g["name"], round(g["memory_gb"], 1)) for g in facts["gpus"]] == [
        (u, "NVIDIA H200", 143.8) for u in nvml.uuids]
    assert facts["declared"] == {"type": "H200", "count": 8}
    bare = host.gpu_facts(None, "NVML unavailable: no driver", declared_type="H200", declared_count=8)
    assert bare == {"available": False, "reason": "NVML unavailable: no driver", "source": "declared",
                    "declared": {"type": "H200", "count": 8}}


@pytest.mark.parametrize(("declared", "name", "agrees"), [
    ("H200", "NVIDIA H200", True),
    ("H200", "NVIDIA H200 NVL", True),
    ("h100", "NVIDIA H100 80GB HBM3", True),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("H200", "NVIDIA H100 80GB HBM3", False),
    ("H10", "NVIDIA H100 80GB HBM3", False),  # a part of a word is not a word
    ("B200", "NVIDIA H200", False),
])
def test_the_declared_gpu_type_must_be_words_of_nvmls_device_name(declared: str, name: str, agrees: bool) -> None:
    nvml = NvmlReader(FakeNvml([FakeGpu("GPU-1", name=name)]))
    reason = host.gpu_type_mismatch(nvml, declared)
    assert (reason is None) is agrees
    if not agrees:
        assert declared in reason and name in reason
    assert host.gpu_type_mismatch(None, declared) is None  # no NVML: the setting stands


def test_an_h100_next_to_the_runners_h200s_matters_only_if_it_is_the_runners() -> None:
    fake = h200_host(2)
    fake.gpus[1].name = "NVIDIA H100 80GB HBM3"
    nvml = NvmlReader(fake)
    assert host.gpu_type_mismatch(nvml, "H200", frozenset({nvml.uuids[0]})) is None
    assert "H100" in host.gpu_type_mismatch(nvml, "H200")


def test_per_gpu_figures_divide_by_the_gpus_the_topology_uses() -> None:
    plan = small_plan(gpu={"type": "H200", "count": 8},
                      topology={"kind": "pd", "prefill": {"count": 1, "gpus_per_server": 2},
                                "decode": {"count": 1, "gpus_per_server": 1}})
    snapshot = plan.topology.snapshot()
    assert snapshot_gpus(snapshot, 8) == 3 and snapshot_gpus({"kind": "aggregated"}, 8) == 8
    row = point_row({"run_id": 1, "source": "measured", "gpu_count": 8, "topology": snapshot, "scenario": "s",
                     "concurrency": 4, "repeat_idx": 0, "output_throughput": 300.0, "tpot_median_ms": 10.0})
    assert (row["gpu_count"], row["gpus_used"]) == (8, 3)
    import pandas as pd

    pareto = pareto_points(summarise_points(pd.DataFrame([row])))
    assert pareto.iloc[0]["throughput_per_gpu"] == pytest.approx(100.0)  # 300 tok/s over 3 GPUs, not 8


# --- the attempt: guard, host facts and teardown on the run's GPUs ----------------------------------


def _execution(tmp_path: Path, fake: FakeNvml, plan: RunPlan, unhealthy: list[str],
               own: set[int] | None = None) -> AttemptExecution:
    return stub_execution(tmp_path, NvmlReader(fake), plan, unhealthy, own)


def _router_plan(engine: str = "sglang") -> RunPlan:
    """Two replicas of one GPU each: GPUs 0 and 1 of the runner's."""
    return small_plan(engine=engine, gpu={"type": "H200", "count": 2},
                      topology={"kind": "router", "replicas": {"count": 2, "gpus_per_server": 1}})


def test_the_attempt_scopes_to_its_topologys_gpus_and_ignores_a_neighbour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")  # this runner was given GPUs 1 and 2 of four
    fake = h200_host(4)
    fake.gpus[0].processes, fake.gpus[0].used_gb = [(4242, 60.0)], 60.5  # another run's server, outside the set
    unhealthy: list[str] = []
    execution = _execution(tmp_path, fake, _router_plan(), unhealthy)
    execution.ctx.gpus = execution._run_gpus()
    assert execution.ctx.gpus == {fake.gpus[1].uuid, fake.gpus[2].uuid}
    execution._guard_gpus()  # GPU 0 is not this run's: no refusal
    run_gpus = execution._attempt_host_info()["run_gpus"]
    assert [g["uuid"] for g in run_gpus["gpus"]] == [fake.gpus[1].uuid, fake.gpus[2].uuid]
    fake.gpus[2].processes = [(5151, 10.0)]  # a foreign process on one of the run's GPUs
    with pytest.raises(engine_module.AttemptFailure) as failure:
        execution._guard_gpus()
    assert failure.value.kind == "host_unhealthy" and fake.gpus[2].uuid in str(failure.value)
    assert unhealthy and "pid 5151" in unhealthy[0] and "4242" not in unhealthy[0]


def test_the_guard_leaves_the_runners_own_process_groups_alone(tmp_path: Path, own_group: int) -> None:
    fake = h200_host(2)
    fake.gpus[0].processes = [(own_group, 30.0)]
    unhealthy: list[str] = []
    execution = _execution(tmp_path, fake, small_plan(engine="sglang"), unhealthy, own={own_group})
    execution.ctx.gpus = execution._run_gpus()
    execution._guard_gpus()
    assert unhealthy == []


def test_a_topology_reaching_past_the_runners_gpus_fails_a_real_run_and_widens_an_emulated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = h200_host(1)
    with pytest.raises(engine_module.AttemptFailure, match="GPU 1 does not exist"):
        _execution(tmp_path, fake, _router_plan(), [])._run_gpus()
    assert _execution(tmp_path, fake, _router_plan("emulator"), [])._run_gpus() is None  # as before: every GPU


def test_teardown_checks_each_of_the_runs_gpus_against_its_own_baseline(tmp_path: Path) -> None:
    fake = h200_host(2)
    unhealthy: list[str] = []
    execution = _execution(tmp_path, fake, small_plan(engine="sglang"), unhealthy)
    ctx = execution.ctx
    ctx.gpus = execution._run_gpus()
    ctx.baseline_gpu_gb = host.gpu_memory_by_gpu(execution.nvml, ctx.gpus)
    assert list(ctx.baseline_gpu_gb) == [fake.gpus[0].uuid]
    fake.gpus[1].used_gb = 70.0  # another run started on GPU 1 meanwhile
    execution._check_gpu_memory()
    assert unhealthy == []
    fake.gpus[0].used_gb = 12.0  # ours: a server that did not give its memory back
    ctx.settings = ctx.settings.model_copy(update={"gpu_settle_s": 0.6})
    execution._check_gpu_memory()
    assert len(unhealthy) == 1 and fake.gpus[0].uuid in unhealthy[0] and fake.gpus[1].uuid not in unhealthy[0]
    assert "waited 0.6 s" in unhealthy[0]


def test_teardown_gives_the_memory_a_bounded_time_to_come_back(tmp_path: Path) -> None:
    """The driver frees a killed server's memory a moment later: within the settle time the
    host stays healthy; the wait ends as soon as the memory is back."""
    import threading
    import time

    fake = h200_host(1)
    unhealthy: list[str] = []
    execution = _execution(tmp_path, fake, small_plan(engine="sglang"), unhealthy)
    ctx = execution.ctx
    ctx.settings = ctx.settings.model_copy(update={"gpu_settle_s": 10.0})
    ctx.gpus = execution._run_gpus()
    ctx.baseline_gpu_gb = host.gpu_memory_by_gpu(execution.nvml, ctx.gpus)
    fake.gpus[0].used_gb = 40.0
    threading.Timer(0.7, lambda: setattr(fake.gpus[0], "used_gb", 0.5)).start()
    started = time.monotonic()
    assert execution._check_gpu_memory() is None and unhealthy == []
    assert time.monotonic() - started < 5


# --- the daemon's pre-flight --------------------------------------------------------------------------


def _runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeNvml, **settings: object) -> Runner:
    monkeypatch.setattr("runner.daemon.open_nvml", lambda: open_nvml(fake))
    runner = Runner(runner_settings(tmp_path / "db.duckdb", tmp_path / "runs", **settings))
    runner.start()
    return runner


def test_a_gpu_type_nvml_contradicts_refuses_to_claim_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    runner = _runner(tmp_path, monkeypatch, h200_host(2), runner_gpu_type="H100", runner_gpu_count=2)
    run_id, _ = runner.store.submit_run(small_plan(gpu={"type": "H100", "count": 1}),
                                        submitted_by=operator("alice"))
    assert runner.run_once() is False
    row = runner_row(runner.store, runner.caps.runner_id)
    assert row.healthy is False and "GPU type mismatch" in row.unhealthy_reason
    assert "'H100'" in row.unhealthy_reason and "NVIDIA H200" in row.unhealthy_reason
    assert runner.store.get_run(run_id).status == "queued"
    assert runner.host_info["gpu"]["source"] == "measured" and runner.host_info["gpu"]["count"] == 2


def test_preflight_covers_the_runners_gpus_and_not_its_own_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_group: int
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fake = h200_host(2)
    fake.gpus[1].processes = [(4242, 20.0)]  # a neighbour on a GPU this runner was not given
    runner = _runner(tmp_path, monkeypatch, fake, runner_gpu_count=1)
    assert runner._preflight() is None and runner.busy_gpus == {}
    fake.gpus[0].processes = [(own_group, 30.0)]
    assert runner._preflight() is None  # a foreign user keeps the runs on its GPU waiting, not the host
    assert "foreign process" in runner.busy_gpus[0]  # not recorded as ours yet
    store: Store = runner.store
    store.submit_run(small_plan(), submitted_by=operator("alice"))
    claim = store.claim_next(runner.caps, lease_s=60)
    from db.store import ProcessGroup

    store.record_child(claim.attempt_id, runner.caps.runner_id, ProcessGroup(own_group, 0.0, "server"))
    assert runner._own_groups() == {own_group}
    assert runner._preflight() is None and runner.busy_gpus == {}  # a process group of this runner's own run


def test_the_claim_skips_a_run_whose_gpus_a_foreign_process_holds_and_takes_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the runner's GPU 1 is NVML's GPU 3
    fake = h200_host(4)
    fake.gpus[3].processes = [(4242, 20.0)]
    runner = _runner(tmp_path, monkeypatch, fake, runner_gpu_count=2)
    tp2, _ = runner.store.submit_run(small_plan(gpu={"type": "H200", "count": 2}), submitted_by=operator("alice"))
    tp1, _ = runner.store.submit_run(small_plan(), submitted_by=operator("alice"))
    runner._check_health()
    assert runner.healthy and list(runner.busy_gpus) == [1] and fake.gpus[3].uuid in runner.busy_gpus[1]
    claim = runner.store.claim_next(runner.caps, lease_s=60, accept=runner._gpus_free)
    assert claim is not None and claim.run_id == tp1 and runner.store.get_run(tp2).status == "queued"
    [row] = runner.store.list_runners()
    assert "4242" in busy_gpus_of(row.info)[1]


# --- end to end: the emulator and the real bench_serving client, the stand-in NVML ---------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_a_run_on_gpu_0_measures_gpu_0_beside_a_neighbour_on_gpu_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = h200_host(2)
    fake.gpus[0].util_pct = 70
    fake.gpus[1].processes, fake.gpus[1].used_gb, fake.gpus[1].util_pct = [(4242, 60.0)], 60.5, 100
    runner = _runner(tmp_path, monkeypatch, fake, runner_gpu_count=1)
    run_id, _ = runner.store.submit_run(small_plan(), submitted_by=operator("alice"))  # one GPU: GPU 0
    assert runner.run_once() is True
    assert runner.store.get_run(run_id).status == "succeeded" and runner.healthy
    gpu_rows = [t for t in runner.store.telemetry_of(run_id) if t.source == "gpu"]
    assert gpu_rows and {(t.device, t.note) for t in gpu_rows} == {(0, fake.gpus[0].uuid)}
    assert {t.mean for t in gpu_rows if t.metric == "util_pct"} == {70.0}
    [attempt] = runner.store.attempts_of(run_id)
    import json

    recorded = json.loads(attempt.host_info)
    assert [g["uuid"] for g in recorded["run_gpus"]["gpus"]] == [fake.gpus[0].uuid]
    assert recorded["gpu"]["source"] == "measured" and recorded["gpu"]["count"] == 2
