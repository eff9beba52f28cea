"""NVML telemetry on a real NVIDIA GPU (marked ``gpu``: skipped where NVML is absent, as in
CI; run on the lent H200 with ``pytest --noconftest -m gpu tests/test_gpu_nvml.py``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runner.telemetry import Sampler, open_nvml, summarise

pytestmark = pytest.mark.gpu

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 10
while time.time() < end:
    (a @ a).sum().item()
"""


def test_sampler_reads_plausible_values_under_load() -> None:
    nvml, reason = open_nvml()
    if nvml is None:
        pytest.skip(f"no NVIDIA GPU here: {reason}")
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    try:
        time.sleep(4)
        sampler = Sampler(nvml.read, hz=4)
        sampler.start()
        time.sleep(4)
        rows = {(r["device"], r["metric"]): r for r in summarise(sampler.stop(), since=None)}
    finally:
        load.wait(timeout=60)
    assert sampler.errors == 0
    assert rows[(0, "util_pct")]["max"] >= 50
    assert rows[(0, "power_w")]["max"] > 150
    assert rows[(0, "sm_clock_mhz")]["max"] > 500
    assert rows[(0, "mem_used_gb")]["max"] > 0.1
    assert rows[(0, "clock_event_reasons")]["n"] >= 12  # 4 Hz for 4 s


HOLD = """
import sys, time, torch
held = torch.empty(int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
held.fill_(1)
print("holding", flush=True)
time.sleep(600)
"""


def test_a_process_holding_gpu_memory_is_foreign_and_a_group_kill_returns_memory_to_baseline(tmp_path) -> None:
    """Fault cases 5, 9 and 20 (docs/fault-suite.md) on a real GPU: the guard sees another process's
    GPU memory (named by NVML, or by memory above the idle floor where a container hides
    the PID), and killing the holder's process group, as teardown and cancel do, gives the
    memory back to the baseline the runner compares against."""
    import os

    from runner import host
    from runner.process import start_child, stop_group

    nvml, reason = open_nvml()
    if nvml is None:
        pytest.skip(f"no NVIDIA GPU here: {reason}")
    baseline = host.gpu_memory_used_gb(nvml)
    assert baseline is not None
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0) == []
    log = tmp_path / "hold.log"
    child = start_child([sys.executable, "-c", HOLD, "16"], log_path=log, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while "holding" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            assert child.alive, log.read_text(errors="replace")
            time.sleep(0.5)
        foreign = host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0)
        print("foreign while holding:", foreign, "baseline GB:", baseline)
        assert foreign and max(gb for _, _, gb in foreign) >= 15
    finally:
        stop_group(child.pgid, grace_s=5, popen=child.popen)
    deadline = time.monotonic() + 30
    while (host.gpu_memory_used_gb(nvml) or 0) > baseline + 1.0 and time.monotonic() < deadline:
        time.sleep(0.5)
    after = host.gpu_memory_used_gb(nvml)
    print("GPU memory after the group kill (GB):", after)
    assert after is not None and after <= baseline + 1.0
    assert host.foreign_gpu_processes(nvml, set(), idle_memory_gb=2.0) == []
