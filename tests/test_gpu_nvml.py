"""NVML telemetry, the GPU guard and the teardown check on a real NVIDIA GPU, scoped to a
run's GPUs (marked ``gpu``: skipped where NVML is absent, as in CI; run on the lent H200
with ``pytest --noconftest -m gpu -s tests/test_gpu_nvml.py``; ``-s`` shows the readings).

The load and the memory holder are torch programs, run with the first interpreter that
has torch: BENCHDECK_TORCH_PYTHON, this one, or ``python3`` on PATH.  That machine has
one GPU, so "a process on another GPU" is a run whose set holds a UUID that is not GPU 0's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import host
from runner import server_process as engine_module
from runner.attempt import AttemptExecution
from runner.telemetry import NvmlReader, Sampler, open_nvml, summarise
from tests.support.attempt_stub import stub_execution
from tests.support.runner_harness import small_plan

pytestmark = pytest.mark.gpu
NOT_GPU_0 = "GPU-00000000-0000-0000-0000-000000000000"  # a UUID no GPU has: "another GPU" of a one-GPU host


def _nvml() -> NvmlReader:
    nvml, reason = open_nvml()
    if nvml is None:
        pytest.skip(f"no NVIDIA GPU here: {reason}")
    return nvml


def _torch_python() -> str:
    candidates = [os.environ.get("BENCHDECK_TORCH_PYTHON"), sys.executable, shutil.which("python3")]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import torch"], capture_output=True, check=False).returncode == 0:
            return python
    pytest.skip("no interpreter with torch for the GPU load (set BENCHDECK_TORCH_PYTHON)")


def _show(label: str, value: object) -> None:
    print(f"[gpu-test] {label}: {json.dumps(value, default=str)}", flush=True)

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 10
while time.time() < end:
    (a @ a).sum().item()
"""


def test_a_run_scoped_to_gpu_0_reports_its_own_utilisation_with_the_uuid() -> None:
    nvml = _nvml()
    facts = host.gpu_facts(nvml, None, declared_type="H200", declared_count=1)
    _show("measured hardware", facts)
    names = [g["name"] for g in facts["gpus"]]
    type_check = {t: host.gpu_type_mismatch(nvml, t) for t in ("H200", "B200")}
    _show("GPU type check (declared -> refusal, None = agrees)", type_check)
    assert type_check["B200"] is not None
    if any("H200" in name for name in names):
        assert type_check["H200"] is None
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = host.run_gpus(nvml, [0], inherited)
    assert gpus is not None and len(gpus) == 1
    [uuid] = gpus
    _show("run GPU ids [0] with the runner's CUDA_VISIBLE_DEVICES", {"inherited": inherited, "uuids": sorted(gpus)})
    assert host.run_gpus(nvml, [0], uuid) == gpus  # the same GPU, named by UUID in CUDA_VISIBLE_DEVICES
    load = subprocess.Popen([_torch_python(), "-c", LOAD])
    try:
        time.sleep(4)
        sampler = Sampler(nvml.reader(gpus), hz=4)
        sampler.start()
        time.sleep(4)
        samples = sampler.stop()
    finally:
        load.wait(timeout=60)
    summary = summarise(samples, since=None)
    for row in summary:
        _show("scoped summary", row)
    rows = {row["metric"]: row for row in summary}
    index = nvml.uuids.index(uuid)
    assert sampler.errors == 0
    assert {s.gpu_uuid for s in samples} == {uuid} and {s.device for s in samples} == {index}
    assert {row["note"] for row in summary} == {uuid}  # the UUID reaches the stored summaries
    assert rows["util_pct"]["max"] >= 50
    assert rows["power_w"]["max"] > 150
    assert rows["sm_clock_mhz"]["max"] > 500
    assert rows["mem_used_gb"]["max"] > 0.1
    assert rows["clock_event_reasons"]["n"] >= 12  # 4 Hz for 4 s
    assert nvml.reader(frozenset({NOT_GPU_0}))(time.time()) == []  # another run's GPU: nothing of GPU 0


HOLD = """
import sys, time, torch
held = torch.empty(int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
held.fill_(1)
print("holding", flush=True)
time.sleep(600)
"""


def test_a_foreign_process_is_caught_on_the_runs_gpu_only_and_teardown_checks_its_baseline(
    tmp_path: Path,
) -> None:
    """Fault cases 5, 9 and 20 (docs/fault-suite.md) on a real GPU, per run: the guard sees
    another process's GPU memory on the run's GPU (named by NVML, or by memory above the
    idle floor where a container hides the PID) and ignores it for a run whose set is
    another GPU; killing the holder's process group, as teardown and cancel do, gives the
    run's GPU back its baseline."""
    from runner.process import start_child, stop_group

    nvml = _nvml()
    mine = host.run_gpus(nvml, [0], os.environ.get("CUDA_VISIBLE_DEVICES"))
    other = frozenset({NOT_GPU_0})
    assert mine is not None and not mine & other
    plan = small_plan(engine="sglang")
    unhealthy: list[str] = []
    execution = stub_execution(tmp_path, nvml, plan, unhealthy)
    execution.ctx.gpus = mine
    baseline = host.gpu_memory_by_gpu(nvml, mine)
    execution.ctx.baseline_gpu_gb = baseline
    _show("run GPUs", {"mine": sorted(mine), "other run's set": sorted(other)})
    _show("memory baseline per GPU (GB)", baseline)
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0, gpus=mine) == []
    log = tmp_path / "hold.log"
    child = start_child([_torch_python(), "-c", HOLD, "16"], log_path=log, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while "holding" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            assert child.alive, log.read_text(errors="replace")
            time.sleep(0.5)
        _check_the_guard_while_holding(execution, nvml, mine, other, child.pgid, unhealthy)
        execution._check_gpu_memory()
        _show("teardown check while the memory is held", unhealthy[-1:])
        assert unhealthy and sorted(mine)[0] in unhealthy[-1]
    finally:
        stop_group(child.pgid, grace_s=5, popen=child.popen)
    _check_memory_back(execution, nvml, mine, baseline, unhealthy)


def _check_the_guard_while_holding(execution: AttemptExecution, nvml: NvmlReader, mine: frozenset[str],
                                   other: frozenset[str], pgid: int, unhealthy: list[str]) -> None:
    inside = host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0, gpus=mine)
    outside = host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0, gpus=other)
    as_own_run = host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0, gpus=mine, own_groups={pgid})
    named = [pid for _, pid, _ in nvml.compute_pids(mine)]
    _show("NVML compute processes on the run's GPU", nvml.compute_pids(mine))
    _show("guard, run on GPU 0 (foreign)", inside)
    _show("guard, run on another GPU (foreign)", outside)
    _show(f"guard, holder's group {pgid} recorded as this runner's own run (foreign)", as_own_run)
    assert inside and max(gb for _, _, gb in inside) >= 15
    assert outside == []
    if any(pid and os.getpgid(pid) == pgid for pid in named if _alive(pid)):
        assert as_own_run == []  # NVML named the holder: its group is ours
    with pytest.raises(engine_module.AttemptFailure) as refused:
        execution._guard_gpus()
    _show("attempt guard on GPU 0", str(refused.value))
    assert sorted(mine)[0] in str(refused.value)
    execution.ctx.gpus = other
    execution._guard_gpus()  # the same process, outside this run's set: no refusal
    _show("attempt guard on another GPU", "passed")
    execution.ctx.gpus = mine
    unhealthy.clear()


def _alive(pid: int) -> bool:
    try:
        os.getpgid(pid)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _check_memory_back(execution: AttemptExecution, nvml: NvmlReader, mine: frozenset[str],
                       baseline: dict[str, float] | None, unhealthy: list[str]) -> None:
    assert baseline is not None
    deadline = time.monotonic() + 30
    while any(gb > baseline[u] + 1.0 for u, gb in (host.gpu_memory_by_gpu(nvml, mine) or {}).items()) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    after = host.gpu_memory_by_gpu(nvml, mine)
    _show("memory per GPU after the group kill (GB)", after)
    unhealthy.clear()
    execution._check_gpu_memory()
    _show("teardown check after the group kill", unhealthy or "passed")
    assert unhealthy == []
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0, gpus=mine) == []
